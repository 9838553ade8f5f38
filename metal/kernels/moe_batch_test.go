package kernels

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/lilyformac/lily/engine/model"
	"github.com/lilyformac/lily/engine/quant"
	"github.com/lilyformac/lily/metal/emu/gen"
)

// TestMoEBatchCalls: the one-row MoE constructors leave MOE_BATCH unset (the decode step's
// pipelines do not change); the Rows constructors set it to 1 … MoEMaxBatch and otherwise keep
// the one-row call — bindings, threadgroup, constants — with moe_gate_up's grid growing to K·rows
// + 1 slot rows and the other grids unchanged; a row count outside 1 … MoEMaxBatch panics. The
// kernel declares the constant at MoEBatch as an optional uint.
func TestMoEBatchCalls(t *testing.T) {
	u, err := gen.Translate(Path("moe.metal"), Source("moe.metal"))
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(u.Constants, func(c gen.Constant) bool { return c.Index == MoEBatch })
	if i < 0 || u.Constants[i].Type != "uint" || !u.Constants[i].Optional {
		t.Fatalf("moe.metal's constant %d: %+v, want an optional uint", MoEBatch, u.Constants)
	}
	s := MoEShape{H: 2048, E: 256, K: 8, I: 512, SI: 512}
	rb, gb, db := MoERouterBuffers[int]{Gain: 40}, MoEGateUpBuffers[int]{Gain: 41}, MoEDownCombineBuffers[int]{}
	one := []Call[int]{MoERouterCall(s, MoERouterThreads, rb), MoERouterNormCall(s, 1e-6, MoERouterThreads, rb),
		MoEGateUpCall(s, gb), MoEGateUpNormCall(s, 1e-6, gb), MoEDownCombineCall(s, db)}
	rows := func(r int) []Call[int] {
		return []Call[int]{MoERouterRowsCall(s, r, MoERouterThreads, rb), MoERouterNormRowsCall(s, r, 1e-6, MoERouterThreads, rb),
			MoEGateUpRowsCall(s, r, gb), MoEGateUpNormRowsCall(s, r, 1e-6, gb), MoEDownCombineRowsCall(s, r, db)}
	}
	for _, c := range one {
		if _, ok := c.Constants[MoEBatch]; ok {
			t.Errorf("%s sets MOE_BATCH: %v", c.Kernel, c.Constants)
		}
	}
	for r := 1; r <= MoEMaxBatch; r++ {
		for j, c := range rows(r) {
			o := one[j]
			rest := maps.Clone(c.Constants)
			delete(rest, MoEBatch)
			grid := o.Threadgroups
			if c.Kernel == "moe_gate_up" || c.Kernel == "moe_gate_up_norm" {
				grid[1] = s.K*r + 1
			}
			if c.Kernel != o.Kernel || c.Constants[MoEBatch] != r || !maps.Equal(rest, o.Constants) || !maps.Equal(c.Buffers, o.Buffers) ||
				c.Threadgroups != grid || c.Group != o.Group || c.ThreadgroupMem != nil {
				t.Errorf("%s at %d rows: %+v, the one-row call %+v", c.Kernel, r, c, o)
			}
		}
	}
	for _, r := range []int{0, -1, MoEMaxBatch + 1} {
		for j := range one {
			func() {
				defer func() {
					if recover() == nil {
						t.Errorf("call %d at %d rows: no panic", j, r)
					}
				}()
				rows(r)
			}()
		}
	}
}

// TestMoERouterPassRows: the router holds every row of the model's E in one pass, and larger E in
// passes of as many rows as MOE_LOGITS holds (at least one: E + 1 ≤ 1,025 always fits).
func TestMoERouterPassRows(t *testing.T) {
	for _, c := range []struct{ e, rows, want int }{{256, 8, 8}, {256, 3, 3}, {300, 8, 6}, {MoEMaxExperts, 8, 2}, {MoEMaxExperts, 1, 1}, {16, 1, 1}} {
		if got := (MoEShape{E: c.e}).RouterPassRows(c.rows); got != c.want {
			t.Errorf("E %d, %d rows: %d a pass, want %d", c.e, c.rows, got, c.want)
		}
	}
	if MoERouterLogitRoom < MoEMaxExperts+1 {
		t.Errorf("MOE_LOGITS %d below one row of %d experts", MoERouterLogitRoom, MoEMaxExperts)
	}
	for _, def := range []string{fmt.Sprintf("#define MOE_LOGITS %d ", MoERouterLogitRoom), fmt.Sprintf("#define MOE_MAX_BATCH %d ", MoEMaxBatch)} {
		if !strings.Contains(Source("moe.metal"), def) {
			t.Errorf("moe.metal does not say %q", def)
		}
	}
}

// TestMoEDecodeRows: the multi-row reference's row r is MoEBlock on row r alone.
func TestMoEDecodeRows(t *testing.T) {
	s := MoEShape{H: 64, E: 8, K: 2, I: 64, SI: 64}
	r := rand.New(rand.NewPCG(1, 2))
	q := func(rows, cols, bits int) *quant.Matrix {
		return quant.Quantize(RandFloats(r, rows*cols, 0.05), rows, cols, bits)
	}
	mo := &model.MoE{Router: q(s.E, s.H, 8), SharedExpertGate: q(1, s.H, 8), Gate: q(s.E*s.I, s.H, 4), Up: q(s.E*s.I, s.H, 4),
		Down: q(s.E*s.H, s.I, 4), SharedGate: q(s.SI, s.H, 4), SharedUp: q(s.SI, s.H, 4), SharedDown: q(s.H, s.SI, 4)}
	x, res := RandFloats(r, 3*s.H, 1), RandFloats(r, 3*s.H, 1)
	got := slices.Clone(res)
	ids, weights := MoEDecodeRows(mo, s, 3, x, got)
	for row := range 3 {
		want := slices.Clone(res[row*s.H : (row+1)*s.H])
		wi, ww := MoEBlock(mo, s, x[row*s.H:(row+1)*s.H], want)
		if !slices.Equal(ids[row*s.K:(row+1)*s.K], wi) || !slices.Equal(weights[row*(s.K+1):(row+1)*(s.K+1)], ww) ||
			!slices.Equal(got[row*s.H:(row+1)*s.H], want) || slices.Equal(want, res[row*s.H:(row+1)*s.H]) {
			t.Errorf("row %d differs from MoEBlock on the row alone (or added nothing)", row)
		}
	}
}
