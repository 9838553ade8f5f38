package kernels

import (
	"fmt"
	"math"

	"github.com/lilyformac/lily/engine/quant"
)

// vit_attn.metal's function constant indices.
const (
	ViTHeadDim = 0 // uint VIT_HD: a multiple of 8 up to ViTMaxHeadDim (72 in production)
	ViTHeads   = 1 // uint VIT_HEADS
	ViTPatches = 2 // uint VIT_N
	ViTGridW   = 3 // uint VIT_GW: the grid's width in patches, even
	ViTDim     = 4 // uint VIT_D: vit_pos_embed's hidden size
	ViTSide    = 5 // uint VIT_SIDE: vit_pos_embed's table side
)

// vit_attention's geometry: a threadgroup of ViTAttnThreads (4 simdgroups) computes
// ViTAttnQueries queries of one head; head dims up to ViTMaxHeadDim fit its tiles.
const (
	ViTAttnQueries = 32
	ViTAttnThreads = 128
	ViTMaxHeadDim  = 96
)

// ViTMerge is the side of the merge blocks whose block-major order the kernels' patches follow
// (the tower's spatial merge, 2; the kernels take it as fixed).
const ViTMerge = 2

// ViTPatchAt is block-major patch p's (row, col) in a grid gw patches wide: the 2×2 merge
// blocks row-major, the block's four patches row-major inside it.
func ViTPatchAt(p, gw int) (r, c int) {
	blk, in := p/(ViTMerge*ViTMerge), p%(ViTMerge*ViTMerge)
	bw := gw / ViTMerge
	return blk/bw*ViTMerge + in/ViTMerge, blk%bw*ViTMerge + in%ViTMerge
}

// ViTInvFreq is the rotary's hd/4 inverse frequencies for head dim hd and base theta, in
// float32 as the tower's reference computes them: the exponent 2j/(hd/2) a float32 quotient,
// theta to that power rounded to float32, then a float32 reciprocal. vit_attention reads them
// from a buffer, so the kernel needs no pow.
func ViTInvFreq(hd int, theta float64) []float32 {
	inv := make([]float32, hd/4)
	for j := range inv {
		e := float32(2*j) / float32(hd/2)
		inv[j] = 1 / float32(math.Pow(theta, float64(e)))
	}
	return inv
}

// vitRotate is x (one head's q or k of patch p) rotated: x·cos θ + rotate_half(x)·sin θ, θ_j =
// row·inv_j for j < hd/4 and col·inv_(j−hd/4) below hd/2, repeated for the second half; each
// angle a float32 product, its cos and sin rounded to float32.
func vitRotate(x []float32, p, gw int, inv []float32) []float32 {
	hd := len(x)
	half, quarter := hd/2, hd/4
	r, c := ViTPatchAt(p, gw)
	out := make([]float32, hd)
	for j := range half {
		pos := r
		if j >= quarter {
			pos = c
		}
		a := float32(pos) * inv[j%quarter]
		cs, sn := float32(math.Cos(float64(a))), float32(math.Sin(float64(a)))
		out[j] = float32(x[j]*cs) - float32(x[j+half]*sn)
		out[j+half] = float32(x[j+half]*cs) + float32(x[j]*sn)
	}
	return out
}

// ViTAttention is the Go reference of vit_attention: qkv holds n rows of q | k | v (each heads·hd,
// head-major) of an image gw patches wide in block-major order; q and k are rotated (vitRotate),
// and every patch attends to every patch with scale 1/√hd. Per query: its scores, their
// maximum, e_j = exp(s_j − max) in float32, l = Σ e_j in float64, out = Σ_j e_j·v_j (float32, in
// key order) / l. It returns n rows of heads·hd values.
func ViTAttention(qkv []float32, n, heads, hd, gw int, inv []float32) []float32 {
	D := heads * hd
	scale := float32(1 / math.Sqrt(float64(hd)))
	out := make([]float32, n*D)
	for h := range heads {
		k := make([][]float32, n)
		for j := range k {
			k[j] = vitRotate(qkv[j*3*D+D+h*hd:j*3*D+D+(h+1)*hd], j, gw, inv)
		}
		for i := range n {
			q := vitRotate(qkv[i*3*D+h*hd:i*3*D+(h+1)*hd], i, gw, inv)
			vitAttendRow(out[i*D+h*hd:i*D+(h+1)*hd], q, k, qkv, 2*D+h*hd, 3*D, scale)
		}
	}
	return out
}

// vitAttendRow writes one query's attention over keys k into dst; the values are v's row j at
// qkv[j·stride+col : …+len(dst)].
func vitAttendRow(dst, q []float32, k [][]float32, qkv []float32, col, stride int, scale float32) {
	s := make([]float32, len(k))
	m := float32(math.Inf(-1))
	for j, kj := range k {
		var d float32
		for i := range q {
			d += q[i] * kj[i]
		}
		s[j] = d * scale
		m = max(m, s[j])
	}
	var l float64
	acc := make([]float32, len(dst))
	for j := range s {
		e := float32(math.Exp(float64(s[j] - m)))
		l += float64(e)
		v := qkv[j*stride+col : j*stride+col+len(dst)]
		for i := range acc {
			acc[i] += e * v[i]
		}
	}
	for i := range dst {
		dst[i] = float32(float64(acc[i]) / l)
	}
}

// ViTAttentionBuffers are vit_attention's buffers, by role.
type ViTAttentionBuffers[B any] struct {
	QKV     B // 0: [n][3·heads·hd] float32: q | k | v, unrotated
	InvFreq B // 1: [hd/4] float32: ViTInvFreq
	Out     B // 2: [n][heads·hd] float32
}

// ViTAttentionCall is vit_attention over one image of n patches, gw wide: a threadgroup of
// ViTAttnThreads per head and block of ViTAttnQueries queries. It panics on a head dim the
// kernel cannot run or an odd grid width.
func ViTAttentionCall[B any](n, heads, hd, gw int, b ViTAttentionBuffers[B]) Call[B] {
	if hd%8 != 0 || hd <= 0 || hd > ViTMaxHeadDim || gw%ViTMerge != 0 || gw <= 0 || n%gw != 0 {
		panic(fmt.Sprintf("kernels: vit_attention cannot run head dim %d over %d patches %d wide", hd, n, gw))
	}
	return Call[B]{
		Kernel:       "vit_attention",
		Constants:    map[int]any{ViTHeadDim: hd, ViTHeads: heads, ViTPatches: n, ViTGridW: gw},
		Buffers:      map[int]B{0: b.QKV, 1: b.InvFreq, 2: b.Out},
		Threadgroups: [3]int{groupsFor(n, ViTAttnQueries), heads, 1}, Group: grid(ViTAttnThreads),
	}
}

// ViTPosAxis is vit_pos_embed's table for one axis of n patches over a table side entries long:
// per position i, {tap0, tap1, bits(w0), bits(w1)}, bilinear with aligned corners in float32 as
// transformers computes it: src = i·(side−1)/(n−1) (one float32 division), each tap's weight
// 1 − |src − ⌊src⌋ − offset| clamped at 0, the upper tap clamped to the table (its weight is then 0).
func ViTPosAxis(n, side int) []uint32 {
	out := make([]uint32, 4*n)
	for i := range n {
		src := float32(i*(side-1)) / float32(max(n-1, 1))
		fl := float32(math.Floor(float64(src)))
		for off := range 2 {
			out[4*i+off] = uint32(min(int(fl)+off, side-1))
			w := max(1-float32(math.Abs(float64(src-fl-float32(off)))), 0)
			out[4*i+2+off] = math.Float32bits(w)
		}
	}
	return out
}

// ViTPosEmbed is the Go reference of vit_pos_embed: h (gh·gw rows of dim, block-major) gains,
// per patch at (r, c), Σ_(a,b) table[row a of r, col b of c]·(w_r[a]·w_c[b]) over the four taps
// in the order (0,0), (0,1), (1,0), (1,1), each product rounded to float32; table is
// [side·side][dim] bfloat bits.
func ViTPosEmbed(h []float32, table []uint16, side, dim, gh, gw int) {
	rows, cols := ViTPosAxis(gh, side), ViTPosAxis(gw, side)
	for p := range gh * gw {
		r, c := ViTPatchAt(p, gw)
		var at [4]int
		var w [4]float32
		for a := range 2 {
			for b := range 2 {
				at[2*a+b] = (int(rows[4*r+a])*side + int(cols[4*c+b])) * dim
				w[2*a+b] = math.Float32frombits(rows[4*r+2+a]) * math.Float32frombits(cols[4*c+2+b])
			}
		}
		for d := range dim {
			s := float32(quant.BF16ToF32(table[at[0]+d]) * w[0])
			s += float32(quant.BF16ToF32(table[at[1]+d]) * w[1])
			s += float32(quant.BF16ToF32(table[at[2]+d]) * w[2])
			s += float32(quant.BF16ToF32(table[at[3]+d]) * w[3])
			h[p*dim+d] += s
		}
	}
}

// ViTPosEmbedBuffers are vit_pos_embed's buffers, by role.
type ViTPosEmbedBuffers[B any] struct {
	H    B // 0: [gh·gw][dim] float32, updated in place
	Tab  B // 1: [side·side][dim] bfloat: the learned table
	Rows B // 2: ViTPosAxis(gh, side)
	Cols B // 3: ViTPosAxis(gw, side)
}

// ViTPosEmbedCall is vit_pos_embed over a gh×gw grid: a threadgroup of threads per patch.
func ViTPosEmbedCall[B any](side, dim, gh, gw, threads int, b ViTPosEmbedBuffers[B]) Call[B] {
	if gw%ViTMerge != 0 || gh%ViTMerge != 0 || gw <= 0 || gh <= 0 {
		panic(fmt.Sprintf("kernels: vit_pos_embed cannot run a %d×%d grid", gh, gw))
	}
	return Call[B]{
		Kernel:       "vit_pos_embed",
		Constants:    map[int]any{ViTGridW: gw, ViTDim: dim, ViTSide: side},
		Buffers:      map[int]B{0: b.H, 1: b.Tab, 2: b.Rows, 3: b.Cols},
		Threadgroups: grid(gh * gw), Group: grid(threads),
	}
}
