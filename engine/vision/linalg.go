package vision

import (
	"math"
	"runtime"
	"sync"
)

// dense is one linear layer's float32 weights: y = x·Wᵀ + b with W [out][in] row-major.
type dense struct {
	w, b    []float32
	out, in int
}

// apply computes y[i][o] = b[o] + Σ_k x[i][k]·W[o][k] for every row. Dot products accumulate
// in float32, one accumulator per output and k in increasing order, as a float32 GEMM does (the
// reference's BLAS blocks its sums differently: agreement is to float32 rounding, not bitwise).
// Rows are split into tiles spread over goroutines; each output element is computed by one
// goroutine in a fixed order, so the result does not depend on the number of cores.
func (l *dense) apply(x [][]float32) [][]float32 {
	const rowTile = 32 // 32 rows of x stay in L2 while W streams past them four rows at a time
	n := len(x)
	y := matrix(n, l.out)
	parallelRange((n+rowTile-1)/rowTile, func(lo, hi int) {
		for t := lo; t < hi; t++ {
			r0, r1 := t*rowTile, min((t+1)*rowTile, n)
			l.tile(x[r0:r1], y[r0:r1])
		}
	})
	return y
}

// tile fills ys for the rows xs: two rows by four outputs at a time, so that each loaded weight
// serves two rows and each loaded input four outputs.
func (l *dense) tile(xs, ys [][]float32) {
	K := l.in
	o := 0
	for ; o+4 <= l.out; o += 4 {
		w := l.w[o*K : (o+4)*K]
		r := 0
		for ; r+2 <= len(xs); r += 2 {
			a, b := dot2x4(xs[r][:K], xs[r+1][:K], w, K)
			for j := range 4 {
				ys[r][o+j] = a[j] + l.b[o+j]
				ys[r+1][o+j] = b[j] + l.b[o+j]
			}
		}
		for ; r < len(xs); r++ {
			for j := range 4 {
				ys[r][o+j] = dot(xs[r][:K], w[j*K:(j+1)*K]) + l.b[o+j]
			}
		}
	}
	for ; o < l.out; o++ {
		for r := range xs {
			ys[r][o] = dot(xs[r][:K], l.w[o*K:(o+1)*K]) + l.b[o]
		}
	}
}

// dot2x4 is the GEMM's register block: rows a and b against the four weight rows in w.
func dot2x4(a, b, w []float32, K int) (sa, sb [4]float32) {
	w0, w1, w2, w3 := w[:K], w[K:2*K], w[2*K:3*K], w[3*K:4*K]
	b = b[:len(a)]
	w0, w1, w2, w3 = w0[:len(a)], w1[:len(a)], w2[:len(a)], w3[:len(a)]
	var a0, a1, a2, a3, b0, b1, b2, b3 float32
	for k, x := range a {
		z := b[k]
		a0 += x * w0[k]
		a1 += x * w1[k]
		a2 += x * w2[k]
		a3 += x * w3[k]
		b0 += z * w0[k]
		b1 += z * w1[k]
		b2 += z * w2[k]
		b3 += z * w3[k]
	}
	return [4]float32{a0, a1, a2, a3}, [4]float32{b0, b1, b2, b3}
}

// dot is a float32 dot product summed in order (the same order as dot2x4's accumulators).
func dot(a, b []float32) float32 {
	b = b[:len(a)]
	var s float32
	for k, x := range a {
		s += x * b[k]
	}
	return s
}

// norm is a LayerNorm's gain and shift.
type norm struct{ w, b []float32 }

// apply is LayerNorm over each row (biased variance, as torch's): mean and variance are summed
// in float64, the normalised value is rounded to float32 before the gain and shift.
func (nm *norm) apply(x [][]float32, eps float32) [][]float32 {
	y := matrix(len(x), len(nm.w))
	parallelRange(len(x), func(lo, hi int) {
		for i := lo; i < hi; i++ {
			var sum, sq float64
			for _, v := range x[i] {
				sum += float64(v)
			}
			mean := sum / float64(len(x[i]))
			for _, v := range x[i] {
				d := float64(v) - mean
				sq += d * d
			}
			rstd := float32(1 / math.Sqrt(sq/float64(len(x[i]))+float64(eps)))
			m := float32(mean)
			for d, v := range x[i] {
				y[i][d] = float32((v-m)*rstd)*nm.w[d] + nm.b[d]
			}
		}
	})
	return y
}

// geluTanh is transformers' gelu_pytorch_tanh, the blocks' MLP activation.
func geluTanh(x float32) float32 {
	v := float64(x)
	return float32(0.5 * v * (1 + math.Tanh(math.Sqrt(2/math.Pi)*(v+0.044715*v*v*v))))
}

// geluErf is the exact GELU (nn.GELU's default), the merger's activation.
func geluErf(x float32) float32 {
	v := float64(x)
	return float32(0.5 * v * (1 + math.Erf(v/math.Sqrt2)))
}

// matrix is rows×cols zeros sharing one backing array.
func matrix(rows, cols int) [][]float32 {
	back := make([]float32, rows*cols)
	m := make([][]float32, rows)
	for i := range m {
		m[i] = back[i*cols : (i+1)*cols : (i+1)*cols]
	}
	return m
}

// parallelRange splits [0, n) into one contiguous range per worker. f sees whole ranges so a
// worker can allocate its scratch once.
func parallelRange(n int, f func(lo, hi int)) {
	workers := min(runtime.GOMAXPROCS(0), n)
	if workers <= 1 {
		if n > 0 {
			f(0, n)
		}
		return
	}
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func(lo, hi int) {
			defer wg.Done()
			f(lo, hi)
		}(w*n/workers, (w+1)*n/workers)
	}
	wg.Wait()
}
