package kernels

import (
	"reflect"
	"slices"
	"testing"
)

// TestGDNRingLayout: the model's ring entry is 16·128 normalised k, 32·128 v, 32 beta and 32
// decay floats (24,832 bytes a layer, 745 KB for 30 layers), each part where Ring puts it.
func TestGDNRingLayout(t *testing.T) {
	s := GDNShape{HK: 16, HV: 32, DK: 128, DV: 128}
	if got := s.RingLen(); got != 6208 {
		t.Fatalf("RingLen = %d, want 6208", got)
	}
	entry := recurrentSeq(s.RingLen(), 1) // entry[i] = i+1
	e := s.Ring(entry)
	for _, p := range []struct {
		name        string
		part        []float32
		first, size int
	}{{"k", e.K, 0, 2048}, {"v", e.V, 2048, 4096}, {"beta", e.Beta, 6144, 32}, {"decay", e.Decay, 6176, 32}} {
		if len(p.part) != p.size || p.part[0] != float32(p.first+1) {
			t.Errorf("%s: %d floats from %g, want %d from entry[%d]", p.name, len(p.part), p.part[0], p.size, p.first)
		}
	}
}

// TestGDNCheckGroups: groups must tile the rows, each counted at its first row; keep counts only
// at groups of more than one row, at most the group's rows.
func TestGDNCheckGroups(t *testing.T) {
	for _, c := range []struct {
		groups, keep []uint32
		ok           bool
	}{
		{[]uint32{3, 0, 0, 1, 2, 0}, nil, true},
		{[]uint32{1, 1}, []uint32{0, 0}, true},
		{[]uint32{8, 0, 0, 0, 0, 0, 0, 0}, []uint32{8, 0, 0, 0, 0, 0, 0, 0}, true},
		{[]uint32{4, 0, 0, 0, 1}, []uint32{0, 0, 0, 0, 0}, true},
		{[]uint32{0, 1}, nil, false},                       // row 0 in no group
		{[]uint32{1, 2}, nil, false},                       // past the last row
		{[]uint32{3, 0, 1, 0}, nil, false},                 // a group inside another
		{[]uint32{2, 0}, []uint32{3, 0}, false},            // more kept than verified
		{[]uint32{1, 2, 0}, []uint32{1, 0, 0}, false},      // a plain row's state has moved already
		{[]uint32{2, 0}, []uint32{1, 1}, false},            // a count off a group's first row
		{[]uint32{2, 0}, []uint32{2}, false},               // keep for another step's rows
		{[]uint32{}, []uint32{}, true},                     // nothing
		{[]uint32{2, 0, 2, 0}, []uint32{2, 0, 1, 0}, true}, // two groups
	} {
		if err := GDNCheckGroups(c.groups, c.keep); (err == nil) != c.ok {
			t.Errorf("groups %v keep %v: %v, want ok %v", c.groups, c.keep, err, c.ok)
		}
	}
}

// TestGDNVerifyReferences: GDNVerify's rows are GDNStep run in turn over each group from a copy
// of its state (a plain row's in place), its ring entries GDNRecord's; GDNCommit then leaves a
// group's state where keep GDNSteps would have.
func TestGDNVerifyReferences(t *testing.T) {
	s := GDNShape{HK: 1, HV: 2, DK: 32, DV: 4}
	p := GDNParams{ALog: []float32{0.5, 1}, DtBias: []float32{0.1, -0.2}, NormW: []float32{1, 0.9, 1.1, 1}, Eps: 1e-6}
	groups, keep := []uint32{3, 0, 0, 1}, []uint32{2, 0, 0, 0}
	const rows = 4
	c, hd, n, rl := s.Channels(), s.HV*s.DV, s.StateLen(), s.RingLen()
	qkv, z, a, b := recurrentSeq(rows*c, 0.01), recurrentSeq(rows*hd, 0.07), recurrentSeq(rows*s.HV, 0.3), recurrentSeq(rows*s.HV, -0.4)
	state0 := recurrentSeq(rows*n, 0.001)
	states, ring, y := slices.Clone(state0), make([]float32, rows*rl), make([]float32, rows*hd)
	GDNVerify(s, p, states, ring, y, qkv, z, a, b, groups)

	seq := slices.Clone(state0[:n]) // the group at row 0, one token at a time
	var kept []float32
	for r := range rows {
		if r == 3 {
			seq = slices.Clone(state0[3*n : 4*n]) // the plain row
		}
		yr, er := make([]float32, hd), make([]float32, rl)
		GDNStep(s, p, seq, yr, qkv[r*c:(r+1)*c], z[r*hd:(r+1)*hd], a[r*s.HV:(r+1)*s.HV], b[r*s.HV:(r+1)*s.HV])
		GDNRecord(s, p, er, qkv[r*c:(r+1)*c], a[r*s.HV:(r+1)*s.HV], b[r*s.HV:(r+1)*s.HV])
		if !slices.Equal(y[r*hd:(r+1)*hd], yr) || !slices.Equal(ring[r*rl:(r+1)*rl], er) {
			t.Errorf("row %d: y or ring entry differs from GDNStep's in turn", r)
		}
		if r == 1 {
			kept = slices.Clone(seq)
		}
	}
	if !slices.Equal(states[:3*n], state0[:3*n]) || !slices.Equal(states[3*n:], seq) {
		t.Error("a group's states moved, or the plain row's is not GDNStep's")
	}
	GDNCommit(s, states, ring, keep)
	if !slices.Equal(states[:n], kept) || !slices.Equal(states[n:3*n], state0[n:3*n]) || !slices.Equal(states[3*n:], seq) {
		t.Error("after keeping 2 rows, state 0 is not 2 GDNSteps', or another moved")
	}
}

// TestGDNVerifyCall: the group form is GDNStepRowsCall with GDN_GROUPS set, the groups and ring
// bound at 9 and 10 and threadgroup memory for a group as long as the rows; the plain calls set
// no GDN_GROUPS; rows whose group could overflow 32 KiB panic.
func TestGDNVerifyCall(t *testing.T) {
	s := GDNShape{HK: 16, HV: 32, DK: 128, DV: 128}
	step := GDNStepBuffers[int]{QKV: 1, Z: 2, A: 3, Beta: 4, ALog: 5, DtBias: 6, NormW: 7, State: 8, Y: 9}
	got := GDNVerifyCall(s, 1e-6, GDNSimdgroups, 8, GDNVerifyBuffers[int]{GDNStepBuffers: step, Groups: 10, Ring: 11})
	want := GDNStepRowsCall(s, 1e-6, GDNSimdgroups, 8, step)
	want.Constants[GDNGroups] = true
	want.Buffers[9], want.Buffers[10] = 10, 11
	want.ThreadgroupMem[0] = 4 * 8 * (128 + 256 + 34)
	if !reflect.DeepEqual(got, want) {
		t.Errorf("GDNVerifyCall: %+v, want %+v", got, want)
	}
	if _, set := GDNStepRowsCall(s, 1e-6, GDNSimdgroups, 8, step).Constants[GDNGroups]; set {
		t.Error("the plain multi-row call sets GDN_GROUPS")
	}
	commit := GDNCommitCall(s, GDNSimdgroups, 8, GDNCommitBuffers[int]{State: 1, Ring: 2, Keep: 3})
	if commit.Threadgroups != [3]int{32, 8, 1} || commit.Group != [3]int{1024, 1, 1} || len(commit.Buffers) != 3 {
		t.Errorf("GDNCommitCall: %+v", commit)
	}
	defer func() {
		if recover() == nil {
			t.Error("20 rows of the model's shape (34 KB of threadgroup memory): no panic")
		}
	}()
	GDNVerifyCall(s, 1e-6, GDNSimdgroups, 20, GDNVerifyBuffers[int]{GDNStepBuffers: step, Groups: 10, Ring: 11})
}
