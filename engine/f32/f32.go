// Package f32 holds the float32 helpers the CPU backend and the Metal kernels' Go references
// share — RMS, gated and L2 norms, an in-order dot product, rsqrt, sigmoid, SiLU and softplus —
// written once so that both round the same way where they use them.
package f32

import "math"

// RMSNorm sets dst = x · rsqrt(mean(x²) + eps) · w (w is the stored gain; MLX keeps 1+w).
func RMSNorm(dst, x, w []float32, eps float32) {
	var ss float32
	for _, v := range x {
		ss += v * v
	}
	r := Rsqrt(ss/float32(len(x)) + eps)
	for i, v := range x {
		dst[i] = v * r * w[i]
	}
}

// GatedNorm sets o = w ⊙ (o · rsqrt(mean(o²) + eps)) ⊙ silu(z), the GDN output norm (plain gain).
func GatedNorm(o, z, w []float32, eps float32) {
	var ss float32
	for _, v := range o {
		ss += v * v
	}
	r := Rsqrt(ss/float32(len(o)) + eps)
	for i, v := range o {
		o[i] = w[i] * (v * r) * Silu(z[i])
	}
}

// L2Norm scales x to unit length (eps inside the sum, as HF/fla) times scale.
func L2Norm(x []float32, scale float32) {
	var ss float32
	for _, v := range x {
		ss += v * v
	}
	r := Rsqrt(ss+1e-6) * scale
	for i := range x {
		x[i] *= r
	}
}

// Dot is Σ a[i]·b[i] summed in order.
func Dot(a, b []float32) float32 {
	var s float32
	for i, v := range a {
		s += v * b[i]
	}
	return s
}

// Rsqrt is 1/√x rounded to float32.
func Rsqrt(x float32) float32 { return float32(1 / math.Sqrt(float64(x))) }

// Sigmoid is 1/(1+e^−x) rounded to float32.
func Sigmoid(x float32) float32 { return float32(1 / (1 + math.Exp(-float64(x)))) }

// Silu is x·σ(x).
func Silu(x float32) float32 { return x * Sigmoid(x) }

// Softplus is torch's: log1p(exp(x)), linear above 20.
func Softplus(x float32) float32 {
	if x > 20 {
		return x
	}
	return float32(math.Log1p(math.Exp(float64(x))))
}
