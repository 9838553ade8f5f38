//go:build linux

package kernels

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/lilyformac/lily/engine/config"
	"github.com/lilyformac/lily/engine/model"
	"github.com/lilyformac/lily/engine/quant"
	"github.com/lilyformac/lily/metal/emu"
)

// Small shapes for the many-order runs: the brief's tiny one, then edges: H not a multiple of 512
// (a partial step), E not a multiple of 32 and E+1 not of 4 (the shared gate shares a row block
// with router rows), SI ≠ I both ways, K = E, K = 1, H below one simdgroup step.
var moeShapes = []struct {
	s             MoEShape
	routerThreads int
}{
	{MoEShape{H: 128, E: 16, K: 4, I: 64, SI: 64}, 64},
	{MoEShape{H: 192, E: 40, K: 5, I: 64, SI: 128}, 96},
	{MoEShape{H: 64, E: 8, K: 8, I: 192, SI: 64}, 32},
	{MoEShape{H: 576, E: 33, K: 1, I: 128, SI: 64}, 1024},
}

var moeProduction = func() MoEShape {
	c := config.Production()
	return MoEShape{H: c.HiddenSize, E: c.NumExperts, K: c.TopK, I: c.MoEIntermediate, SI: c.SharedIntermed}
}()

// randomMoE quantizes random float weights for a small shape (router and shared gate 8-bit).
func randomMoE(r *rand.Rand, s MoEShape) *model.MoE {
	q := func(rows, cols, bits int) *quant.Matrix {
		return quant.Quantize(randFloats(r, rows*cols, 0.05), rows, cols, bits)
	}
	return &model.MoE{
		Router: q(s.E, s.H, 8), SharedExpertGate: q(1, s.H, 8),
		Gate: q(s.E*s.I, s.H, 4), Up: q(s.E*s.I, s.H, 4), Down: q(s.E*s.H, s.I, 4),
		SharedGate: q(s.SI, s.H, 4), SharedUp: q(s.SI, s.H, 4), SharedDown: q(s.H, s.SI, 4),
	}
}

// qbufs are the emulator buffers holding a quantized matrix.
type qbufs = QMatrixBuffers[*emu.Buffer]

func bufsOf(m *quant.Matrix) qbufs {
	return qbufs{Words: emu.BufferOf(m.Words), Scales: emu.BufferOf(m.Scales), Biases: emu.BufferOf(m.Biases)}
}

// moeBufs holds a layer's weights on the "device".
type moeBufs struct {
	router, seg, gate, up, down, shGate, shUp, shDown qbufs
}

// gateUp is moe_gate_up's buffers (moe_gate_up_norm's with gain).
func (d *moeBufs) gateUp(ids, x, act, gain *emu.Buffer) MoEGateUpBuffers[*emu.Buffer] {
	return MoEGateUpBuffers[*emu.Buffer]{IDs: ids, Gate: d.gate, Up: d.up, SharedGate: d.shGate, SharedUp: d.shUp, X: x, Act: act, Gain: gain}
}

func deviceMoE(mo *model.MoE) *moeBufs {
	return &moeBufs{
		router: bufsOf(mo.Router), seg: bufsOf(mo.SharedExpertGate),
		gate: bufsOf(mo.Gate), up: bufsOf(mo.Up), down: bufsOf(mo.Down),
		shGate: bufsOf(mo.SharedGate), shUp: bufsOf(mo.SharedUp), shDown: bufsOf(mo.SharedDown),
	}
}

// runRouter dispatches moe_router; ids and weights come back in fresh buffers filled with 0xFF.
func runRouter(t *testing.T, lib *emu.Library, s MoEShape, dev *moeBufs, x *emu.Buffer, threads int, order emu.Order) (ids, weights *emu.Buffer) {
	t.Helper()
	ids, weights = emu.NewBuffer(4*s.K), emu.NewBuffer(4*(s.K+1))
	ids.Fill(0xFF)
	weights.Fill(0xFF)
	mustDispatch(t, lib, MoERouterCall(s, threads, MoERouterBuffers[*emu.Buffer]{
		Router: dev.router, SharedGate: dev.seg, X: x, IDs: ids, Weights: weights,
	}), order, 3)
	return ids, weights
}

func runTopK(t *testing.T, lib *emu.Library, s MoEShape, logits []float32, shared float32, order emu.Order) ([]uint32, []float32) {
	t.Helper()
	ids, weights := emu.NewBuffer(4*s.K), emu.NewBuffer(4*(s.K+1))
	ids.Fill(0xFF)
	weights.Fill(0xFF)
	mustDispatch(t, lib, MoETopKCall(s, MoETopKBuffers[*emu.Buffer]{
		Logits: emu.BufferOf(logits), Shared: emu.BufferOf([]float32{shared}), IDs: ids, Weights: weights,
	}), order, 4)
	return ids.Uint32s(), weights.Float32s()
}

func runGateUp(t *testing.T, lib *emu.Library, s MoEShape, dev *moeBufs, ids, x *emu.Buffer, order emu.Order) *emu.Buffer {
	t.Helper()
	act := emu.NewBuffer(4 * s.ActLen())
	act.Fill(0xFF)
	mustDispatch(t, lib, MoEGateUpCall(s, dev.gateUp(ids, x, act, nil)), order, 5)
	return act
}

// runDown dispatches moe_down_combine; res is updated in place.
func runDown(t *testing.T, lib *emu.Library, s MoEShape, dev *moeBufs, ids, weights, act, res *emu.Buffer, order emu.Order) {
	t.Helper()
	mustDispatch(t, lib, MoEDownCombineCall(s, MoEDownCombineBuffers[*emu.Buffer]{
		IDs: ids, Weights: weights, Down: dev.down, SharedDown: dev.shDown, Act: act, Res: res,
	}), order, 6)
}

// absErr is max |got - want| (NaN if got holds one).
func absErr(got, want []float32) float64 {
	var d float64
	for i := range want {
		if math.IsNaN(float64(got[i])) {
			return math.NaN()
		}
		d = max(d, math.Abs(float64(got[i])-float64(want[i])))
	}
	return d
}

// Tolerances for the emulator (IEEE float32, libm exp); the test logs show the measured worst
// cases, 2-5 times smaller. Metal's fast math (approximate exp, reassociation) needs more.
const (
	routeWeightTol = 1e-6 // routing weights (≤ 1) from the same logits: exp and sum order only
	routerTol      = 2e-6 // routing weights from the kernel's own GEMV logits
	gateUpTol      = 5e-6 // act, relative to max |act|
	downTol        = 5e-6 // res, relative to max |MoE output|
)

var moeWorst struct{ router, topk, gateUp, down, order float64 }

func checkRoute(t *testing.T, what string, ids []uint32, weights []float32, wantIDs []uint32, wantW []float32, tol float64) float64 {
	t.Helper()
	if !slices.Equal(ids, wantIDs) {
		t.Fatalf("%s: ids %v, want %v", what, ids, wantIDs)
	}
	e := absErr(weights, wantW)
	if !(e <= tol) {
		t.Errorf("%s: weights %v, want %v (max error %.2g)", what, weights, wantW, e)
	}
	return e
}

func TestMoERouter(t *testing.T) {
	lib := library(t, emu.Options{}, "moe.metal")
	r := rand.New(rand.NewPCG(21, 22))
	for _, c := range moeShapes {
		s := c.s
		if err := s.Validate(); err != nil {
			t.Fatal(err)
		}
		mo := &model.MoE{
			Router:           quant.Quantize(randFloats(r, s.E*s.H, 0.05), s.E, s.H, 8),
			SharedExpertGate: quant.Quantize(randFloats(r, s.H, 0.05), 1, s.H, 8),
		}
		dev := &moeBufs{router: bufsOf(mo.Router), seg: bufsOf(mo.SharedExpertGate)}
		for _, order := range emu.Orders {
			t.Run(fmt.Sprintf("E%d_K%d_H%d_tg%d_%v", s.E, s.K, s.H, c.routerThreads, order), func(t *testing.T) {
				x := randFloats(r, s.H, 1)
				logits, shared := MoERouterLogits(mo, x)
				wantIDs, wantW := MoERoute(logits, shared, s.K)
				ids, weights := runRouter(t, lib, s, dev, emu.BufferOf(x), c.routerThreads, order)
				e := checkRoute(t, "router", ids.Uint32s(), weights.Float32s(), wantIDs, wantW, routerTol)
				moeWorst.router = max(moeWorst.router, e)
			})
		}
	}
	t.Logf("max routing-weight error vs Go (logits by quant.MatVec) %.2g", moeWorst.router)
}

// TestMoERouterTies duplicates the top expert's router row into other rows (bitwise-equal
// logits): the tie must go to the lower ids, also across the K boundary. A zero x makes every
// logit equal: experts 0..K-1 with weight 1/K each, shared gate 1/2.
func TestMoERouterTies(t *testing.T) {
	lib := library(t, emu.Options{}, "moe.metal")
	r := rand.New(rand.NewPCG(23, 24))
	s := MoEShape{H: 128, E: 40, K: 4, I: 64, SI: 64}
	router := quant.Quantize(randFloats(r, s.E*s.H, 0.05), s.E, s.H, 8)
	seg := quant.Quantize(randFloats(r, s.H, 0.05), 1, s.H, 8)
	x := randFloats(r, s.H, 1)
	mo := &model.MoE{Router: router, SharedExpertGate: seg}
	logits, shared := MoERouterLogits(mo, x)
	wantIDs, _ := MoERoute(logits, shared, s.K)
	src := int(wantIDs[0])
	wpr, gpr := s.H/4, s.H/64
	for _, dst := range []int{1, 7, 33, 38, 39} { // 6 equal maxima: only the 4 lowest ids are taken
		if dst == src {
			continue
		}
		copy(router.Words[dst*wpr:(dst+1)*wpr], router.Words[src*wpr:(src+1)*wpr])
		copy(router.Scales[dst*gpr:(dst+1)*gpr], router.Scales[src*gpr:(src+1)*gpr])
		copy(router.Biases[dst*gpr:(dst+1)*gpr], router.Biases[src*gpr:(src+1)*gpr])
		logits[dst] = logits[src] // equal in exact arithmetic; make the reference agree exactly
	}
	wantIDs, wantW := MoERoute(logits, shared, s.K)
	dev := &moeBufs{router: bufsOf(router), seg: bufsOf(seg)}
	for _, order := range emu.Orders {
		ids, weights := runRouter(t, lib, s, dev, emu.BufferOf(x), 64, order)
		checkRoute(t, fmt.Sprintf("ties %v", order), ids.Uint32s(), weights.Float32s(), wantIDs, wantW, routerTol)
	}
	ids, weights := runRouter(t, lib, s, dev, emu.NewBuffer(4*s.H), 128, emu.Shuffle)
	checkRoute(t, "x = 0", ids.Uint32s(), weights.Float32s(), []uint32{0, 1, 2, 3}, []float32{0.25, 0.25, 0.25, 0.25, 0.5}, 0)
}

// TestMoETopK routes given logits: the same logits as the Go reference, so ids must match
// exactly and weights to exp/summation rounding; includes exact ties, ties among probabilities
// that underflow to zero, and K = E.
func TestMoETopK(t *testing.T) {
	lib := library(t, emu.Options{}, "moe.metal")
	r := rand.New(rand.NewPCG(25, 26))
	type tc struct {
		name   string
		e, k   int
		logits func() []float32
	}
	cases := []tc{
		{"random", 256, 8, func() []float32 { return randFloats(r, 256, 2) }},
		{"random_e40", 40, 5, func() []float32 { return randFloats(r, 40, 3) }},
		{"max_e", MoEMaxExperts, MoEMaxTopK, func() []float32 { return randFloats(r, MoEMaxExperts, 1) }},
		{"k_eq_e", 8, 8, func() []float32 { return randFloats(r, 8, 1) }},
		{"ties", 64, 8, func() []float32 {
			l := randFloats(r, 64, 0.1)
			for _, i := range []int{3, 17, 40, 41, 63, 9, 12, 50, 51, 52} {
				l[i] = 2 // ten equal maxima: the eight lowest ids win
			}
			return l
		}},
		{"underflow", 20, 6, func() []float32 {
			l := make([]float32, 20)
			for i := range l {
				l[i] = -1e4 // probability exactly 0
			}
			l[2], l[19], l[5], l[11] = 1, 0.5, 0.5, -1
			return l // four non-zero, then the zero-probability tie: ids 0 and 1
		}},
	}
	var worst float64
	for _, c := range cases {
		s := MoEShape{H: 64, E: c.e, K: c.k, I: 64, SI: 64}
		for _, order := range emu.Orders {
			logits, shared := c.logits(), float32(r.NormFloat64()*4)
			wantIDs, wantW := MoERoute(logits, shared, s.K)
			ids, weights := runTopK(t, lib, s, logits, shared, order)
			worst = max(worst, checkRoute(t, fmt.Sprintf("%s %v", c.name, order), ids, weights, wantIDs, wantW, routeWeightTol))
		}
	}
	t.Logf("max routing-weight error vs Go (same logits) %.2g", worst)
}

// distinctIDs returns k distinct random experts, the last expert among them when k > 1.
func distinctIDs(r *rand.Rand, e, k int) []uint32 {
	ids := make([]uint32, k)
	for i, v := range r.Perm(e)[:k] {
		ids[i] = uint32(v)
	}
	if k > 1 && !slices.Contains(ids, uint32(e-1)) {
		ids[k/2] = uint32(e - 1)
	}
	return ids
}

func TestMoEGateUp(t *testing.T) {
	lib := library(t, emu.Options{}, "moe.metal")
	r := rand.New(rand.NewPCG(27, 28))
	for _, c := range moeShapes {
		s := c.s
		mo := randomMoE(r, s)
		dev := deviceMoE(mo)
		for _, order := range emu.Orders {
			t.Run(fmt.Sprintf("%+v_%v", s, order), func(t *testing.T) {
				moeWorst.gateUp = max(moeWorst.gateUp, checkGateUp(t, lib, r, s, mo, dev, order))
			})
		}
	}
	t.Logf("max act error vs Go, relative to max |act|: %.2g", moeWorst.gateUp)
}

func checkGateUp(t *testing.T, lib *emu.Library, r *rand.Rand, s MoEShape, mo *model.MoE, dev *moeBufs, order emu.Order) float64 {
	ids, x := distinctIDs(r, s.E, s.K), randFloats(r, s.H, 1)
	want := MoEGateUp(mo, s, ids, x)
	got := runGateUp(t, lib, s, dev, emu.BufferOf(ids), emu.BufferOf(x), order).Float32s()
	e := relErr(got, want)
	if !(e <= gateUpTol) {
		t.Errorf("%+v %v ids %v: act relative error %.2g", s, order, ids, e)
	}
	return e
}

func TestMoEDownCombine(t *testing.T) {
	lib := library(t, emu.Options{}, "moe.metal")
	r := rand.New(rand.NewPCG(29, 30))
	for _, c := range moeShapes {
		s := c.s
		mo := randomMoE(r, s)
		dev := deviceMoE(mo)
		for _, order := range emu.Orders {
			t.Run(fmt.Sprintf("%+v_%v", s, order), func(t *testing.T) {
				e, o := checkDown(t, lib, r, s, mo, dev, order)
				moeWorst.down, moeWorst.order = max(moeWorst.down, e), max(moeWorst.order, o)
			})
		}
	}
	t.Logf("max res error vs Go (ascending expert id, shared last), relative to max |MoE output|: %.2g; "+
		"the Go reference in slot order differs from it by %.2g", moeWorst.down, moeWorst.order)
}

// checkDown returns the kernel's error against the reference (ascending ids) and how far the
// reference in slot order is from it, both relative to max |MoE output|.
func checkDown(t *testing.T, lib *emu.Library, r *rand.Rand, s MoEShape, mo *model.MoE, dev *moeBufs, order emu.Order) (kernelErr, orderErr float64) {
	ids := distinctIDs(r, s.E, s.K)
	weights := make([]float32, s.K+1)
	var sum float32
	for i := range s.K {
		weights[i] = 0.05 + r.Float32()
		sum += weights[i]
	}
	for i := range s.K {
		weights[i] /= sum
	}
	weights[s.K] = r.Float32()
	act := randFloats(r, s.ActLen(), 0.5)
	res0 := randFloats(r, s.H, 1)
	want := slices.Clone(res0)
	MoEDownCombine(mo, s, ids, weights, act, want, false)
	slotOrder := slices.Clone(res0)
	MoEDownCombine(mo, s, ids, weights, act, slotOrder, true)
	out := make([]float32, s.H) // the MoE output alone, for the scale
	MoEDownCombine(mo, s, ids, weights, act, out, false)
	var scale float64
	for _, v := range out {
		scale = max(scale, math.Abs(float64(v)))
	}
	res := emu.BufferOf(res0)
	runDown(t, lib, s, dev, emu.BufferOf(ids), emu.BufferOf(weights), emu.BufferOf(act), res, order)
	kernelErr = absErr(res.Float32s(), want) / scale
	orderErr = absErr(slotOrder, want) / scale
	if !(kernelErr <= downTol) {
		t.Errorf("%+v %v: res error %.2g of max |MoE output|", s, order, kernelErr)
	}
	return kernelErr, orderErr
}

// TestMoEProduction runs the model's shape through the three dispatches in a chain (router →
// gate_up → down_combine on device buffers, as a decode step does) against MoEBlock. Only the
// selected experts' rows of the stacked tensors hold data; the rest are zero, so reading a wrong
// expert shows.
func TestMoEProduction(t *testing.T) {
	lib := library(t, emu.Options{}, "moe.metal")
	r := rand.New(rand.NewPCG(31, 32))
	s := moeProduction
	mo := &model.MoE{
		Router:           quant.Quantize(randFloats(r, s.E*s.H, 0.05), s.E, s.H, 8),
		SharedExpertGate: quant.Quantize(randFloats(r, s.H, 0.05), 1, s.H, 8),
		SharedGate:       randomQ4(r, s.SI, s.H), SharedUp: randomQ4(r, s.SI, s.H), SharedDown: randomQ4(r, s.H, s.SI),
	}
	x := randFloats(r, s.H, 1)
	logits, shared := MoERouterLogits(mo, x)
	wantIDs, _ := MoERoute(logits, shared, s.K)

	// Stacked expert tensors directly in device buffers (no copies of ~400 MB), the reference's
	// matrices viewing the same memory.
	stacked := func(rows, cols, perExpert int) (*quant.Matrix, qbufs) {
		q := qbufs{Words: emu.NewBuffer(rows * cols / 2), Scales: emu.NewBuffer(rows * cols / 32), Biases: emu.NewBuffer(rows * cols / 32)}
		m := &quant.Matrix{Rows: rows, Cols: cols, Bits: 4, Words: q.Words.Uint32s(), Scales: q.Scales.Uint16s(), Biases: q.Biases.Uint16s()}
		for _, e := range wantIDs {
			fillQ4(r, m.RowRange(int(e)*perExpert, perExpert))
		}
		return m, q
	}
	dev := &moeBufs{
		router: bufsOf(mo.Router), seg: bufsOf(mo.SharedExpertGate),
		shGate: bufsOf(mo.SharedGate), shUp: bufsOf(mo.SharedUp), shDown: bufsOf(mo.SharedDown),
	}
	mo.Gate, dev.gate = stacked(s.E*s.I, s.H, s.I)
	mo.Up, dev.up = stacked(s.E*s.I, s.H, s.I)
	mo.Down, dev.down = stacked(s.E*s.H, s.I, s.H)

	res0 := randFloats(r, s.H, 1)
	want := slices.Clone(res0)
	_, wantW := MoEBlock(mo, s, x, want)
	out := make([]float32, s.H)
	MoEBlock(mo, s, x, out)
	var scale float64
	for _, v := range out {
		scale = max(scale, math.Abs(float64(v)))
	}

	bx, res := emu.BufferOf(x), emu.BufferOf(res0)
	ids, weights := runRouter(t, lib, s, dev, bx, MoERouterThreads, emu.Shuffle)
	wErr := checkRoute(t, "router", ids.Uint32s(), weights.Float32s(), wantIDs, wantW, routerTol)
	act := runGateUp(t, lib, s, dev, ids, bx, emu.Reverse)
	actErr := relErr(act.Float32s(), MoEGateUp(mo, s, wantIDs, x))
	runDown(t, lib, s, dev, ids, weights, act, res, emu.Forward)
	resErr := absErr(res.Float32s(), want) / scale
	if !(actErr <= gateUpTol && resErr <= downTol) {
		t.Errorf("act relative error %.2g, res error %.2g of max |MoE output|", actErr, resErr)
	}
	slotOrder := slices.Clone(res0)
	MoEDownCombine(mo, s, wantIDs, wantW, MoEGateUp(mo, s, wantIDs, x), slotOrder, true)
	t.Logf("ids %v; errors: routing weights %.2g, act %.2g (of max |act|), res %.2g (of max |MoE output| %.3g); "+
		"Go reference in slot order vs ascending ids: %.2g", ids.Uint32s(), wErr, actErr, resErr, scale, absErr(slotOrder, want)/scale)
	b := s.Bytes()
	t.Logf("bytes read (weights + I/O): router %d + %d, gate_up %d + %d, down_combine %d + %d; weights total %d",
		b.RouterWeights, b.RouterIO, b.GateUpWeights, b.GateUpIO, b.DownWeights, b.DownIO, b.RouterWeights+b.GateUpWeights+b.DownWeights)
}

// randomQ4 is a rows×cols 4-bit matrix of random codes with plausible scales and biases
// (weights about ±0.05), made without quant.Quantize (fast at production sizes).
func randomQ4(r *rand.Rand, rows, cols int) *quant.Matrix {
	m := &quant.Matrix{Rows: rows, Cols: cols, Bits: 4,
		Words: make([]uint32, rows*cols/8), Scales: make([]uint16, rows*cols/64), Biases: make([]uint16, rows*cols/64)}
	fillQ4(r, m)
	return m
}

func fillQ4(r *rand.Rand, m *quant.Matrix) {
	for i := range m.Words {
		m.Words[i] = r.Uint32()
	}
	for g := range m.Scales {
		sc := float32(0.004 + 0.01*r.Float64())
		if r.IntN(2) == 0 {
			sc = -sc // MLX scales take either sign
		}
		m.Scales[g] = quant.F32ToBF16(sc)
		m.Biases[g] = quant.F32ToBF16(-7.5*sc + 0.01*float32(r.NormFloat64()))
	}
}

func TestMoEASan(t *testing.T) {
	lib := library(t, emu.Options{ASan: true}, "moe.metal")
	r := rand.New(rand.NewPCG(33, 34))
	for _, c := range moeShapes[1:3] {
		s := c.s
		mo := randomMoE(r, s)
		dev := deviceMoE(mo)
		x := randFloats(r, s.H, 1)
		logits, shared := MoERouterLogits(mo, x)
		wantIDs, wantW := MoERoute(logits, shared, s.K)
		ids, weights := runRouter(t, lib, s, dev, emu.BufferOf(x), c.routerThreads, emu.Shuffle)
		checkRoute(t, "router", ids.Uint32s(), weights.Float32s(), wantIDs, wantW, routerTol)
		tid, tw := runTopK(t, lib, s, logits, shared, emu.Reverse)
		checkRoute(t, "topk", tid, tw, wantIDs, wantW, routeWeightTol)
		checkGateUp(t, lib, r, s, mo, dev, emu.Shuffle)
		checkDown(t, lib, r, s, mo, dev, emu.Reverse)
	}
}
