package quant

import (
	"math/rand/v2"
	"sync"
	"testing"
	"time"
)

// The benchmark weights are 8 matrices of 16384×2048 at 4 bits, 144 MiB
// with scales and biases: well past the last-level cache, so every pass
// streams from memory as decode does.
const benchRows, benchCols, benchMats = 16384, 2048, 8

var bench struct {
	once     sync.Once
	mats     []*Matrix
	in       *Input
	dst      []float32
	bytes    int64 // packed words + scales + biases, all matrices
	src, cpy []byte
}

func benchSetup() {
	rng := rand.New(rand.NewPCG(11, 12))
	for range benchMats {
		m := randMatrix(rng, benchRows, benchCols, 4)
		bench.mats = append(bench.mats, m)
		bench.bytes += int64(len(m.Words)*4 + len(m.Scales)*2 + len(m.Biases)*2)
	}
	bench.in = NewInput(benchCols)
	bench.in.Set(randVec(rng, benchCols))
	bench.dst = make([]float32, benchRows)
	bench.src = make([]byte, bench.bytes)
	bench.cpy = make([]byte, bench.bytes)
	for i := range bench.src { // touch every page of both buffers before timing
		bench.src[i], bench.cpy[i] = byte(i), byte(i>>8)
	}
}

func q4Pass(in *Input) {
	for _, m := range bench.mats {
		MatVecInput(m, bench.dst, in)
	}
}

// copyJob copies src to dst with the worker pool and chunking MatVec uses
// (a "row" is a 1 MiB block; each chunk is one copy call).
type copyJob struct {
	sched
	src, dst []byte
}

const copyBlock = 1 << 20

func (j *copyJob) run(lo, hi int) {
	copy(j.dst[lo*copyBlock:min(hi*copyBlock, len(j.dst))], j.src[lo*copyBlock:])
}

func copyPass() {
	j := &copyJob{src: bench.src, dst: bench.cpy}
	parallel(j, &j.sched, (len(j.src)+copyBlock-1)/copyBlock, 1)
}

func gbps(bytes int64, d time.Duration) float64 { return float64(bytes) / d.Seconds() / 1e9 }

// BenchmarkMatVecQ4 reports weight bytes (packed words, scales, biases)
// read per second by the parallel 4-bit MatVec.
func BenchmarkMatVecQ4(b *testing.B) {
	bench.once.Do(benchSetup)
	b.SetBytes(bench.bytes)
	b.ResetTimer()
	for range b.N {
		q4Pass(bench.in)
	}
	b.ReportMetric(gbps(bench.bytes*int64(b.N), b.Elapsed()), "GB/s")
}

// BenchmarkMemcpy is the baseline: a parallel copy of a buffer the size of
// the weights, counting bytes read plus bytes written (STREAM's convention).
func BenchmarkMemcpy(b *testing.B) {
	bench.once.Do(benchSetup)
	b.SetBytes(2 * bench.bytes)
	b.ResetTimer()
	for range b.N {
		copyPass()
	}
	b.ReportMetric(gbps(2*bench.bytes*int64(b.N), b.Elapsed()), "GB/s")
}

// BenchmarkMatVecQ4VsCopy alternates the two passes in one run and compares
// the best of each; the acceptance bar is ratio >= 0.5.
func BenchmarkMatVecQ4VsCopy(b *testing.B) {
	bench.once.Do(benchSetup)
	vsCopy(b, bench.in)
}

// BenchmarkKernelsVsCopy is BenchmarkMatVecQ4VsCopy for each kernel this
// machine has.
func BenchmarkKernelsVsCopy(b *testing.B) {
	bench.once.Do(benchSetup)
	defer func(k kernel) { q4Kernel = k }(q4Kernel)
	for _, k := range kernels() {
		q4Kernel = k
		in := NewInput(benchCols)
		in.Set(bench.in.x)
		b.Run(kernelName(k), func(b *testing.B) { vsCopy(b, in) })
	}
}

func vsCopy(b *testing.B, in *Input) {
	best := func(f func(), prev time.Duration) time.Duration {
		t := time.Now()
		f()
		if d := time.Since(t); prev == 0 || d < prev {
			return d
		}
		return prev
	}
	var q4, cp time.Duration
	b.ResetTimer()
	for range max(b.N, 3) {
		q4 = best(func() { q4Pass(in) }, q4)
		cp = best(copyPass, cp)
	}
	q, c := gbps(bench.bytes, q4), gbps(2*bench.bytes, cp)
	b.ReportMetric(q, "q4_GB/s")
	b.ReportMetric(c, "copy_GB/s")
	b.ReportMetric(q/c, "ratio")
	b.Logf("4-bit matvec (%s) %.2f GB/s, copy %.2f GB/s (read+write), ratio %.3f (target >= 0.5), %d workers",
		kernelName(in.kern), q, c, q/c, poolSize)
}

// BenchmarkKernelQ4 is one core on a 512×2048 matrix that stays in L2:
// kernel compute speed without the memory system.
func BenchmarkKernelQ4(b *testing.B) {
	rng := rand.New(rand.NewPCG(13, 14))
	m := randMatrix(rng, 512, 2048, 4)
	x := randVec(rng, m.Cols)
	dst := make([]float32, m.Rows)
	defer func(k kernel) { q4Kernel = k }(q4Kernel)
	for _, k := range kernels() {
		q4Kernel = k
		in := NewInput(m.Cols)
		in.Set(x)
		b.Run(kernelName(k), func(b *testing.B) {
			b.SetBytes(int64(len(m.Words)*4 + len(m.Scales)*4))
			for range b.N {
				m.MulVecRange(dst, in, 0, m.Rows)
			}
		})
	}
}

// BenchmarkInputSet is the per-vector preparation cost (K = 2048).
func BenchmarkInputSet(b *testing.B) {
	x := randVec(rand.New(rand.NewPCG(15, 16)), 2048)
	defer func(k kernel) { q4Kernel = k }(q4Kernel)
	for _, k := range kernels() {
		q4Kernel = k
		in := NewInput(len(x))
		b.Run(kernelName(k), func(b *testing.B) {
			for range b.N {
				in.Set(x)
			}
		})
	}
}
