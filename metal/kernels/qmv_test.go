package kernels

import (
	"maps"
	"slices"
	"testing"

	"github.com/lilyformac/lily/metal/emu/gen"
)

// TestQMVBatchCalls: QMVVariant.Batch 0 leaves QMV_BATCH unset (every existing one-row dispatch
// keeps its pipeline), 1 to QMVMaxBatch set it without changing the grid, the threadgroup (within
// every qmv instance's thread limit) or the threadgroup memory (none), and anything else panics.
// The kernel declares the constant at QMVBatch as an optional uint.
func TestQMVBatchCalls(t *testing.T) {
	u, err := gen.Translate(Path("qmv.metal"), Source("qmv.metal"))
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(u.Constants, func(c gen.Constant) bool { return c.Index == QMVBatch })
	if i < 0 || u.Constants[i].Type != "uint" || !u.Constants[i].Optional {
		t.Fatalf("qmv.metal's constant %d: %+v, want an optional uint", QMVBatch, u.Constants)
	}
	calls := func(batch int) []Call[int] {
		v := QMVVariant{Norm: true, Eps: 1e-6, Add: true, Batch: batch}
		return []Call[int]{
			QMVCall(8, 256, 2048, v, QMVBuffers[int]{}),
			QMVMultiCall(4, 2048, []int{1024, 512, 32, 32}, v, QMVMultiBuffers[int]{W: make([]QMatrixBuffers[int], 4), Y: make([]int, 4)}),
		}
	}
	one := calls(0)
	for _, c := range one {
		if _, ok := c.Constants[QMVBatch]; ok {
			t.Errorf("%s without Batch sets QMV_BATCH: %v", c.Kernel, c.Constants)
		}
	}
	for r := 1; r <= QMVMaxBatch; r++ {
		for j, c := range calls(r) {
			rest := maps.Clone(c.Constants)
			delete(rest, QMVBatch)
			if c.Constants[QMVBatch] != r || !maps.Equal(rest, one[j].Constants) || c.Threadgroups != one[j].Threadgroups ||
				c.Group != one[j].Group || c.ThreadgroupMem != nil {
				t.Errorf("%s at %d rows: %+v, the one-row call %+v", c.Kernel, r, c, one[j])
			}
			for _, k := range u.Kernels {
				if limit := max(k.MaxThreads, 1024); c.Group[0]*c.Group[1]*c.Group[2] > limit {
					t.Errorf("%s: %v threads above %s's %d", c.Kernel, c.Group, k.Name, limit)
				}
			}
		}
	}
	for _, r := range []int{-1, QMVMaxBatch + 1} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("Batch %d: no panic", r)
				}
			}()
			calls(r)
		}()
	}
}

// TestQMVBatched: the batched reference's row r is the reference on row r alone.
func TestQMVBatched(t *testing.T) {
	x := []float32{1, 2, 3, 4, 5, 6}
	got := QMVBatched(x, 3, func(x []float32) []float32 { return []float32{x[0] * x[1], x[0] + x[1], -x[1]} })
	want := []float32{2, 3, -2, 12, 7, -4, 30, 11, -6}
	if !slices.Equal(got, want) {
		t.Errorf("QMVBatched = %v, want %v", got, want)
	}
}
