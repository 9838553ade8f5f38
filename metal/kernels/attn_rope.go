package kernels

import (
	"fmt"
	"math"

	"github.com/lilyformac/lily/engine/f32"
	"github.com/lilyformac/lily/engine/quant"
)

// attn_qk_rope_kv function constant indices (attn_rope.metal). attn_decode.metal uses the same
// indices for the shape constants it shares.
const (
	AttnHeads     = 0 // uint ATTN_NQ
	AttnKVHeads   = 1 // uint ATTN_NKV
	AttnHeadDim   = 2 // uint ATTN_HD
	AttnRotaryDim = 3 // uint ATTN_ROT
	AttnMaxCtx    = 4 // uint ATTN_MAX_CTX
	AttnEps       = 5 // float ATTN_EPS
)

// AttnRopeThreads is attn_qk_rope_kv's production threadgroup size (one thread per dim of a
// 256-dim head); any size up to 1024 works.
const AttnRopeThreads = 256

// AttnShape is a full-attention layer's head layout and KV-cache capacity (the model: 16 query
// heads, 2 kv heads, head_dim 256, rotary 64).
type AttnShape struct {
	Heads, KVHeads, HeadDim, RotaryDim int
	MaxCtx                             int // positions per kv head in the cache
}

// Validate reports whether attn_qk_rope_kv and the decode kernels support the shape.
func (s AttnShape) Validate() error {
	switch {
	case s.Heads <= 0 || s.KVHeads <= 0 || s.Heads%s.KVHeads != 0:
		return fmt.Errorf("attn: %d query heads are not a positive multiple of %d kv heads", s.Heads, s.KVHeads)
	case s.Heads/s.KVHeads > 32:
		return fmt.Errorf("attn: %d query heads per kv head; at most 32", s.Heads/s.KVHeads)
	case s.HeadDim <= 0 || s.HeadDim%32 != 0 || s.HeadDim > 256:
		return fmt.Errorf("attn: head dim %d: want a multiple of 32, at most 256", s.HeadDim)
	case s.RotaryDim < 0 || s.RotaryDim%2 != 0 || s.RotaryDim > s.HeadDim:
		return fmt.Errorf("attn: rotary dim %d: want even and at most the head dim %d", s.RotaryDim, s.HeadDim)
	case s.MaxCtx <= 0:
		return fmt.Errorf("attn: cache of %d positions", s.MaxCtx)
	}
	return nil
}

// Constants returns the function constants attn_qk_rope_kv (and, with AttnDecodeConstants,
// the decode kernels) are specialised with.
func (s AttnShape) Constants(eps float32) map[int]any {
	return map[int]any{AttnHeads: s.Heads, AttnKVHeads: s.KVHeads, AttnHeadDim: s.HeadDim, AttnRotaryDim: s.RotaryDim, AttnMaxCtx: s.MaxCtx, AttnEps: eps}
}

// CacheLen is the number of bf16 values of one layer's K (or V) cache, [KVHeads][MaxCtx][HeadDim].
func (s AttnShape) CacheLen() int { return s.KVHeads * s.MaxCtx * s.HeadDim }

// RopeInvFreq is the RoPE inverse-frequency table attn_qk_rope_kv reads (buffer 5): rot/2 values
// computed as engine/cpu computes them (float32 exponent, float64 pow, float32 reciprocal).
func RopeInvFreq(rot int, theta float64) []float32 {
	var f []float32
	for i := 0; i < rot; i += 2 {
		e := float32(i) / float32(rot)
		f = append(f, 1/float32(math.Pow(theta, float64(e))))
	}
	return f
}

// AttnRopeParams are a layer's norm gains and the RoPE table.
type AttnRopeParams struct {
	QNorm, KNorm []float32 // [HeadDim]
	InvFreq      []float32 // RopeInvFreq(RotaryDim, theta)
	Eps          float32
}

// AttnQKRopeKV is the Go reference of attn_qk_rope_kv for the token at pos: engine/cpu's q and k
// RMSNorm and RoPE with the same float32 operations. qg is the q projection ([Heads][2·HeadDim]:
// query ‖ gate per head), k and v the kv projections; it returns the rotated queries
// ([Heads·HeadDim]) and writes K (normalised, rotated) and V into the bf16 caches at pos (when
// pos < MaxCtx).
func AttnQKRopeKV(s AttnShape, p AttnRopeParams, pos int, qg, k, v []float32, kCache, vCache []uint16) []float32 {
	hd := s.HeadDim
	q := make([]float32, s.Heads*hd)
	for h := range s.Heads {
		qh := q[h*hd : (h+1)*hd]
		copy(qh, qg[h*2*hd:h*2*hd+hd])
		f32.RMSNorm(qh, qh, p.QNorm, p.Eps)
		ropeRotate(qh, p.InvFreq, pos)
	}
	kh := make([]float32, hd)
	for j := range s.KVHeads {
		copy(kh, k[j*hd:(j+1)*hd])
		f32.RMSNorm(kh, kh, p.KNorm, p.Eps)
		ropeRotate(kh, p.InvFreq, pos)
		if pos >= s.MaxCtx {
			continue // as the kernel: no cache write past the end
		}
		row := (j*s.MaxCtx + pos) * hd
		for d := range hd {
			kCache[row+d] = quant.F32ToBF16(kh[d])
			vCache[row+d] = quant.F32ToBF16(v[j*hd+d])
		}
	}
	return q
}

// ropeRotate is engine/cpu's rope with the inverse-frequency table passed in.

func ropeRotate(x, invFreq []float32, pos int) {
	half := len(invFreq)
	for i, f := range invFreq {
		theta := float64(float32(pos) * f)
		cos, sin := float32(math.Cos(theta)), float32(math.Sin(theta))
		a, b := x[i], x[i+half]
		x[i] = a*cos - b*sin
		x[i+half] = b*cos + a*sin
	}
}
