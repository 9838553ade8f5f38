//go:build linux

package kernels

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/lilyformac/lily/engine/model"
	"github.com/lilyformac/lily/engine/quant"
	"github.com/lilyformac/lily/metal/emu"
)

const moeEps = 1e-6

// normed is add_rmsnorm's output for x alone: the input moe_router/moe_gate_up get today.
func normed(x []float32, gain []uint16) []float32 {
	res, out := make([]float32, len(x)), make([]float32, len(x))
	AddRMSNorm(res, out, x, make([]float32, len(x)), gain, moeEps)
	return out
}

func runRouterNorm(t *testing.T, lib *emu.Library, s MoEShape, dev *moeBufs, x, gain *emu.Buffer, threads int, order emu.Order) (ids, weights *emu.Buffer) {
	t.Helper()
	ids, weights = emu.NewBuffer(4*s.K), emu.NewBuffer(4*(s.K+1))
	ids.Fill(0xFF)
	weights.Fill(0xFF)
	mustDispatch(t, lib, MoERouterNormCall(s, moeEps, threads, MoERouterBuffers[*emu.Buffer]{
		Router: dev.router, SharedGate: dev.seg, X: x, IDs: ids, Weights: weights, Gain: gain,
	}), order, 7)
	return ids, weights
}

func runGateUpNorm(t *testing.T, lib *emu.Library, s MoEShape, dev *moeBufs, ids, x, gain *emu.Buffer, order emu.Order) *emu.Buffer {
	t.Helper()
	act := emu.NewBuffer(4 * s.ActLen())
	act.Fill(0xFF)
	mustDispatch(t, lib, MoEGateUpNormCall(s, moeEps, dev.gateUp(ids, x, act, gain)), order, 8)
	return act
}

// checkMoENorm runs moe_router_norm and moe_gate_up_norm on an un-normed x and compares them with
// the references on add_rmsnorm's output: ids exactly, weights within routerTol, act within
// gateUpTol of max |act| (r's rounding scales every x̂ by at most an ulp more).
func checkMoENorm(t *testing.T, lib *emu.Library, r *rand.Rand, s MoEShape, mo *model.MoE, dev *moeBufs, threads int, order emu.Order) (wErr, actErr float64) {
	t.Helper()
	x, gain := randFloats(r, s.H, 3), randGain(r, s.H)
	xn := normed(x, gain)
	logits, shared := MoERouterLogits(mo, xn)
	wantIDs, wantW := MoERoute(logits, shared, s.K)
	bx, bg := emu.BufferOf(x), emu.BufferOf(gain)
	ids, weights := runRouterNorm(t, lib, s, dev, bx, bg, threads, order)
	wErr = checkRoute(t, fmt.Sprintf("router_norm %+v %v", s, order), ids.Uint32s(), weights.Float32s(), wantIDs, wantW, routerTol)
	act := runGateUpNorm(t, lib, s, dev, ids, bx, bg, order)
	actErr = relErr(act.Float32s(), MoEGateUp(mo, s, wantIDs, xn))
	if !(actErr <= gateUpTol) {
		t.Errorf("gate_up_norm %+v %v: act relative error %.2g", s, order, actErr)
	}
	return wErr, actErr
}

func TestMoENorm(t *testing.T) {
	lib := library(t, emu.Options{}, "moe.metal")
	r := rand.New(rand.NewPCG(41, 42))
	var worstW, worstA float64
	for _, c := range moeShapes {
		mo := randomMoE(r, c.s)
		dev := deviceMoE(mo)
		for _, order := range emu.Orders {
			t.Run(fmt.Sprintf("%+v_%v", c.s, order), func(t *testing.T) {
				w, a := checkMoENorm(t, lib, r, c.s, mo, dev, c.routerThreads, order)
				worstW, worstA = max(worstW, w), max(worstA, a)
			})
		}
	}
	t.Logf("norm folded in: max routing-weight error %.2g, act error %.2g of max |act|", worstW, worstA)
}

// TestMoENormProduction: the model's shape (stacked experts in device buffers, only the chosen
// experts' rows filled, as TestMoEProduction does).
func TestMoENormProduction(t *testing.T) {
	lib := library(t, emu.Options{}, "moe.metal")
	r := rand.New(rand.NewPCG(43, 44))
	s := moeProduction
	mo := &model.MoE{
		Router:           quant.Quantize(randFloats(r, s.E*s.H, 0.05), s.E, s.H, 8),
		SharedExpertGate: quant.Quantize(randFloats(r, s.H, 0.05), 1, s.H, 8),
		SharedGate:       randomQ4(r, s.SI, s.H), SharedUp: randomQ4(r, s.SI, s.H),
	}
	x, gain := randFloats(r, s.H, 3), randGain(r, s.H)
	xn := normed(x, gain)
	logits, shared := MoERouterLogits(mo, xn)
	wantIDs, wantW := MoERoute(logits, shared, s.K)
	stacked := func() (*quant.Matrix, qbufs) {
		rows, cols := s.E*s.I, s.H
		q := qbufs{Words: emu.NewBuffer(rows * cols / 2), Scales: emu.NewBuffer(rows * cols / 32), Biases: emu.NewBuffer(rows * cols / 32)}
		m := &quant.Matrix{Rows: rows, Cols: cols, Bits: 4, Words: q.Words.Uint32s(), Scales: q.Scales.Uint16s(), Biases: q.Biases.Uint16s()}
		for _, e := range wantIDs {
			fillQ4(r, m.RowRange(int(e)*s.I, s.I))
		}
		return m, q
	}
	dev := &moeBufs{router: bufsOf(mo.Router), seg: bufsOf(mo.SharedExpertGate), shGate: bufsOf(mo.SharedGate), shUp: bufsOf(mo.SharedUp)}
	mo.Gate, dev.gate = stacked()
	mo.Up, dev.up = stacked()
	bx, bg := emu.BufferOf(x), emu.BufferOf(gain)
	ids, weights := runRouterNorm(t, lib, s, dev, bx, bg, MoERouterThreads, emu.Shuffle)
	wErr := checkRoute(t, "router_norm", ids.Uint32s(), weights.Float32s(), wantIDs, wantW, routerTol)
	act := runGateUpNorm(t, lib, s, dev, ids, bx, bg, emu.Reverse)
	actErr := relErr(act.Float32s(), MoEGateUp(mo, s, wantIDs, xn))
	if !(actErr <= gateUpTol) {
		t.Errorf("gate_up_norm: act relative error %.2g", actErr)
	}
	t.Logf("ids %v; routing weights error %.2g, act error %.2g of max |act|", ids.Uint32s(), wErr, actErr)
}

func TestMoENormASan(t *testing.T) {
	lib := library(t, emu.Options{ASan: true}, "moe.metal")
	r := rand.New(rand.NewPCG(45, 46))
	c := moeShapes[1]
	mo := randomMoE(r, c.s)
	checkMoENorm(t, lib, r, c.s, mo, deviceMoE(mo), c.routerThreads, emu.Shuffle)
}
