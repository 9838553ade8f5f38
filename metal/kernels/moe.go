package kernels

import (
	"fmt"
	"math"
	"sort"

	"github.com/lilyformac/lily/engine/f32"
	"github.com/lilyformac/lily/engine/model"
	"github.com/lilyformac/lily/engine/quant"
)

// MoE function constant indices (moe.metal; every kernel of the file takes all five).
const (
	MoEHidden         = 0 // uint MOE_H
	MoEExperts        = 1 // uint MOE_E
	MoETopK           = 2 // uint MOE_K
	MoEIntermediate   = 3 // uint MOE_I
	MoESharedInter    = 4 // uint MOE_SI
	MoEEps            = 5 // float MOE_EPS: the RMSNorm epsilon of moe_router_norm / moe_gate_up_norm (optional)
	MoETokens         = 6 // uint MOE_T_FC: moe_sort's tokens (optional)
	MoEBlockRowsConst = 7 // uint MOE_BM_FC: moe_sort's pairs per block (optional, 32)
	MoEBatch          = 8 // uint MOE_BATCH_FC: decode rows of the decode kernels (optional, 1)
)

// MoEMaxBatch is the most decode rows one dispatch of moe_router, moe_gate_up or
// moe_down_combine takes (MOE_MAX_BATCH: the per-row accumulators a lane holds are sized for it).
const MoEMaxBatch = 8

// MoERouterLogitRoom is the logits moe_router holds in threadgroup memory (MOE_LOGITS): it runs
// its decode rows in passes of RouterPassRows each, reading the router once per pass.
const MoERouterLogitRoom = 2056

// RouterPassRows is how many of rows decode rows one moe_router pass takes: all 8 at E = 256.
func (s MoEShape) RouterPassRows(rows int) int { return max(1, min(rows, MoERouterLogitRoom/(s.E+1))) }

// rowsConstants sets MOE_BATCH to rows (1 to MoEMaxBatch; anything else panics).
func rowsConstants(c map[int]any, rows int) map[int]any {
	if rows < 1 || rows > MoEMaxBatch {
		panic(fmt.Sprintf("kernels: moe over %d decode rows (1 to %d)", rows, MoEMaxBatch))
	}
	c[MoEBatch] = rows
	return c
}

// The _norm kernels' extra binding: the bf16 post-attention norm gain (x is then the residual).
const (
	MoERouterGain = 9  // moe_router_norm
	MoEGateUpGain = 15 // moe_gate_up_norm
)

// NormConstants are the function constants of moe_router_norm and moe_gate_up_norm.
func (s MoEShape) NormConstants(eps float32) map[int]any {
	c := s.Constants()
	c[MoEEps] = eps
	return c
}

// MoE kernel geometry.
const (
	MoERouterThreads = 1024 // moe_router's production threadgroup: 32 simdgroups (any multiple of 32 works)
	MoETopKThreads   = 32   // moe_topk: one simdgroup
	MoEThreads       = 64   // moe_gate_up and moe_down_combine: 2 simdgroups of 4 rows
	MoERowsPerGroup  = 8
	MoEMaxExperts    = 1024
	MoEMaxTopK       = 32
)

// MoEShape is the MoE block's shape: the model is {H: 2048, E: 256, K: 8, I: 512, SI: 512}.
type MoEShape struct {
	H  int // hidden size
	E  int // routed experts
	K  int // experts per token
	I  int // routed expert intermediate size
	SI int // shared expert intermediate size
}

// Validate reports whether moe.metal supports the shape.
func (s MoEShape) Validate() error {
	switch {
	case s.H <= 0 || s.H%quant.GroupSize != 0 || s.I <= 0 || s.I%quant.GroupSize != 0 || s.SI <= 0 || s.SI%quant.GroupSize != 0:
		return fmt.Errorf("moe: shape %+v: H, I and SI must be positive multiples of %d", s, quant.GroupSize)
	case s.E <= 0 || s.E > MoEMaxExperts:
		return fmt.Errorf("moe: %d experts: want 1..%d", s.E, MoEMaxExperts)
	case s.K <= 0 || s.K > s.E || s.K > MoEMaxTopK:
		return fmt.Errorf("moe: top-%d of %d experts: want 1..min(E, %d)", s.K, s.E, MoEMaxTopK)
	}
	return nil
}

// Constants are the function constants of every moe.metal pipeline.
func (s MoEShape) Constants() map[int]any {
	return map[int]any{MoEHidden: s.H, MoEExperts: s.E, MoETopK: s.K, MoEIntermediate: s.I, MoESharedInter: s.SI}
}

// ActLen is the length of moe_gate_up's output: K routed slots of I, then the shared SI.
func (s MoEShape) ActLen() int { return s.K*s.I + s.SI }

// GateUpThreadgroups is moe_gate_up's grid: (row blocks of 8, K+1 slots).
func (s MoEShape) GateUpThreadgroups() [3]int {
	return [3]int{(max(s.I, s.SI) + MoERowsPerGroup - 1) / MoERowsPerGroup, s.K + 1, 1}
}

// GateUpRowsThreadgroups is moe_gate_up's grid for rows decode rows: (row blocks of 8, K·rows
// (row, slot) pairs + the shared expert, which runs every row). A pair whose expert an earlier
// row chose returns: that row's pair runs the expert for both.
func (s MoEShape) GateUpRowsThreadgroups(rows int) [3]int {
	g := s.GateUpThreadgroups()
	g[1] = s.K*rows + 1
	return g
}

// DownThreadgroups is moe_down_combine's grid: H rows, 8 per threadgroup (for any number of
// decode rows).
func (s MoEShape) DownThreadgroups() [3]int {
	return [3]int{(s.H + MoERowsPerGroup - 1) / MoERowsPerGroup, 1, 1}
}

// MoEBytes is what each dispatch of one token must read from device memory (weights of the
// selected experts only; the small vectors counted once, although every threadgroup re-reads x
// through the caches) and write.
type MoEBytes struct {
	RouterWeights, GateUpWeights, DownWeights int // quantized weights touched
	RouterIO, GateUpIO, DownIO                int // activations, ids and weights read + written
}

// qBytes is the size of a rows×cols MLX matrix of bits-wide codes: codes plus bf16 scale and
// bias per 64.
func qBytes(rows, cols, bits int) int { return rows*cols*bits/8 + rows*cols/quant.GroupSize*4 }

// Bytes returns the traffic model of the block (router 8-bit, experts 4-bit).
func (s MoEShape) Bytes() MoEBytes {
	return MoEBytes{
		RouterWeights: qBytes(s.E, s.H, 8) + qBytes(1, s.H, 8),
		GateUpWeights: 2 * (s.K*qBytes(s.I, s.H, 4) + qBytes(s.SI, s.H, 4)),
		DownWeights:   s.K*qBytes(s.H, s.I, 4) + qBytes(s.H, s.SI, 4),
		RouterIO:      4*s.H + 4*s.K + 4*(s.K+1),
		GateUpIO:      4*s.K + 4*s.H + 4*s.ActLen(),
		DownIO:        4*s.K + 4*(s.K+1) + 4*s.ActLen() + 2*4*s.H,
	}
}

// MoERoute is the Go reference of the routing in moe_router and moe_topk (engine/cpu moe() for
// one token): P = softmax(logits) in float32, the k largest P (ties to the lower id) largest
// first, weights P/Σ (summed in that order), and weights[k] = sigmoid(shared).
func MoERoute(logits []float32, shared float32, k int) (ids []uint32, weights []float32) {
	m := float32(math.Inf(-1))
	for _, v := range logits {
		m = max(m, v)
	}
	p := make([]float32, len(logits))
	var sum float32
	for i, v := range logits {
		p[i] = float32(math.Exp(float64(v - m)))
		sum += p[i]
	}
	for i := range p {
		p[i] /= sum
	}
	taken := make([]bool, len(p))
	var total float32
	for range k {
		best := -1
		for i, v := range p {
			if !taken[i] && (best < 0 || v > p[best]) {
				best = i
			}
		}
		taken[best] = true
		ids = append(ids, uint32(best))
		total += p[best]
	}
	for _, e := range ids {
		weights = append(weights, p[e]/total)
	}
	return ids, append(weights, f32.Sigmoid(shared))
}

// MoERouterLogits is the Go reference of moe_router's GEMV: the E router logits and the shared
// gate's logit.
func MoERouterLogits(mo *model.MoE, x []float32) (logits []float32, shared float32) {
	logits = make([]float32, mo.Router.Rows)
	quant.MatVec(mo.Router, logits, x)
	s := make([]float32, 1)
	quant.MatVec(mo.SharedExpertGate, s, x)
	return logits, s[0]
}

// MoEGateUp is the Go reference of moe_gate_up: act[slot·I + r] = silu(g)·u for the experts
// ids (rows e·I.. of mo.Gate and mo.Up) and, at slot K, the shared expert (engine/cpu swiglu).
func MoEGateUp(mo *model.MoE, s MoEShape, ids []uint32, x []float32) []float32 {
	act := make([]float32, s.ActLen())
	for slot := 0; slot <= s.K; slot++ {
		gate, up, n := mo.SharedGate, mo.SharedUp, s.SI
		if slot < s.K {
			e := int(ids[slot])
			gate, up, n = mo.Gate.RowRange(e*s.I, s.I), mo.Up.RowRange(e*s.I, s.I), s.I
		}
		g, u := make([]float32, n), make([]float32, n)
		quant.MatVec(gate, g, x)
		quant.MatVec(up, u, x)
		for r := range n {
			act[slot*s.I+r] = f32.Silu(g[r]) * u[r]
		}
	}
	return act
}

// ascendingSlots is a token's slots in ascending expert id (engine/cpu's order of the experts).
func ascendingSlots(ids []uint32) []int {
	order := make([]int, len(ids))
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(a, b int) bool { return ids[order[a]] < ids[order[b]] })
	return order
}

// MoEDownCombine is the Go reference of moe_down_combine: res += Σ weights[slot]·down_slot·act_slot.
// Like engine/cpu (and HF), the routed experts are accumulated in ascending expert id from zero,
// the shared expert (weight weights[K], already the sigmoid) is added last, and the sum is then
// added to res. With inSlotOrder the experts are taken in slot order instead (moe_down_combine's
// order), which differs by rounding only.
func MoEDownCombine(mo *model.MoE, s MoEShape, ids []uint32, weights, act, res []float32, inSlotOrder bool) {
	order := make([]int, s.K)
	for i := range order {
		order[i] = i
	}
	if !inSlotOrder {
		order = ascendingSlots(ids[:s.K])
	}
	y := make([]float32, s.H)
	down := make([]float32, s.H)
	for _, slot := range order {
		e := int(ids[slot])
		quant.MatVec(mo.Down.RowRange(e*s.H, s.H), down, act[slot*s.I:slot*s.I+s.I])
		for d, v := range down {
			y[d] += v * weights[slot]
		}
	}
	quant.MatVec(mo.SharedDown, down, act[s.K*s.I:s.K*s.I+s.SI])
	for d, v := range down {
		y[d] += weights[s.K] * v
	}
	for d, v := range y {
		res[d] += v
	}
}

// MoEBlock is the Go reference of the three dispatches together: res += MoE(x).
func MoEBlock(mo *model.MoE, s MoEShape, x, res []float32) (ids []uint32, weights []float32) {
	logits, shared := MoERouterLogits(mo, x)
	ids, weights = MoERoute(logits, shared, s.K)
	MoEDownCombine(mo, s, ids, weights, MoEGateUp(mo, s, ids, x), res, false)
	return ids, weights
}

// MoEDecodeRows is the Go reference of the decode MoE block over rows decode rows (x and res
// [rows][H]): each row is MoEBlock on that row alone. It returns ids [rows][K] and weights
// [rows][K+1].
func MoEDecodeRows(mo *model.MoE, s MoEShape, rows int, x, res []float32) (ids []uint32, weights []float32) {
	for r := range rows {
		i, w := MoEBlock(mo, s, x[r*s.H:(r+1)*s.H], res[r*s.H:(r+1)*s.H])
		ids, weights = append(ids, i...), append(weights, w...)
	}
	return ids, weights
}

// MoERouterBuffers are moe_router's and moe_router_norm's buffers, by role.
type MoERouterBuffers[B any] struct {
	Router     QMatrixBuffers[B] // 0-2: [E, H] 8-bit
	SharedGate QMatrixBuffers[B] // 3-5: [1, H] 8-bit, the shared expert's gate
	X          B                 // 6: [rows][H] (moe_router_norm: the un-normed residual)
	IDs        B                 // 7: [rows][K] uint32
	Weights    B                 // 8: [rows][K + 1] float32
	Gain       B                 // MoERouterGain: [H] bf16, bound by MoERouterNormCall only
}

func (b MoERouterBuffers[B]) bindings() map[int]B {
	bs := map[int]B{6: b.X, 7: b.IDs, 8: b.Weights}
	b.Router.bind(bs, 0)
	b.SharedGate.bind(bs, 3)
	return bs
}

// MoERouterCall is moe_router for one token: one threadgroup of threads (a multiple of 32;
// MoERouterThreads in production).
func MoERouterCall[B any](s MoEShape, threads int, b MoERouterBuffers[B]) Call[B] {
	return Call[B]{Kernel: "moe_router", Constants: s.Constants(), Buffers: b.bindings(), Threadgroups: grid(1), Group: grid(threads)}
}

// MoERouterNormCall is moe_router_norm: moe_router on rmsnorm(X, Gain), the norm folded in.
func MoERouterNormCall[B any](s MoEShape, eps float32, threads int, b MoERouterBuffers[B]) Call[B] {
	bs := b.bindings()
	bs[MoERouterGain] = b.Gain
	return Call[B]{Kernel: "moe_router_norm", Constants: s.NormConstants(eps), Buffers: bs, Threadgroups: grid(1), Group: grid(threads)}
}

// MoERouterRowsCall is moe_router for rows decode rows (MOE_BATCH set, 1 to MoEMaxBatch): the
// same single threadgroup, the router read once per pass (RouterPassRows); each row's ids and
// weights bit-identical to MoERouterCall on that row alone.
func MoERouterRowsCall[B any](s MoEShape, rows, threads int, b MoERouterBuffers[B]) Call[B] {
	c := MoERouterCall(s, threads, b)
	c.Constants = rowsConstants(c.Constants, rows)
	return c
}

// MoERouterNormRowsCall is moe_router_norm for rows decode rows (MoERouterRowsCall).
func MoERouterNormRowsCall[B any](s MoEShape, rows int, eps float32, threads int, b MoERouterBuffers[B]) Call[B] {
	c := MoERouterNormCall(s, eps, threads, b)
	c.Constants = rowsConstants(c.Constants, rows)
	return c
}

// MoETopKBuffers are moe_topk's buffers, by role.
type MoETopKBuffers[B any] struct {
	Logits  B // 0: [E] router logits
	Shared  B // 1: [1] the shared gate's logit
	IDs     B // 2: [K]
	Weights B // 3: [K + 1]
}

// MoETopKCall is moe_topk, the routing half of moe_router on given logits (the plan does not run
// it; the tests check the routing with it): one simdgroup.
func MoETopKCall[B any](s MoEShape, b MoETopKBuffers[B]) Call[B] {
	return Call[B]{
		Kernel: "moe_topk", Constants: s.Constants(), Buffers: map[int]B{0: b.Logits, 1: b.Shared, 2: b.IDs, 3: b.Weights},
		Threadgroups: grid(1), Group: grid(MoETopKThreads),
	}
}

// MoEGateUpBuffers are moe_gate_up's and moe_gate_up_norm's buffers, by role.
type MoEGateUpBuffers[B any] struct {
	IDs        B                 // 0: [rows][K] the chosen experts
	Gate, Up   QMatrixBuffers[B] // 1-3, 4-6: [E·I, H] 4-bit, the routed experts stacked
	SharedGate QMatrixBuffers[B] // 7-9: [SI, H] 4-bit
	SharedUp   QMatrixBuffers[B] // 10-12: [SI, H] 4-bit
	X          B                 // 13: [rows][H] (moe_gate_up_norm: the un-normed residual)
	Act        B                 // 14: [rows][ActLen]
	Gain       B                 // MoEGateUpGain: [H] bf16, bound by MoEGateUpNormCall only
}

func (b MoEGateUpBuffers[B]) bindings() map[int]B {
	bs := map[int]B{0: b.IDs, 13: b.X, 14: b.Act}
	b.Gate.bind(bs, 1)
	b.Up.bind(bs, 4)
	b.SharedGate.bind(bs, 7)
	b.SharedUp.bind(bs, 10)
	return bs
}

// MoEGateUpCall is moe_gate_up for the K chosen experts and the shared one (GateUpThreadgroups).
func MoEGateUpCall[B any](s MoEShape, b MoEGateUpBuffers[B]) Call[B] {
	return Call[B]{Kernel: "moe_gate_up", Constants: s.Constants(), Buffers: b.bindings(), Threadgroups: s.GateUpThreadgroups(), Group: grid(MoEThreads)}
}

// MoEGateUpNormCall is moe_gate_up_norm: moe_gate_up on rmsnorm(X, Gain), the norm folded in.
func MoEGateUpNormCall[B any](s MoEShape, eps float32, b MoEGateUpBuffers[B]) Call[B] {
	bs := b.bindings()
	bs[MoEGateUpGain] = b.Gain
	return Call[B]{Kernel: "moe_gate_up_norm", Constants: s.NormConstants(eps), Buffers: bs, Threadgroups: s.GateUpThreadgroups(), Group: grid(MoEThreads)}
}

// MoEGateUpRowsCall is moe_gate_up for rows decode rows (MOE_BATCH set, 1 to MoEMaxBatch; grid
// GateUpRowsThreadgroups; each expert's and the shared expert's weights read once for all the
// rows that use them): each row's act bit-identical to MoEGateUpCall on that row alone.
func MoEGateUpRowsCall[B any](s MoEShape, rows int, b MoEGateUpBuffers[B]) Call[B] {
	return gateUpRows(MoEGateUpCall(s, b), s, rows)
}

// MoEGateUpNormRowsCall is moe_gate_up_norm for rows decode rows (MoEGateUpRowsCall).
func MoEGateUpNormRowsCall[B any](s MoEShape, rows int, eps float32, b MoEGateUpBuffers[B]) Call[B] {
	return gateUpRows(MoEGateUpNormCall(s, eps, b), s, rows)
}

func gateUpRows[B any](c Call[B], s MoEShape, rows int) Call[B] {
	c.Constants = rowsConstants(c.Constants, rows)
	c.Threadgroups = s.GateUpRowsThreadgroups(rows)
	return c
}

// MoEDownCombineBuffers are moe_down_combine's buffers, by role.
type MoEDownCombineBuffers[B any] struct {
	IDs        B                 // 0: [rows][K]
	Weights    B                 // 1: [rows][K + 1]
	Down       QMatrixBuffers[B] // 2-4: [E·H, I] 4-bit
	SharedDown QMatrixBuffers[B] // 5-7: [H, SI] 4-bit
	Act        B                 // 8: [rows][ActLen]
	Res        B                 // 9: [rows][H], += in place
}

// MoEDownCombineCall is moe_down_combine: res += the weighted experts' down projections
// (DownThreadgroups).
func MoEDownCombineCall[B any](s MoEShape, b MoEDownCombineBuffers[B]) Call[B] {
	bs := map[int]B{0: b.IDs, 1: b.Weights, 8: b.Act, 9: b.Res}
	b.Down.bind(bs, 2)
	b.SharedDown.bind(bs, 5)
	return Call[B]{Kernel: "moe_down_combine", Constants: s.Constants(), Buffers: bs, Threadgroups: s.DownThreadgroups(), Group: grid(MoEThreads)}
}

// MoEDownCombineRowsCall is moe_down_combine for rows decode rows (MOE_BATCH set, 1 to
// MoEMaxBatch; the same grid, the shared expert's down rows read once for all rows): each row's
// res bit-identical to MoEDownCombineCall on that row alone.
func MoEDownCombineRowsCall[B any](s MoEShape, rows int, b MoEDownCombineBuffers[B]) Call[B] {
	c := MoEDownCombineCall(s, b)
	c.Constants = rowsConstants(c.Constants, rows)
	return c
}

// MoETopKChunkCall is moe_topk for tokens tokens of a prefill chunk (a threadgroup each): logits
// [tokens][E], the shared gate's logits [tokens], ids [tokens][K], weights [tokens][K+1].
func MoETopKChunkCall[B any](s MoEShape, tokens int, b MoETopKBuffers[B]) Call[B] {
	c := MoETopKCall(s, b)
	c.Threadgroups[0] = tokens
	return c
}

// ExpectedExperts is how many distinct experts a chunk of tokens routes to on average when each
// token picks K of E uniformly, E·(1 − (1 − K/E)^tokens), rounded up: the traffic model's
// stand-in for routing only the GPU knows (a chunk of 8 touches about 57 of 256, one of 4,096
// all of them).
func (s MoEShape) ExpectedExperts(tokens int) int {
	if tokens <= 0 {
		return 0
	}
	d := float64(s.E) * (1 - math.Pow(1-float64(s.K)/float64(s.E), float64(tokens)))
	return min(s.E, max(s.K, int(math.Ceil(d-1e-9))))
}

// ExpectedBlocks is the mean number of blocks of bm pairs a chunk of tokens fills when each token
// picks K of E experts uniformly: expert e's count is binomial(tokens, K/E) and takes
// ceil(count / bm) blocks.
func (s MoEShape) ExpectedBlocks(tokens, bm int) float64 {
	p := float64(s.K) / float64(s.E)
	var blocks float64
	lp := float64(tokens) * math.Log1p(-p) // log P(count = 0)
	for c := 1; c <= tokens; c++ {
		lp += math.Log(float64(tokens-c+1)/float64(c)) + math.Log(p) - math.Log1p(-p)
		pc := math.Exp(lp)
		blocks += pc * float64((c+bm-1)/bm)
		if c > int(float64(tokens)*p) && pc < 1e-12 {
			break
		}
	}
	return blocks * float64(s.E)
}

// moeDequantCost is the ALU time a grouped-GEMM block spends dequantising one weight value (about
// four operations: shift, mask, convert, multiply-add) in units of one multiply-add's FLOPs:
// every block dequantises its expert's whole matrices, whatever its rows, so short blocks pay it
// more often. An estimate until a Mac measures the kernels.
const moeDequantCost = 8

// BlockRows is the rows of a block of the grouped GEMMs (and of moe_sort's map) for a chunk of
// tokens: of QMMTileHeights, the one with the least expected work per weight value, blocks ×
// (2·bm multiply-add FLOPs + moeDequantCost), ties to the taller (fewer barriers). Under uniform
// routing that is 32 rows for 4,096 tokens, 16 for 512, 8 for 64 and fewer.
func (s MoEShape) BlockRows(tokens int) int {
	best, cost := 0, math.Inf(1)
	for _, bm := range QMMTileHeights {
		c := s.ExpectedBlocks(tokens, bm) * float64(2*bm+moeDequantCost)
		if c < cost*(1-1e-9) {
			best, cost = bm, c
		}
	}
	return best
}

// MoEBlocks is the capacity of moe_sort's block list for tokens tokens in blocks of bm: expert
// e's c_e pairs take ceil(c_e / bm) blocks, and Σ_e ceil(c_e/bm) <= Σ_e (c_e/bm + 1) =
// tokens·K/bm + E.
func (s MoEShape) MoEBlocks(tokens, bm int) int { return tokens*s.K/bm + s.E }

// MoESorted is moe_sort's result: the pairs (token, slot) of a chunk grouped by expert.
type MoESorted struct {
	Offs   []uint32    // [E+1] expert e's pairs are Tok[Offs[e]:Offs[e+1]]
	Tok    []uint32    // [tokens·K] each sorted pair's token
	W      []float32   // its routing weight
	Pos    []uint32    // [tokens·K] where pair (t, slot) went
	Blocks [][4]uint32 // [MoEBlocks] {expert, first pair, pairs, 0}; {MOE_NONE, 0, 0, 0} past the end
}

// MoESort is the Go reference of moe_sort: ids [tokens][K] and weights [tokens][K+1] (moe_topk's)
// sorted by expert, then token, in blocks of bm.
func MoESort(s MoEShape, ids []uint32, weights []float32, tokens, bm int) MoESorted {
	out := MoESorted{Offs: make([]uint32, s.E+1), Pos: make([]uint32, tokens*s.K)}
	for e := range s.E {
		out.Offs[e] = uint32(len(out.Tok))
		first := len(out.Tok)
		for i, id := range ids[:tokens*s.K] {
			if int(id) == e {
				t, slot := i/s.K, i%s.K
				out.Pos[i] = uint32(len(out.Tok))
				out.Tok = append(out.Tok, uint32(t))
				out.W = append(out.W, weights[t*(s.K+1)+slot])
			}
		}
		for b := first; b < len(out.Tok); b += bm {
			out.Blocks = append(out.Blocks, [4]uint32{uint32(e), uint32(b), uint32(min(bm, len(out.Tok)-b)), 0})
		}
	}
	out.Offs[s.E] = uint32(len(out.Tok))
	for len(out.Blocks) < s.MoEBlocks(tokens, bm) {
		out.Blocks = append(out.Blocks, [4]uint32{0xffffffff, 0, 0, 0})
	}
	return out
}

// BlockWords is the block map as moe_gate_up_mm and moe_down_mm read it: 4 uint32 a block.
func (m MoESorted) BlockWords() []uint32 {
	words := make([]uint32, 0, 4*len(m.Blocks))
	for _, b := range m.Blocks {
		words = append(words, b[:]...)
	}
	return words
}

// MoEIdentity is the map that runs the shared expert through the grouped GEMMs for tokens tokens
// in blocks of bm: one expert (0) whose pairs are the tokens in order, weight 1 (moe_combine
// applies its gate). It returns the pairs' tokens, their weights and the block map (BlockWords'
// layout).
func MoEIdentity(tokens, bm int) (tok []uint32, ones []float32, blocks []uint32) {
	for t := range tokens {
		tok, ones = append(tok, uint32(t)), append(ones, 1)
	}
	for t0 := 0; t0 < tokens; t0 += bm {
		blocks = append(blocks, 0, uint32(t0), uint32(min(bm, tokens-t0)), 0)
	}
	return tok, ones, blocks
}

// MoESortBuffers are moe_sort's buffers, by role.
type MoESortBuffers[B any] struct {
	IDs     B // 0: [tokens][K]
	Weights B // 1: [tokens][K+1]
	Offs    B // 2: [E+1] uint32
	Tok     B // 3: [tokens·K] uint32
	W       B // 4: [tokens·K] float32
	Blocks  B // 5: [MoEBlocks(tokens, bm)] {uint32 × 4}
	Pos     B // 6: [tokens·K] uint32
}

// MoESortThreads is moe_sort's threadgroup: a thread per expert (E <= 1024).
const MoESortThreads = 1024

// MoESortCall is moe_sort for tokens tokens in blocks of bm (BlockRows): one threadgroup.
func MoESortCall[B any](s MoEShape, tokens, bm int, b MoESortBuffers[B]) Call[B] {
	c := s.Constants()
	c[MoETokens], c[MoEBlockRowsConst] = tokens, bm
	return Call[B]{
		Kernel: "moe_sort", Constants: c, Buffers: map[int]B{0: b.IDs, 1: b.Weights, 2: b.Offs, 3: b.Tok, 4: b.W, 5: b.Blocks, 6: b.Pos},
		Threadgroups: grid(1), Group: grid(min(MoESortThreads, (s.E+31)/32*32)),
	}
}

// MoECombine is the Go reference of moe_combine: for each token, the sum from zero of its
// experts' rows of y (moe_down_mm's, already weighted) in ascending expert id, then the shared
// expert's row times its gate weights[t][K], added to res ([tokens][H]).
func MoECombine(s MoEShape, ids []uint32, weights []float32, sorted MoESorted, y, sh, res []float32, tokens int) {
	h := s.H
	for t := range tokens {
		slots := ascendingSlots(ids[t*s.K : (t+1)*s.K])
		for d := range h {
			var acc float32
			for _, k := range slots {
				acc += y[int(sorted.Pos[t*s.K+k])*h+d]
			}
			acc += weights[t*(s.K+1)+s.K] * sh[t*h+d]
			res[t*h+d] += acc
		}
	}
}

// MoECombineBuffers are moe_combine's buffers, by role (Gain and Out: moe_combine_norm's).
type MoECombineBuffers[B any] struct {
	IDs     B // 0: [tokens][K]
	Weights B // 1: [tokens][K+1] (the shared gate's sigmoid last)
	Pos     B // 2: [tokens·K] moe_sort's
	Y       B // 3: [tokens·K][H] moe_down_mm's
	Shared  B // 4: [tokens][H] the shared expert's output
	Res     B // 5: [tokens][H], updated in place
	Gain    B // 6: [H] bf16, the next layer's input norm
	Out     B // 7: [tokens][H] the normed residual
}

// MoECombineThreads is moe_combine's threadgroup: a thread per hidden dim.
const MoECombineThreads = 256

// MoECombineCall is moe_combine for tokens tokens.
func MoECombineCall[B any](s MoEShape, tokens int, b MoECombineBuffers[B]) Call[B] {
	return Call[B]{
		Kernel: "moe_combine", Constants: s.Constants(), Buffers: map[int]B{0: b.IDs, 1: b.Weights, 2: b.Pos, 3: b.Y, 4: b.Shared, 5: b.Res},
		Threadgroups: [3]int{groupsFor(s.H, MoECombineThreads), tokens, 1}, Group: grid(MoECombineThreads),
	}
}

// MoECombineNormCall is moe_combine_norm for tokens tokens: the combine, then the RMSNorm with
// eps and b.Gain into b.Out, a threadgroup of MoECombineThreads per token (add_rmsnorm's
// arithmetic at RMSNormThreads).
func MoECombineNormCall[B any](s MoEShape, tokens int, eps float32, b MoECombineBuffers[B]) Call[B] {
	return Call[B]{
		Kernel: "moe_combine_norm", Constants: s.NormConstants(eps),
		Buffers:      map[int]B{0: b.IDs, 1: b.Weights, 2: b.Pos, 3: b.Y, 4: b.Shared, 5: b.Res, 6: b.Gain, 7: b.Out},
		Threadgroups: [3]int{1, tokens, 1}, Group: grid(MoECombineThreads),
	}
}
