package kernels

import (
	"reflect"
	"testing"
)

// sampleRowsCalls are the multi-row calls of the sampler kernels at rows rows (pen rows 4097
// floats apart), with distinct buffer indices, and today's one-row calls beside them.
func sampleRowsCalls(rows int) (multi, today []Call[int]) {
	const n, chunk = 248320, SampleDefaultChunk
	pb := SamplePenaltiesBuffers[int]{Logits: 1, Params: 2, State: 3, Bias: 4, Pen: 5, Out: 6}
	sb := SampleSelectBuffers[int]{Logits: 1, Params: 2, Cand: 3}
	fb := SampleFinalBuffers[int]{Params: 1, Cand: 2, Step: 3, State: 4, Status: 5}
	lpb := LogprobPartialBuffers[int]{Logits: 1, MS: 2, Top: 3}
	lfb := LogprobFinalBuffers[int]{Logits: 1, MS: 2, Top: 3, Step: 4, Out: 5}
	multi = []Call[int]{
		SamplePenaltiesRowsCall(n, chunk, 4097, rows, pb),
		SampleSelectRowsCall(n, chunk, SampleThreads, rows, sb),
		SampleFinalRowsCall(n, chunk, SampleThreads, rows, fb),
		LogprobPartialRowsCall(n, chunk, rows, lpb),
		LogprobFinalRowsCall(n, chunk, rows, lfb),
	}
	today = []Call[int]{
		SamplePenaltiesCall(n, chunk, pb),
		SampleSelectCall(n, chunk, SampleThreads, sb),
		SampleFinalCall(n, chunk, SampleThreads, fb),
		LogprobPartialCall(n, chunk, lpb),
		LogprobFinalCall(n, chunk, lfb),
	}
	return multi, today
}

// TestSampleRowsCalls: at one row each Rows call is today's one-row call exactly (constants,
// bindings, grid, threadgroup), which the existing callers still make through the unchanged
// constructors: today's constants are SAMPLE_N, SAMPLE_CHUNK and SAMPLE_PROBE_OP 0, and today's
// grids {970, 1, 1}, {61, 1, 1}, {1, 1, 1}, {61, 1, 1}, {1, 1, 1}. At R rows only the grid's row
// dimension (sample_final's and logprob_final's only one) becomes R, and sample_penalties also
// sets SAMPLE_PEN_STRIDE; fewer than one row, or more without a stride, panic.
func TestSampleRowsCalls(t *testing.T) {
	wantGrids := [][3]int{{970, 1, 1}, {61, 1, 1}, {1, 1, 1}, {61, 1, 1}, {1, 1, 1}}
	wantGroups := []int{SamplePenaltyThreads, SampleThreads, SampleThreads, LogprobThreads, LogprobThreads}
	rowDim := []int{1, 1, 0, 1, 0}
	todayConstants := map[int]any{SampleVocab: 248320, SampleChunk: SampleDefaultChunk, SampleProbeOp: 0}
	for r := 1; r <= QMVMaxBatch; r++ {
		multi, today := sampleRowsCalls(r)
		for i, c := range multi {
			if !reflect.DeepEqual(today[i].Constants, todayConstants) || today[i].Threadgroups != wantGrids[i] || today[i].Group != grid(wantGroups[i]) {
				t.Errorf("%s: today's call changed: %+v", today[i].Kernel, today[i])
			}
			want := today[i]
			want.Threadgroups[rowDim[i]] = r
			if i == 0 && r > 1 {
				want.Constants = map[int]any{SampleVocab: 248320, SampleChunk: SampleDefaultChunk, SampleProbeOp: 0, SamplePenStride: 4097}
			}
			if !reflect.DeepEqual(c, want) {
				t.Errorf("%s at %d rows: %+v, want %+v", c.Kernel, r, c, want)
			}
			if r == 1 && !reflect.DeepEqual(c, today[i]) {
				t.Errorf("%s at one row: %+v, today's %+v", c.Kernel, c, today[i])
			}
		}
	}
	if c := SamplePenaltiesRowsCall(100, 64, 0, 1, SamplePenaltiesBuffers[int]{}); len(c.Constants) != 3 {
		t.Errorf("one-row sample_penalties without a stride: constants %v", c.Constants)
	}
	for _, f := range []func(){
		func() { sampleRowsCalls(0) },
		func() { SamplePenaltiesRowsCall(100, 64, 0, 2, SamplePenaltiesBuffers[int]{}) },
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Error("no panic")
				}
			}()
			f()
		}()
	}
}
