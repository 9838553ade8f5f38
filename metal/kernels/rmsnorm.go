package kernels

import (
	"github.com/lilyformac/lily/engine/f32"
	"github.com/lilyformac/lily/engine/quant"
)

// RMSNorm function constant indices (rmsnorm.metal).
const (
	RMSNormWidth = 0 // uint H
	RMSNormEps   = 1 // float EPS
)

// RMSNormThreads is the threadgroup size add_rmsnorm is meant to run with: one row per group.
const RMSNormThreads = 256

// AddRMSNorm is the Go reference of add_rmsnorm for one row: res = x + d, out = res ·
// rsqrt(mean(res²) + eps) · w, with w in bf16 bits: engine/f32's RMSNorm of the sum (float32 sums
// in order; the kernel sums in a tree, so results agree to rounding).
func AddRMSNorm(res, out, x, d []float32, w []uint16, eps float32) {
	gain := make([]float32, len(w))
	for i := range x {
		res[i] = x[i] + d[i]
		gain[i] = quant.BF16ToF32(w[i])
	}
	f32.RMSNorm(out, res, gain, eps)
}

// AddRMSNormBuffers are add_rmsnorm's buffers, by role.
type AddRMSNormBuffers[B any] struct {
	X, D B // 0, 1: [rows][h] float32, the residual and what is added to it
	W    B // 2: [h] bf16 gain
	Res  B // 3: [rows][h] x + d (may be X: in place)
	Out  B // 4: [rows][h] the normed residual
}

// AddRMSNormCall is add_rmsnorm over rows rows of h, one threadgroup of threads per row
// (RMSNormThreads in production).
func AddRMSNormCall[B any](h, rows int, eps float32, threads int, b AddRMSNormBuffers[B]) Call[B] {
	return Call[B]{
		Kernel: "add_rmsnorm", Constants: map[int]any{RMSNormWidth: h, RMSNormEps: eps},
		Buffers:      map[int]B{0: b.X, 1: b.D, 2: b.W, 3: b.Res, 4: b.Out},
		Threadgroups: grid(rows), Group: grid(threads),
	}
}
