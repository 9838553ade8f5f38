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

// AbsErr is max|got-want|, and NaN when got holds a NaN.
func AbsErr(got, want []float32) float64 {
	var d float64
	for i := range want {
		if math.IsNaN(float64(got[i])) {
			return math.NaN()
		}
		d = max(d, math.Abs(float64(got[i])-float64(want[i])))
	}
	return d
}

// RandFloats is n normally distributed values times scale, the kernel checks' random inputs.
func RandFloats(r *rand.Rand, n int, scale float32) []float32 {
	s := make([]float32, n)
	for i := range s {
		s[i] = float32(r.NormFloat64()) * scale
	}
	return s
}

// LogitGen makes the logits of a selection check (argmax, the sampler).
type LogitGen struct {
	Name string
	F    func(r *rand.Rand, x []float32)
}

// LogitGens are the selection checks' kinds of logits.
var LogitGens = []LogitGen{
	{"normal3", func(r *rand.Rand, x []float32) {
		for i := range x {
			x[i] = float32(r.NormFloat64() * 3)
		}
	}},
	{"ties", func(r *rand.Rand, x []float32) { // many equal logits, ±0 and -inf
		for i := range x {
			x[i] = float32(math.Round(r.NormFloat64()*4)) / 4
			switch r.IntN(20) {
			case 0:
				x[i] = float32(math.Inf(-1))
			case 1:
				x[i] = float32(math.Copysign(0, -1))
			}
		}
	}},
	{"model", ModelLogits},
	{"wide", func(r *rand.Rand, x []float32) { // probabilities that underflow to 0
		for i := range x {
			x[i] = float32(r.NormFloat64() * 40)
		}
	}},
}

// ModelLogits are logits with a bulk near 0 and a few strong candidates, as a model produces.
func ModelLogits(r *rand.Rand, x []float32) {
	for i := range x {
		x[i] = float32(r.NormFloat64() * 2)
	}
	for range 6 {
		x[r.IntN(len(x))] = float32(15 + r.NormFloat64()*3)
	}
}
