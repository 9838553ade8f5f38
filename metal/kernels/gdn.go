package kernels

import (
	"fmt"
	"math"
	"slices"

	"github.com/lilyformac/lily/engine/f32"
)

// GDN function constant indices (gdn.metal).
const (
	GDNKeyHeads   = 0 // uint GDN_HK
	GDNValueHeads = 1 // uint GDN_HV
	GDNKeyDim     = 2 // uint GDN_DK
	GDNValueDim   = 3 // uint GDN_DV
	GDNEps        = 4 // float GDN_EPS
	GDNTokens     = 5 // uint GDN_T_FC: gdn_chunk's tokens
	GDNGroups     = 6 // bool GDN_GROUPS_FC: gdn_step's group form (GDNVerifyCall)
)

// GDNChunkCols is how many value columns a gdn_chunk simdgroup holds (four lanes each).
const GDNChunkCols = 8

// GDNSimdgroups is the production threadgroup of gdn_step: 32 simdgroups (1024 threads), four
// value columns each.
const GDNSimdgroups = 32

// GDNShape is a Gated DeltaNet layer's head layout: HK key heads of DK, HV value heads of DV
// (the model: 16×128 and 32×128).
type GDNShape struct{ HK, HV, DK, DV int }

// Validate reports whether gdn_step supports the shape.
func (s GDNShape) Validate() error {
	switch {
	case s.HK <= 0 || s.HV <= 0 || s.DV <= 0:
		return fmt.Errorf("gdn: shape %+v: heads and dims must be positive", s)
	case s.HV%s.HK != 0:
		return fmt.Errorf("gdn: %d value heads are not a multiple of %d key heads", s.HV, s.HK)
	case s.DK <= 0 || s.DK%32 != 0 || s.DK > 128:
		return fmt.Errorf("gdn: key dim %d: want 32, 64, 96 or 128", s.DK)
	}
	return nil
}

// Channels is the length of the conv output (q ‖ k ‖ v) gdn_step reads.
func (s GDNShape) Channels() int { return 2*s.HK*s.DK + s.HV*s.DV }

// StateLen is the number of floats of the recurrent state, [HV][DV][DK].
func (s GDNShape) StateLen() int { return s.HV * s.DV * s.DK }

// Constants are the function constants of gdn_step for the shape.
func (s GDNShape) Constants(eps float32) map[int]any {
	return map[int]any{GDNKeyHeads: s.HK, GDNValueHeads: s.HV, GDNKeyDim: s.DK, GDNValueDim: s.DV, GDNEps: eps}
}

// ThreadgroupMem is gdn_step's [[threadgroup(0)]] length in bytes: DV floats, rounded up to 16.
func (s GDNShape) ThreadgroupMem() int { return (4*s.DV + 15) &^ 15 }

// GDNParams are a layer's recurrence parameters.
type GDNParams struct {
	ALog, DtBias []float32 // [HV]
	NormW        []float32 // [DV], the gated norm's gain
	Eps          float32
}

// GDNStep is the Go reference of gdn_step: one token through every value head. qkv is the conv
// output (after SiLU: q ‖ k ‖ v), z, a and b the token's other projections; state ([HV][DV][DK])
// is updated in place and y ([HV*DV]) written. It is engine/cpu's gdn() recurrence with the
// same float32 operations in the same order, on the transposed state layout.
func GDNStep(s GDNShape, p GDNParams, state, y, qkv, z, a, b []float32) {
	hk, hv, dk, dv := s.HK, s.HV, s.DK, s.DV
	q, k, v := gdnKeys(s, qkv)
	read := make([]float32, dv)
	for head := range hv {
		kh := head / (hv / hk)
		qh := q[kh*dk : (kh+1)*dk]
		beta, decay := gdnGates(p, head, a, b)
		st := state[head*dv*dk : (head+1)*dv*dk] // st[j*dk+kk] is engine/cpu's st[kk*dv+j]
		gdnAdvance(st, k[kh*dk:(kh+1)*dk], v[head*dv:(head+1)*dv], beta, decay, read)
		o := y[head*dv : (head+1)*dv]
		clear(o)
		for kk := range dk {
			qv := qh[kk]
			for j := range o {
				o[j] += st[j*dk+kk] * qv
			}
		}
		f32.GatedNorm(o, z[head*dv:(head+1)*dv], p.NormW, p.Eps)
	}
}

// gdnKeys splits a copy of the conv output qkv into q and k, each key head L2-normalised (q also
// by 1/√DK), and v.
func gdnKeys(s GDNShape, qkv []float32) (q, k, v []float32) {
	hk, dk := s.HK, s.DK
	u := append([]float32(nil), qkv[:s.Channels()]...)
	q, k, v = u[:hk*dk], u[hk*dk:2*hk*dk], u[2*hk*dk:]
	qScale := f32.Rsqrt(float32(dk))
	for head := range hk {
		f32.L2Norm(q[head*dk:(head+1)*dk], qScale)
		f32.L2Norm(k[head*dk:(head+1)*dk], 1)
	}
	return q, k, v
}

// gdnGates are value head head's beta and decay from a token's a and b ([HV]).
func gdnGates(p GDNParams, head int, a, b []float32) (beta, decay float32) {
	beta = f32.Sigmoid(b[head])
	decay = float32(math.Exp(float64(-float32(math.Exp(float64(p.ALog[head]))) * f32.Softplus(a[head]+p.DtBias[head]))))
	return beta, decay
}

// gdnAdvance is a value head's state update by a token (decay, read, delta, write): st is the
// head's state [DV][DK], kvec its key head's normalised k, vh its v; read ([DV]) is scratch.
func gdnAdvance(st, kvec, vh []float32, beta, decay float32, read []float32) {
	dk := len(kvec)
	clear(read)
	for kk := range dk {
		kv := kvec[kk]
		for j := range read {
			st[j*dk+kk] *= decay
			read[j] += st[j*dk+kk] * kv
		}
	}
	delta := read
	for j := range delta {
		delta[j] = (vh[j] - read[j]) * beta
	}
	for kk := range dk {
		kv := kvec[kk]
		for j := range delta {
			st[j*dk+kk] += kv * delta[j]
		}
	}
}

// GDNStepRows is the Go reference of gdn_step over rows sequences (GDNStepRowsCall): each row is
// GDNStep on its own rows of qkv, z, a, b and y and its own state ([rows][HV][DV][DK]).
func GDNStepRows(s GDNShape, p GDNParams, state, y, qkv, z, a, b []float32, rows int) {
	c, hd, n := s.Channels(), s.HV*s.DV, s.StateLen()
	for r := range rows {
		GDNStep(s, p, state[r*n:(r+1)*n], y[r*hd:(r+1)*hd], qkv[r*c:(r+1)*c], z[r*hd:(r+1)*hd], a[r*s.HV:(r+1)*s.HV], b[r*s.HV:(r+1)*s.HV])
	}
}

// GDNStepBuffers are gdn_step's buffers, by role. For GDNStepRowsCall (and gdn_chunk) QKV, Z, A,
// Beta and Y hold a row per sequence (token); for GDNStepRowsCall State holds a state per
// sequence, [rows][HV][DV][DK].
type GDNStepBuffers[B any] struct {
	QKV    B // 0: [Channels] the conv output, q ‖ k ‖ v
	Z      B // 1: [HV*DV] the gate projection
	A      B // 2: [HV] the decay's projection
	Beta   B // 3: [HV] beta's projection (before the sigmoid)
	ALog   B // 4: [HV]
	DtBias B // 5: [HV]
	NormW  B // 6: [DV] the gated norm's gain
	State  B // 7: [HV][DV][DK], updated in place
	Y      B // 8: [HV*DV]
}

// GDNStepCall is gdn_step for one token over every value head (a threadgroup each), simdgroups
// simdgroups per threadgroup (GDNSimdgroups in production).
func GDNStepCall[B any](s GDNShape, eps float32, simdgroups int, b GDNStepBuffers[B]) Call[B] {
	return GDNStepRowsCall(s, eps, simdgroups, 1, b)
}

// GDNStepRowsCall is gdn_step for the rows sequences of a multi-row decode step, each with its
// own state: GDNStepCall's threadgroups once per row (the grid's second dimension), so rows 1 is
// GDNStepCall.
func GDNStepRowsCall[B any](s GDNShape, eps float32, simdgroups, rows int, b GDNStepBuffers[B]) Call[B] {
	return Call[B]{
		Kernel: "gdn_step", Constants: s.Constants(eps),
		Buffers:      map[int]B{0: b.QKV, 1: b.Z, 2: b.A, 3: b.Beta, 4: b.ALog, 5: b.DtBias, 6: b.NormW, 7: b.State, 8: b.Y},
		Threadgroups: [3]int{s.HV, recurrentRows(rows), 1}, Group: grid(32 * simdgroups),
		ThreadgroupMem: map[int]int{0: s.ThreadgroupMem()},
	}
}

// GDNChunk is the Go reference of gdn_chunk: the causal conv of x ([tokens][Channels], before
// the conv) from window ([3][Channels], not modified: conv1d_chunk shifts it) through taps, as
// Conv1DChunk, then GDNStep for each token's row of the conv's output, z ([tokens][HV*DV]), a
// and b ([tokens][HV]), writing y's rows ([tokens][HV*DV]) and leaving state after the last.
func GDNChunk(s GDNShape, p GDNParams, state, y, window, taps, x, z, a, b []float32, tokens int) {
	c, hd := s.Channels(), s.HV*s.DV
	u := make([]float32, len(x))
	Conv1DChunk(u, slices.Clone(window), taps, x, tokens)
	for t := range tokens {
		GDNStep(s, p, state, y[t*hd:(t+1)*hd], u[t*c:(t+1)*c], z[t*hd:(t+1)*hd], a[t*s.HV:(t+1)*s.HV], b[t*s.HV:(t+1)*s.HV])
	}
}

// GDNChunkBuffers are gdn_chunk's buffers (gdn_step's, a row per token, the conv's besides).
type GDNChunkBuffers[B any] struct {
	X      B // 0: [tokens][Channels] the in-projection before the conv
	Z      B // 1: [tokens][HV*DV]
	A      B // 2: [tokens][HV]
	Beta   B // 3: [tokens][HV] beta's projection (before the sigmoid)
	ALog   B // 4: [HV]
	DtBias B // 5: [HV]
	NormW  B // 6: [DV]
	State  B // 7: [HV][DV][DK], in place
	Y      B // 8: [tokens][HV*DV]
	Taps   B // 9: [Channels][4] float32
	Window B // 10: [3][Channels] float32, read only (conv1d_chunk shifts it afterwards)
}

// GDNChunkSimdgroups is gdn_chunk's simdgroups per threadgroup: GDNChunkCols value columns each
// (16 for the model's DV of 128).
func GDNChunkSimdgroups(s GDNShape) int { return (s.DV + GDNChunkCols - 1) / GDNChunkCols }

// GDNChunkCall is gdn_chunk: tokens tokens through every value head (a threadgroup of
// GDNChunkSimdgroups each) in one dispatch, the conv applied on the way (x, z, a, b and y
// float32; the chunk mode's are bfloat: BF16Acts). Its threadgroup memory: two halves of DV
// floats, and a block of GDNConvBlock tokens' conv output.
func GDNChunkCall[B any](s GDNShape, eps float32, tokens int, b GDNChunkBuffers[B]) Call[B] {
	nsg := GDNChunkSimdgroups(s)
	if nsg > 32 {
		panic(fmt.Sprintf("kernels: gdn_chunk with %d value columns (at most %d)", s.DV, 32*GDNChunkCols))
	}
	c := Call[B]{
		Kernel: "gdn_chunk", Constants: s.Constants(eps),
		Buffers:      map[int]B{0: b.X, 1: b.Z, 2: b.A, 3: b.Beta, 4: b.ALog, 5: b.DtBias, 6: b.NormW, 7: b.State, 8: b.Y, 9: b.Taps, 10: b.Window},
		Threadgroups: grid(s.HV), Group: grid(32 * nsg),
		ThreadgroupMem: map[int]int{0: 2 * s.ThreadgroupMem(), 1: 4 * GDNConvBlock * (2*s.DK + s.DV)},
	}
	c.Constants[GDNTokens] = tokens
	return c
}

// GDNConvBlock is the tokens gdn_chunk convolves into threadgroup memory at a time (GDN_CB).
const GDNConvBlock = 8
