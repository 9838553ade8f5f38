package kernels

import (
	"math"

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
// rsqrt(mean(res²) + eps) · w, with w in bf16 bits. It follows engine/cpu's rmsNorm (float32
// sums in order; the kernel sums in a tree, so results agree to rounding).
func AddRMSNorm(res, out, x, d []float32, w []uint16, eps float32) {
	var ss float32
	for i := range x {
		res[i] = x[i] + d[i]
		ss += res[i] * res[i]
	}
	r := float32(1 / math.Sqrt(float64(ss/float32(len(x))+eps)))
	for i, h := range res {
		out[i] = h * r * quant.BF16ToF32(w[i])
	}
}
