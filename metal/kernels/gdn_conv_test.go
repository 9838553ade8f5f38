//go:build linux

package kernels

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/lilyformac/lily/metal/emu"
)

// How a gdn_conv_step test dispatches the value heads of one token.
type headOrder int

const (
	oneDispatch     headOrder = iota // all HV threadgroups in one dispatch
	perHeadReverse                   // one dispatch per head, last head first
	perHeadShuffled                  // one dispatch per head, in a random order per token
	perHeadForward                   // one dispatch per head, head 0 first
)

func (h headOrder) String() string {
	return [...]string{"one", "heads-reverse", "heads-shuffled", "heads-forward"}[h]
}

type gdnConvRun struct {
	c       gdnCase
	order   emu.Order
	heads   headOrder
	aliased bool // bind one window as both in and out (the in-place shift the contract forbids)
}

// runGDNConv runs c.steps tokens through gdn_conv_step and GDNConvStep from the same random
// state and window. The kernel's windows alternate between two buffers (in, out swapped every
// token); after each token the out window must equal the reference window exactly and the in
// window must be untouched. The same tokens also go through the two kernels the fusion replaces
// (conv1d_step, then gdn_step, in the same library), whose y, state and window the fused
// kernel must reproduce bit for bit: the same float32 operations in the same order. It returns the largest relative errors of y (over all tokens) and
// of the final state.
func runGDNConv(t *testing.T, lib *emu.Library, r *rand.Rand, g gdnConvRun) (yErr, stateErr float64) {
	t.Helper()
	s := g.c.shape
	if err := s.Validate(); err != nil {
		t.Fatal(err)
	}
	C := s.Channels()
	p := randGDNParams(r, s)
	state := randFloats(r, s.StateLen(), 0.1)
	taps := randFloats(r, C*ConvKernel, 0.5)
	window := randFloats(r, (ConvKernel-1)*C, 1)

	bState, bY := emu.BufferOf(state), emu.NewBuffer(4*s.HV*s.DV)
	bALog, bDt, bW, bTaps := emu.BufferOf(p.ALog), emu.BufferOf(p.DtBias), emu.BufferOf(p.NormW), emu.BufferOf(taps)
	win := [2]*emu.Buffer{emu.BufferOf(window), emu.NewBuffer(4 * len(window))}
	// The unfused path's buffers.
	uState, uWin, uU, uY := emu.BufferOf(state), emu.BufferOf(window), emu.NewBuffer(4*C), emu.NewBuffer(4*s.HV*s.DV)
	y := make([]float32, s.HV*s.DV)
	for step := range g.c.steps {
		x, z := randFloats(r, C, 1), randFloats(r, s.HV*s.DV, 1)
		a, b := randFloats(r, s.HV, 1), randFloats(r, s.HV, 1)
		if step == 1 {
			a[0], a[len(a)-1] = 25, -30 // both softplus special cases
		}
		GDNConvStep(s, p, state, y, window, taps, x, z, a, b)

		in, out := win[step%2], win[(step+1)%2]
		if g.aliased {
			out = in
		}
		inBefore := slices.Clone(in.Float32s())
		if !g.aliased {
			out.Fill(0xFF) // unwritten window entries show as NaN
		}
		bY.Fill(0xFF)
		bz, ba, bb := emu.BufferOf(z), emu.BufferOf(a), emu.BufferOf(b)
		bufs := GDNConvStepBuffers[*emu.Buffer]{
			X: emu.BufferOf(x), Z: bz, A: ba, Beta: bb, ALog: bALog, DtBias: bDt, NormW: bW,
			State: bState, Y: bY, Taps: bTaps, WinIn: in, WinOut: out,
		}
		if g.heads == oneDispatch {
			mustDispatch(t, lib, GDNConvStepCall(s, p.Eps, g.c.nsg, bufs), g.order, uint64(step))
		} else {
			heads := make([]int, s.HV)
			for i := range heads {
				heads[i] = i
			}
			switch g.heads {
			case perHeadReverse:
				slices.Reverse(heads)
			case perHeadShuffled:
				r.Shuffle(len(heads), func(i, j int) { heads[i], heads[j] = heads[j], heads[i] })
			}
			for _, h := range heads {
				mustDispatch(t, lib, GDNConvStepHeadCall(s, p.Eps, g.c.nsg, h, bufs), g.order, uint64(step))
			}
		}
		yErr = max(yErr, relErr(bY.Float32s(), y))
		if g.aliased {
			continue
		}

		mustDispatch(t, lib, Conv1DStepCall(C, ConvThreads, Conv1DStepBuffers[*emu.Buffer]{X: emu.BufferOf(x), Taps: bTaps, Window: uWin, U: uU}),
			g.order, uint64(step))
		mustDispatch(t, lib, GDNStepCall(s, p.Eps, g.c.nsg, GDNStepBuffers[*emu.Buffer]{
			QKV: uU, Z: bz, A: ba, Beta: bb, ALog: bALog, DtBias: bDt, NormW: bW, State: uState, Y: uY,
		}), g.order, uint64(step))
		if !bitsEqual(bY.Float32s(), uY.Float32s()) || !bitsEqual(bState.Float32s(), uState.Float32s()) {
			t.Fatalf("%+v step %d: y or state differs from conv1d_step + gdn_step (rel y %g, state %g), want bit-identical",
				s, step, relErr(bY.Float32s(), uY.Float32s()), relErr(bState.Float32s(), uState.Float32s()))
		}
		if !bitsEqual(out.Float32s(), uWin.Float32s()) {
			t.Fatalf("%+v step %d: window differs from conv1d_step's", s, step)
		}
		if !slices.Equal(in.Float32s(), inBefore) {
			t.Fatalf("%+v step %d: the in window was written", s, step)
		}
		if got := out.Float32s(); !slices.Equal(got, window) {
			t.Fatalf("%+v step %d: out window differs (rel %g), want exact", s, step, relErr(got, window))
		}
	}
	stateErr = relErr(bState.Float32s(), state)
	// y's tolerance against the Go reference is gdn_step's 1e-5 except for a lone DV-8 head,
	// whose 8-element gated norm amplifies the emulator's libm-vs-Go rounding (the fused kernel is
	// bit-identical to the unfused kernels there too, checked above).
	yTol := 1e-5
	if s.DV < 16 {
		yTol = 1e-4
	}
	if !g.aliased && !(yErr <= yTol && stateErr <= 1e-5) {
		t.Errorf("%+v nsg %d %v %v: relative error y %.2g, state %.2g", s, g.c.nsg, g.order, g.heads, yErr, stateErr)
	}
	return yErr, stateErr
}

func bitsEqual(a, b []float32) bool {
	return slices.EqualFunc(a, b, func(x, y float32) bool { return math.Float32bits(x) == math.Float32bits(y) })
}

func TestGDNConvStep(t *testing.T) {
	lib := library(t, emu.Options{}, "conv.metal", "gdn.metal", "gdn_conv.metal")
	r := rand.New(rand.NewPCG(41, 42))
	cases := []gdnCase{
		{GDNShape{HK: 1, HV: 1, DK: 32, DV: 8}, 1, 3},
		{GDNShape{HK: 2, HV: 4, DK: 64, DV: 16}, 3, 3},  // pairs; columns do not divide evenly
		{GDNShape{HK: 2, HV: 4, DK: 64, DV: 40}, 3, 3},  // conv loop wraps (168 channels, 96 threads)
		{GDNShape{HK: 2, HV: 2, DK: 96, DV: 16}, 4, 3},  // three key rows per lane
		{GDNShape{HK: 1, HV: 3, DK: 32, DV: 33}, 2, 3},  // three heads share a key head
		{GDNShape{HK: 2, HV: 4, DK: 128, DV: 8}, 16, 3}, // more threads than channels
		{GDNShape{HK: 3, HV: 12, DK: 32, DV: 16}, 1, 3}, // groups of four, one simdgroup
	}
	var worstY, worstS float64
	for _, c := range cases {
		for _, order := range emu.Orders {
			for _, heads := range []headOrder{oneDispatch, perHeadReverse, perHeadShuffled} {
				name := fmt.Sprintf("hk%d_hv%d_dk%d_dv%d_nsg%d_%v_%v", c.shape.HK, c.shape.HV, c.shape.DK, c.shape.DV, c.nsg, order, heads)
				t.Run(name, func(t *testing.T) {
					ye, se := runGDNConv(t, lib, r, gdnConvRun{c: c, order: order, heads: heads})
					worstY, worstS = max(worstY, ye), max(worstS, se)
				})
			}
		}
	}
	t.Logf("edge shapes: max relative error y %.2g, state %.2g (windows exact)", worstY, worstS)
}

// TestGDNConvStepInPlaceRaces is the negative control: binding one window as both in and out
// (the in-place shift) must give wrong outputs when a group's first head runs before the
// others, which shows the per-head dispatch tests can see the cross-threadgroup race the double
// buffer removes.
func TestGDNConvStepInPlaceRaces(t *testing.T) {
	lib := library(t, emu.Options{}, "conv.metal", "gdn.metal", "gdn_conv.metal")
	r := rand.New(rand.NewPCG(43, 44))
	c := gdnCase{GDNShape{HK: 2, HV: 4, DK: 64, DV: 16}, 2, 2}
	ye, _ := runGDNConv(t, lib, r, gdnConvRun{c: c, order: emu.Forward, heads: perHeadForward, aliased: true})
	if !(ye > 1e-3) {
		t.Fatalf("in-place window, heads in order: y error %.2g, expected the race to show", ye)
	}
	t.Logf("in-place window (forbidden), heads in order: y error %.2g — the race is visible", ye)
}

// TestGDNConvStepProduction runs the model's shape (16 key heads, 32 value heads, 128-dim heads,
// 8192 channels) in the 1024-thread production geometry, one dispatch and heads in reverse.
func TestGDNConvStepProduction(t *testing.T) {
	lib := library(t, emu.Options{}, "conv.metal", "gdn.metal", "gdn_conv.metal")
	r := rand.New(rand.NewPCG(45, 46))
	model := GDNShape{HK: 16, HV: 32, DK: 128, DV: 128}
	for _, g := range []gdnConvRun{
		{c: gdnCase{model, GDNSimdgroups, 3}, order: emu.Shuffle, heads: oneDispatch},
		{c: gdnCase{model, GDNSimdgroups, 2}, order: emu.Reverse, heads: perHeadReverse},
	} {
		ye, se := runGDNConv(t, lib, r, g)
		t.Logf("model shape, %d simdgroups, %v, %v: max relative error y %.2g, state %.2g (windows exact)", g.c.nsg, g.order, g.heads, ye, se)
	}
}

func TestGDNConvStepASan(t *testing.T) {
	lib := library(t, emu.Options{ASan: true}, "conv.metal", "gdn.metal", "gdn_conv.metal")
	r := rand.New(rand.NewPCG(47, 48))
	runGDNConv(t, lib, r, gdnConvRun{c: gdnCase{GDNShape{HK: 2, HV: 4, DK: 64, DV: 40}, 3, 2}, order: emu.Shuffle, heads: oneDispatch})
}
