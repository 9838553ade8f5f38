//go:build linux

package kernels

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/lilyformac/lily/metal/emu"
)

type gdnCase struct {
	shape GDNShape
	nsg   int // simdgroups per threadgroup
	steps int
}

// randGDNParams draws a layer's recurrence parameters: A in [1, 16), as Qwen initialises it, and
// norm gains near 1.
func randGDNParams(r *rand.Rand, s GDNShape) GDNParams {
	p := GDNParams{ALog: make([]float32, s.HV), DtBias: randFloats(r, s.HV, 0.5), NormW: make([]float32, s.DV), Eps: 1e-6}
	for i := range p.ALog {
		p.ALog[i] = float32(math.Log(1 + 15*r.Float64()))
	}
	for i := range p.NormW {
		p.NormW[i] = 1 + 0.1*float32(r.NormFloat64())
	}
	return p
}

// runGDN runs steps decode tokens through gdn_step and GDNStep from the same random state and
// returns the largest relative errors of y (over all steps) and of the final state.
func runGDN(t *testing.T, lib *emu.Library, r *rand.Rand, c gdnCase, order emu.Order) (yErr, stateErr float64) {
	t.Helper()
	s := c.shape
	if err := s.Validate(); err != nil {
		t.Fatal(err)
	}
	p := randGDNParams(r, s)
	state := randFloats(r, s.StateLen(), 0.1)
	bState, bY := emu.BufferOf(state), emu.NewBuffer(4*s.HV*s.DV)
	bALog, bDt, bW := emu.BufferOf(p.ALog), emu.BufferOf(p.DtBias), emu.BufferOf(p.NormW)
	y := make([]float32, s.HV*s.DV)
	for step := range c.steps {
		qkv, z := randFloats(r, s.Channels(), 1), randFloats(r, s.HV*s.DV, 1)
		a, b := randFloats(r, s.HV, 1), randFloats(r, s.HV, 1)
		if step == 1 {
			a[0], a[len(a)-1] = 25, -30 // both softplus special cases
		}
		GDNStep(s, p, state, y, qkv, z, a, b)
		bY.Fill(0xFF)
		mustDispatch(t, lib, GDNStepCall(s, p.Eps, c.nsg, GDNStepBuffers[*emu.Buffer]{
			QKV: emu.BufferOf(qkv), Z: emu.BufferOf(z), A: emu.BufferOf(a), Beta: emu.BufferOf(b),
			ALog: bALog, DtBias: bDt, NormW: bW, State: bState, Y: bY,
		}), order, uint64(step))
		yErr = max(yErr, relErr(bY.Float32s(), y))
	}
	stateErr = relErr(bState.Float32s(), state)
	if !(yErr <= 1e-5 && stateErr <= 1e-5) {
		t.Errorf("%+v nsg %d %v: relative error y %.2g, state %.2g", s, c.nsg, order, yErr, stateErr)
	}
	return yErr, stateErr
}

func TestGDNStep(t *testing.T) {
	lib := library(t, emu.Options{}, "gdn.metal")
	r := rand.New(rand.NewPCG(13, 14))
	cases := []gdnCase{
		{GDNShape{HK: 1, HV: 1, DK: 32, DV: 8}, 1, 3},
		{GDNShape{HK: 2, HV: 4, DK: 64, DV: 40}, 3, 3}, // columns do not divide evenly
		{GDNShape{HK: 2, HV: 2, DK: 96, DV: 16}, 4, 2}, // three key rows per lane
		{GDNShape{HK: 1, HV: 3, DK: 32, DV: 33}, 2, 2},
		{GDNShape{HK: 2, HV: 4, DK: 128, DV: 8}, 16, 2}, // more simdgroups than columns
	}
	var worstY, worstS float64
	for _, c := range cases {
		for _, order := range emu.Orders {
			t.Run(fmt.Sprintf("hk%d_hv%d_dk%d_dv%d_nsg%d_%v", c.shape.HK, c.shape.HV, c.shape.DK, c.shape.DV, c.nsg, order), func(t *testing.T) {
				ye, se := runGDN(t, lib, r, c, order)
				worstY, worstS = max(worstY, ye), max(worstS, se)
			})
		}
	}
	t.Logf("edge shapes: max relative error y %.2g, state %.2g", worstY, worstS)
}

// TestGDNStepProduction runs the model's shape (16 key heads, 32 value heads, 128-dim heads) in
// the 1024-thread production geometry and in a 256-thread one.
func TestGDNStepProduction(t *testing.T) {
	lib := library(t, emu.Options{}, "gdn.metal")
	r := rand.New(rand.NewPCG(15, 16))
	model := GDNShape{HK: 16, HV: 32, DK: 128, DV: 128}
	for i, nsg := range []int{GDNSimdgroups, 8} {
		order := emu.Orders[(i+1)%3]
		ye, se := runGDN(t, lib, r, gdnCase{model, nsg, 2}, order)
		t.Logf("model shape, %d simdgroups, %v: max relative error y %.2g, state %.2g", nsg, order, ye, se)
	}
}

func TestGDNStepASan(t *testing.T) {
	lib := library(t, emu.Options{ASan: true}, "gdn.metal")
	r := rand.New(rand.NewPCG(17, 18))
	runGDN(t, lib, r, gdnCase{GDNShape{HK: 2, HV: 4, DK: 64, DV: 40}, 3, 2}, emu.Shuffle)
}

// runGDNChunk runs tokens tokens through gdn_chunk in one dispatch and through GDNChunk from the
// same random state; it returns the relative errors of y (every token's row) and of the state.
func runGDNChunk(t *testing.T, lib *emu.Library, r *rand.Rand, s GDNShape, tokens int, order emu.Order) (yErr, stateErr float64) {
	t.Helper()
	p := randGDNParams(r, s)
	state := randFloats(r, s.StateLen(), 0.1)
	qkv, z := randFloats(r, tokens*s.Channels(), 1), randFloats(r, tokens*s.HV*s.DV, 1)
	a, b := randFloats(r, tokens*s.HV, 1), randFloats(r, tokens*s.HV, 1)
	a[0], a[len(a)-1] = 25, -30 // both softplus special cases
	bState, bY := emu.BufferOf(state), emu.NewBuffer(4*tokens*s.HV*s.DV)
	bY.Fill(0xFF)
	y := make([]float32, tokens*s.HV*s.DV)
	GDNChunk(s, p, state, y, qkv, z, a, b, tokens)
	mustDispatch(t, lib, GDNChunkCall(s, p.Eps, tokens, GDNStepBuffers[*emu.Buffer]{
		QKV: emu.BufferOf(qkv), Z: emu.BufferOf(z), A: emu.BufferOf(a), Beta: emu.BufferOf(b),
		ALog: emu.BufferOf(p.ALog), DtBias: emu.BufferOf(p.DtBias), NormW: emu.BufferOf(p.NormW), State: bState, Y: bY,
	}), order, uint64(tokens))
	yErr, stateErr = relErr(bY.Float32s(), y), relErr(bState.Float32s(), state)
	// errors compound over the chunk's tokens like decode steps': gdn_step's bound, per √tokens
	if tol := 1e-5 * math.Sqrt(float64(tokens)); !(yErr <= tol && stateErr <= tol) {
		t.Errorf("%+v, %d tokens %v: relative error y %.2g, state %.2g", s, tokens, order, yErr, stateErr)
	}
	return yErr, stateErr
}

// TestGDNChunk: a chunk scanned in one dispatch equals token-by-token GDNStep (edge shapes: a
// last simdgroup with spare columns, each key dim, one token, tokens of both parities; every
// order).
func TestGDNChunk(t *testing.T) {
	lib := library(t, emu.Options{}, "gdn.metal")
	r := rand.New(rand.NewPCG(19, 20))
	var worstY, worstS float64
	for _, c := range []struct {
		s      GDNShape
		tokens int
	}{
		{GDNShape{HK: 1, HV: 1, DK: 32, DV: 8}, 1},
		{GDNShape{HK: 2, HV: 4, DK: 64, DV: 40}, 9},
		{GDNShape{HK: 2, HV: 2, DK: 96, DV: 12}, 6},
		{GDNShape{HK: 2, HV: 4, DK: 128, DV: 3}, 5},
	} {
		for _, order := range emu.Orders {
			t.Run(fmt.Sprintf("hk%d_hv%d_dk%d_dv%d_t%d_%v", c.s.HK, c.s.HV, c.s.DK, c.s.DV, c.tokens, order), func(t *testing.T) {
				ye, se := runGDNChunk(t, lib, r, c.s, c.tokens, order)
				worstY, worstS = max(worstY, ye), max(worstS, se)
			})
		}
	}
	t.Logf("edge shapes: max relative error y %.2g, state %.2g", worstY, worstS)
}

// TestGDNChunkProduction: the model's heads (16 simdgroups a value head) over 16 tokens.
func TestGDNChunkProduction(t *testing.T) {
	lib := library(t, emu.Options{}, "gdn.metal")
	r := rand.New(rand.NewPCG(21, 22))
	ye, se := runGDNChunk(t, lib, r, GDNShape{HK: 16, HV: 32, DK: 128, DV: 128}, 16, emu.Shuffle)
	t.Logf("model shape, 16 tokens: max relative error y %.2g, state %.2g", ye, se)
}

func TestGDNChunkASan(t *testing.T) {
	lib := library(t, emu.Options{ASan: true}, "gdn.metal")
	r := rand.New(rand.NewPCG(23, 24))
	runGDNChunk(t, lib, r, GDNShape{HK: 2, HV: 4, DK: 64, DV: 40}, 3, emu.Reverse)
}
