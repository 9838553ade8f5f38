package kernels

import (
	"fmt"
	"slices"
)

// Speculative decoding verifies a sequence's K drafted tokens as K+1 consecutive rows of the
// multi-row decode step, a group. The DeltaNet recurrence must run a group's rows in turn from the
// sequence's committed state, and only afterwards does the host know how many rows to keep. So
// gdn_step's group form (GDNVerifyCall) computes every row's y without moving a group's state,
// recording each row's inputs to the state update in a ring ([R][RingLen]), and gdn_commit
// (GDNCommitCall) replays the kept rows from the ring into the state: a row's record is ~24 KB a
// layer where a copy of the state would be 2 MB.

// GDNMaxThreadgroupMem is the most threadgroup memory a kernel may ask for (Apple GPUs: 32 KiB).
const GDNMaxThreadgroupMem = 32 << 10

// RingLen is the floats of one row's ring entry: every key head's normalised k, every value
// head's v, beta and decay (GDNRingEntry).
func (s GDNShape) RingLen() int { return s.HK*s.DK + s.HV*s.DV + 2*s.HV }

// GDNRingEntry is a row's ring entry by part, in the order the entry stores them: what gdn_step's
// state update reads besides the state.
type GDNRingEntry struct {
	K     []float32 // [HK][DK] each key head's k, L2-normalised
	V     []float32 // [HV][DV] each value head's v (the conv output's)
	Beta  []float32 // [HV] sigmoid(b)
	Decay []float32 // [HV] exp(-exp(A_log)·softplus(a + dt_bias))
}

// Ring is entry (RingLen floats) by part; the parts share its memory.
func (s GDNShape) Ring(entry []float32) GDNRingEntry {
	k, v := s.HK*s.DK, s.HV*s.DV
	return GDNRingEntry{K: entry[:k], V: entry[k : k+v], Beta: entry[k+v : k+v+s.HV], Decay: entry[k+v+s.HV : k+v+2*s.HV]}
}

// GroupThreadgroupMem is the group form's [[threadgroup(0)]] length in bytes over rows rows
// (the longest group they can hold): per row the column outputs (DV), normalised q and k (2·DK),
// a Σ o² per simdgroup (32) and beta and decay (2), rounded up to 16.
func (s GDNShape) GroupThreadgroupMem(rows int) int {
	return (4*rows*(s.DV+2*s.DK+34) + 15) &^ 15
}

// GDNCheckGroups reports whether groups ([R]) splits the rows into groups (the count at a
// group's first row, 0 at its others) and, keep given, whether keep ([R]) keeps 0 .. n rows at
// each group of n > 1 and none elsewhere (a plain row's state has moved already).
func GDNCheckGroups(groups, keep []uint32) error {
	if keep != nil && len(keep) != len(groups) {
		return fmt.Errorf("gdn: %d keep counts for %d rows", len(keep), len(groups))
	}
	for r := 0; r < len(groups); {
		n := int(groups[r])
		switch {
		case n == 0:
			return fmt.Errorf("gdn: row %d begins no group and follows none", r)
		case r+n > len(groups):
			return fmt.Errorf("gdn: a group of %d rows at row %d, %d rows left", n, r, len(groups)-r)
		case slices.ContainsFunc(groups[r+1:r+n], func(g uint32) bool { return g != 0 }):
			return fmt.Errorf("gdn: the group at row %d (%d rows) holds another group's start", r, n)
		}
		for i := r; keep != nil && i < r+n; i++ {
			if k := int(keep[i]); (i == r && n > 1 && k > n) || ((i > r || n == 1) && k != 0) {
				return fmt.Errorf("gdn: keep %d at row %d (group of %d at row %d)", k, i, n, r)
			}
		}
		r += n
	}
	return nil
}

// GDNRecord is the ring entry of one token (qkv, a, b: its rows): the reference of what the
// group form writes.
func GDNRecord(s GDNShape, p GDNParams, entry, qkv, a, b []float32) {
	e := s.Ring(entry)
	_, k, v := gdnKeys(s, qkv)
	copy(e.K, k)
	copy(e.V, v)
	for head := range s.HV {
		e.Beta[head], e.Decay[head] = gdnGates(p, head, a, b)
	}
}

// GDNVerify is the Go reference of gdn_step's group form over R rows (GDNVerifyCall): each
// group's rows run through GDNStep in turn from the state at its first row — in place for a plain
// row (a group of 1), on a copy for a longer group, whose committed state stays as it was —
// writing every row's y ([R][HV*DV]) and ring entry ([R][RingLen]). It panics on groups that
// GDNCheckGroups refuses.
func GDNVerify(s GDNShape, p GDNParams, states, ring, y, qkv, z, a, b []float32, groups []uint32) {
	if err := GDNCheckGroups(groups, nil); err != nil {
		panic(err)
	}
	c, hd, n, rl := s.Channels(), s.HV*s.DV, s.StateLen(), s.RingLen()
	for r0 := 0; r0 < len(groups); r0 += int(groups[r0]) {
		st := states[r0*n : (r0+1)*n]
		if groups[r0] > 1 {
			st = slices.Clone(st)
		}
		for r := r0; r < r0+int(groups[r0]); r++ {
			qr, ar, br := qkv[r*c:(r+1)*c], a[r*s.HV:(r+1)*s.HV], b[r*s.HV:(r+1)*s.HV]
			GDNStep(s, p, st, y[r*hd:(r+1)*hd], qr, z[r*hd:(r+1)*hd], ar, br)
			GDNRecord(s, p, ring[r*rl:(r+1)*rl], qr, ar, br)
		}
	}
}

// GDNCommit is the Go reference of gdn_commit (GDNCommitCall): at each row r with keep[r] = m >
// 0, the state at r ([R][HV][DV][DK]) takes GDNStep's update for the ring entries of rows r ..
// r+m-1 in turn.
func GDNCommit(s GDNShape, states, ring []float32, keep []uint32) {
	n, rl, hk, dk, dv := s.StateLen(), s.RingLen(), s.HK, s.DK, s.DV
	read := make([]float32, dv)
	for r, m := range keep {
		for t := r; t < r+int(m); t++ {
			e := s.Ring(ring[t*rl : (t+1)*rl])
			for head := range s.HV {
				kh := head / (s.HV / hk)
				st := states[r*n+head*dv*dk : r*n+(head+1)*dv*dk]
				gdnAdvance(st, e.K[kh*dk:(kh+1)*dk], e.V[head*dv:(head+1)*dv], e.Beta[head], e.Decay[head], read)
			}
		}
	}
}

// GDNVerifyBuffers are the group form's buffers: gdn_step's (a row per row of the step, a state
// per row, though only a group's first row's is read) and the two of its own.
type GDNVerifyBuffers[B any] struct {
	GDNStepBuffers[B]
	Groups B // 9: [R] uint32, a group's row count at its first row, 0 at its others
	Ring   B // 10: [R][RingLen] float32, written
}

// GDNVerifyCall is gdn_step's group form over rows rows (GDN_GROUPS set): GDNStepRowsCall's
// grid, a threadgroup per value head and row, of which a group's first row's does the group's
// work, in threadgroup memory for a group as long as the rows (GroupThreadgroupMem: at most 19
// rows at the model's shape; the decode step has 8).
func GDNVerifyCall[B any](s GDNShape, eps float32, simdgroups, rows int, b GDNVerifyBuffers[B]) Call[B] {
	c := GDNStepRowsCall(s, eps, simdgroups, rows, b.GDNStepBuffers)
	if mem := s.GroupThreadgroupMem(rows); mem > GDNMaxThreadgroupMem {
		panic(fmt.Sprintf("kernels: gdn_step in groups over %d rows: %d bytes of threadgroup memory", rows, mem))
	}
	c.Constants[GDNGroups] = true
	c.Buffers[9], c.Buffers[10] = b.Groups, b.Ring
	c.ThreadgroupMem[0] = s.GroupThreadgroupMem(rows)
	return c
}

// GDNCommitBuffers are gdn_commit's buffers.
type GDNCommitBuffers[B any] struct {
	State B // 0: [R][HV][DV][DK], updated in place at the groups' first rows
	Ring  B // 1: [R][RingLen] the verify step's
	Keep  B // 2: [R] uint32, the rows to keep at a group's first row (0 .. n), 0 elsewhere
}

// GDNCommitCall is gdn_commit over rows rows: a threadgroup of simdgroups simdgroups per value
// head and row. It reads no epsilon; the file's constants are given whole all the same (the
// emulator asks for each).
func GDNCommitCall[B any](s GDNShape, simdgroups, rows int, b GDNCommitBuffers[B]) Call[B] {
	return Call[B]{
		Kernel: "gdn_commit", Constants: s.Constants(0),
		Buffers:      map[int]B{0: b.State, 1: b.Ring, 2: b.Keep},
		Threadgroups: [3]int{s.HV, recurrentRows(rows), 1}, Group: grid(32 * simdgroups),
	}
}
