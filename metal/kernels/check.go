package kernels

import (
	"math"
	"math/rand/v2"
)

// RelErr is the error measure of the kernel checks (tests and lily doctor --selftest):
// max|got-want| / max|want| (max|got-want| when want is all zero), and NaN when got holds a NaN
// (an unwritten or poisoned element).
func RelErr(got, want []float32) float64 {
	var diff, scale float64
	for i := range want {
		if math.IsNaN(float64(got[i])) {
			return math.NaN()
		}
		diff = max(diff, math.Abs(float64(got[i])-float64(want[i])))
		scale = max(scale, math.Abs(float64(want[i])))
	}
	if scale == 0 {
		return diff
	}
	return diff / scale
}

// RandFloats is n normally distributed values times scale, the kernel checks' random inputs.
func RandFloats(r *rand.Rand, n int, scale float32) []float32 {
	s := make([]float32, n)
	for i := range s {
		s[i] = float32(r.NormFloat64()) * scale
	}
	return s
}
