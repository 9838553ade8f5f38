package kernels

import (
	"reflect"
	"slices"
	"testing"
)

// recurrentCalls are the multi-row calls of conv1d_step, gdn_step, argmax_partial and
// argmax_final at rows rows, with distinct buffer indices.
func recurrentCalls(rows int) []Call[int] {
	s := GDNShape{HK: 16, HV: 32, DK: 128, DV: 128}
	return []Call[int]{
		Conv1DStepRowsCall(s.Channels(), ConvThreads, rows, Conv1DStepBuffers[int]{X: 1, Taps: 2, Window: 3, U: 4}),
		GDNStepRowsCall(s, 1e-6, GDNSimdgroups, rows, GDNStepBuffers[int]{QKV: 1, Z: 2, A: 3, Beta: 4, ALog: 5, DtBias: 6, NormW: 7, State: 8, Y: 9}),
		ArgmaxPartialRowsCall(248320, ArgmaxDefaultGroups, ArgmaxThreads, rows, ArgmaxPartialBuffers[int]{Logits: 1, Partial: 2}),
		ArgmaxFinalRowsCall(248320, ArgmaxDefaultGroups, ArgmaxThreads, rows, ArgmaxFinalBuffers[int]{Partial: 1, Step: 2, Params: 3, State: 4}),
	}
}

// TestRecurrentRowsCalls: at one row each Rows call is today's one-row call exactly (constants,
// bindings, grid, threadgroup and its memory), which the existing callers still make through the
// unchanged constructors; at R rows only the grid's row dimension (argmax_final's only one)
// becomes R; fewer than one row panics.
func TestRecurrentRowsCalls(t *testing.T) {
	s := GDNShape{HK: 16, HV: 32, DK: 128, DV: 128}
	today := []Call[int]{
		Conv1DStepCall(s.Channels(), ConvThreads, Conv1DStepBuffers[int]{X: 1, Taps: 2, Window: 3, U: 4}),
		GDNStepCall(s, 1e-6, GDNSimdgroups, GDNStepBuffers[int]{QKV: 1, Z: 2, A: 3, Beta: 4, ALog: 5, DtBias: 6, NormW: 7, State: 8, Y: 9}),
		ArgmaxPartialCall(248320, ArgmaxDefaultGroups, ArgmaxThreads, ArgmaxPartialBuffers[int]{Logits: 1, Partial: 2}),
		ArgmaxFinalCall(248320, ArgmaxDefaultGroups, ArgmaxThreads, ArgmaxFinalBuffers[int]{Partial: 1, Step: 2, Params: 3, State: 4}),
	}
	wantGrids := [][3]int{{32, 1, 1}, {32, 1, 1}, {128, 1, 1}, {1, 1, 1}}
	rowDim := []int{1, 1, 1, 0}
	for r := 1; r <= QMVMaxBatch; r++ {
		for i, c := range recurrentCalls(r) {
			want := today[i]
			want.Threadgroups = wantGrids[i]
			want.Threadgroups[rowDim[i]] = r
			if !reflect.DeepEqual(c, want) {
				t.Errorf("%s at %d rows: %+v, want %+v", c.Kernel, r, c, want)
			}
			if r == 1 && !reflect.DeepEqual(c, today[i]) {
				t.Errorf("%s at one row: %+v, today's %+v", c.Kernel, c, today[i])
			}
		}
	}
	func() {
		defer func() {
			if recover() == nil {
				t.Error("0 rows: no panic")
			}
		}()
		recurrentCalls(0)
	}()
}

// TestRecurrentRowsReferences: each multi-row reference's row r is the one-row reference on row
// r alone, with its own window, state or token states.
func TestRecurrentRowsReferences(t *testing.T) {
	const rows, c = 3, 5
	x, taps, win := recurrentSeq(rows*c, 0.5), recurrentSeq(c*ConvKernel, 0.25), recurrentSeq(rows*(ConvKernel-1)*c, -0.75)
	u, win2 := make([]float32, rows*c), slices.Clone(win)
	Conv1DStepRows(u, win2, taps, x, rows)
	for r := range rows {
		w := (ConvKernel - 1) * c
		ur, wr := make([]float32, c), slices.Clone(win[r*w:(r+1)*w])
		Conv1DStep(ur, wr, taps, x[r*c:(r+1)*c])
		if !slices.Equal(u[r*c:(r+1)*c], ur) || !slices.Equal(win2[r*w:(r+1)*w], wr) {
			t.Errorf("conv row %d: u %v window %v, want %v %v", r, u[r*c:(r+1)*c], win2[r*w:(r+1)*w], ur, wr)
		}
	}

	s := GDNShape{HK: 1, HV: 2, DK: 32, DV: 4}
	p := GDNParams{ALog: []float32{0.5, 1}, DtBias: []float32{0.1, -0.2}, NormW: []float32{1, 0.9, 1.1, 1}, Eps: 1e-6}
	hd := s.HV * s.DV
	qkv, z, a, b := recurrentSeq(rows*s.Channels(), 0.3), recurrentSeq(rows*hd, 0.7), recurrentSeq(rows*s.HV, 0.9), recurrentSeq(rows*s.HV, -0.4)
	state, y := recurrentSeq(rows*s.StateLen(), 0.01), make([]float32, rows*hd)
	state2 := slices.Clone(state)
	GDNStepRows(s, p, state2, y, qkv, z, a, b, rows)
	for r := range rows {
		n := s.StateLen()
		st, yr := slices.Clone(state[r*n:(r+1)*n]), make([]float32, hd)
		GDNStep(s, p, st, yr, qkv[r*s.Channels():(r+1)*s.Channels()], z[r*hd:(r+1)*hd], a[r*s.HV:(r+1)*s.HV], b[r*s.HV:(r+1)*s.HV])
		if !slices.Equal(y[r*hd:(r+1)*hd], yr) || !slices.Equal(state2[r*n:(r+1)*n], st) {
			t.Errorf("gdn row %d differs from GDNStep on it alone", r)
		}
	}

	logits := []float32{1, 3, 2, 9, -1, 8, 0, 0, 0}
	if got := ArgmaxRows(logits, 3, 3); !slices.Equal(got, []int{1, 0, 0}) {
		t.Errorf("ArgmaxRows = %v, want [1 0 0]", got)
	}
	st := []uint32{5, 6, TokenSeen | 2}
	ArgmaxRecord(st, 1, SampleFlagCount)
	ArgmaxRecord(st, 2, SampleFlagCount|SampleFlagSeen)
	ArgmaxRecord(st, 0, 0)
	ArgmaxRecord(st, 3, SampleFlagCount) // past the states: nothing
	if want := []uint32{5, 7, TokenSeen | 3}; !slices.Equal(st, want) {
		t.Errorf("ArgmaxRecord: %v, want %v", st, want)
	}
}

// recurrentSeq is n distinct values, step apart from step.
func recurrentSeq(n int, step float32) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = step * float32(i+1)
	}
	return v
}
