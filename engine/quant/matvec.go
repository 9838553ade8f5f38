package quant

import (
	"fmt"
	"runtime"
	"sync"
)

// Input is a vector prepared once for products with many rows: its
// per-group sums (for the bias term) and the layouts the kernels read.
type Input struct {
	cols int
	x    []float32 // natural order (8-bit and pure-Go kernels)
	// xp is x for the 4-bit SIMD kernel: each block of 16 elements (8 packed
	// bytes) is stored as [x0 x2 .. x14 | x1/16 x3/16 .. x15/16], matching
	// low nibbles and high nibbles masked in place (16*q) without a shift.
	xp   []float32
	gsum []float32 // Σx per group, zero-padded to a multiple of 8 groups
}

// NewInput returns an Input for vectors of length cols (a multiple of GroupSize).
func NewInput(cols int) *Input {
	if cols <= 0 || cols%GroupSize != 0 {
		panic(fmt.Sprintf("quant: NewInput(%d): want a positive multiple of %d", cols, GroupSize))
	}
	g := cols / GroupSize
	return &Input{
		cols: cols,
		x:    make([]float32, cols),
		xp:   make([]float32, cols),
		gsum: make([]float32, (g+7)&^7),
	}
}

// Cols returns the vector length.
func (in *Input) Cols() int { return in.cols }

// Set prepares in from x (len Cols). It does not allocate.
func (in *Input) Set(x []float32) {
	if len(x) != in.cols {
		panic(fmt.Sprintf("quant: Input.Set: len(x) = %d, want %d", len(x), in.cols))
	}
	copy(in.x, x)
	for b := 0; b < len(x); b += 16 {
		src, dst := x[b:b+16], in.xp[b:b+16]
		for j := range 8 {
			dst[j], dst[8+j] = src[2*j], src[2*j+1]*(1.0/16)
		}
	}
	for g := range in.cols / GroupSize {
		var s float32
		for _, v := range x[g*GroupSize : (g+1)*GroupSize] {
			s += v
		}
		in.gsum[g] = s
	}
}

// DotRow returns row r of m dotted with the prepared input.
func (m *Matrix) DotRow(r int, in *Input) float32 {
	var d [1]float32
	m.mulRows(d[:], in, r, r+1)
	return d[0]
}

// MulVecRange sets dst[r] = row r · x for r in [r0, r1), serially. dst is
// indexed by absolute row (len(dst) >= Rows), so disjoint ranges can fill
// one output in parallel.
func (m *Matrix) MulVecRange(dst []float32, in *Input, r0, r1 int) {
	m.check(in)
	m.mulRows(dst[r0:r1], in, r0, r1)
}

func (m *Matrix) check(in *Input) {
	if in.cols != m.Cols {
		panic(fmt.Sprintf("quant: input has %d cols, matrix %d", in.cols, m.Cols))
	}
	if m.Bits != 4 && m.Bits != 8 {
		panic(fmt.Sprintf("quant: bits = %d, want 4 or 8", m.Bits))
	}
}

// mulRows sets dst[i] = row r0+i · x. Slicing before taking pointers keeps
// the assembly inside the slices' bounds.
func (m *Matrix) mulRows(dst []float32, in *Input, r0, r1 int) {
	n := r1 - r0
	if n <= 0 {
		return
	}
	G := m.groups()
	wpr := m.wordsPerRow()
	dst = dst[:n]
	words := m.Words[r0*wpr : r1*wpr]
	scales, biases := m.Scales[r0*G:r1*G], m.Biases[r0*G:r1*G]
	if useAsm {
		if m.Bits == 4 {
			q4MulAsm(&dst[0], &words[0], &scales[0], &biases[0], &in.xp[0], &in.gsum[0], n, G)
		} else {
			q8MulAsm(&dst[0], &words[0], &scales[0], &biases[0], &in.x[0], &in.gsum[0], n, G)
		}
		// The assembly covers the bias term for whole blocks of 8 groups.
		if g8 := G &^ 7; g8 != G {
			for i := range dst {
				dst[i] += biasDot(biases[i*G+g8:(i+1)*G], in.gsum[g8:G])
			}
		}
		return
	}
	for i := range dst {
		s, b := scales[i*G:(i+1)*G], biases[i*G:(i+1)*G]
		if m.Bits == 4 {
			dst[i] = dotQ4(words[i*wpr:(i+1)*wpr], s, in.x) + biasDot(b, in.gsum[:G])
		} else {
			dst[i] = dotQ8(words[i*wpr:(i+1)*wpr], s, in.x) + biasDot(b, in.gsum[:G])
		}
	}
}

func biasDot(b []uint16, gsum []float32) float32 {
	var s float32
	for g, u := range b {
		s += BF16ToF32(u) * gsum[g]
	}
	return s
}

// dotQ4 is the portable kernel: Σ_g s_g Σ_k q_k x_k (bias term excluded).
func dotQ4(words []uint32, scales []uint16, x []float32) float32 {
	var sum float32
	for g, su := range scales {
		ws, xs := words[g*8:g*8+8], x[g*64:g*64+64]
		var a, b float32 // two chains for ILP
		for i, w := range ws {
			x := xs[i*8 : i*8+8]
			a += float32(w&15)*x[0] + float32(w>>8&15)*x[2] + float32(w>>16&15)*x[4] + float32(w>>24&15)*x[6]
			b += float32(w>>4&15)*x[1] + float32(w>>12&15)*x[3] + float32(w>>20&15)*x[5] + float32(w>>28)*x[7]
		}
		sum += BF16ToF32(su) * (a + b)
	}
	return sum
}

func dotQ8(words []uint32, scales []uint16, x []float32) float32 {
	var sum float32
	for g, su := range scales {
		ws, xs := words[g*16:g*16+16], x[g*64:g*64+64]
		var a, b float32
		for i, w := range ws {
			x := xs[i*4 : i*4+4]
			a += float32(w&255)*x[0] + float32(w>>16&255)*x[2]
			b += float32(w>>8&255)*x[1] + float32(w>>24)*x[3]
		}
		sum += BF16ToF32(su) * (a + b)
	}
	return sum
}

// MatVec sets dst[r] = row r · x for all rows, in parallel for large matrices.
func MatVec(m *Matrix, dst []float32, x []float32) {
	p, ok := inputPools.Load(len(x))
	if !ok {
		n := len(x)
		p, _ = inputPools.LoadOrStore(n, &sync.Pool{New: func() any { return NewInput(n) }})
	}
	in := p.(*sync.Pool).Get().(*Input)
	in.Set(x)
	MatVecInput(m, dst, in)
	p.(*sync.Pool).Put(in)
}

// inputPools maps a length to a *sync.Pool of Inputs, so MatVec does not allocate.
var inputPools sync.Map

// MatVecInput is MatVec with a prepared input.
func MatVecInput(m *Matrix, dst []float32, in *Input) {
	m.check(in)
	if m.Rows == 0 {
		return
	}
	_ = dst[m.Rows-1] // bounds check up front, not in a worker
	j := jobPool.Get().(*job)
	j.m, j.in, j.dst = m, in, dst
	parallel(j, &j.wg, m.Rows, m.minRows())
	*j = job{}
	jobPool.Put(j)
}

// MatMul sets dst[t][r] = row r · xs[t] (prefill). Rows are processed in
// small tiles against every input, so packed weights come from memory once
// and from cache for the other inputs.
func MatMul(m *Matrix, dst [][]float32, xs []*Input) {
	if len(dst) != len(xs) {
		panic(fmt.Sprintf("quant: MatMul: %d outputs for %d inputs", len(dst), len(xs)))
	}
	if len(xs) == 0 || m.Rows == 0 {
		return
	}
	for t, in := range xs {
		m.check(in)
		_ = dst[t][m.Rows-1]
	}
	j := jobPool.Get().(*job)
	j.m, j.xs, j.dsts = m, xs, dst
	parallel(j, &j.wg, m.Rows, m.minRows())
	*j = job{}
	jobPool.Put(j)
}

// minRows is the fewest rows worth handing to another worker (~64 KiB of
// weights, tens of microseconds), which keeps small matrices serial.
func (m *Matrix) minRows() int {
	return max(64<<10/(m.Cols*m.Bits/8), 4)
}

type job struct {
	wg   sync.WaitGroup
	m    *Matrix
	in   *Input
	dst  []float32
	xs   []*Input
	dsts [][]float32
}

var jobPool = sync.Pool{New: func() any { return new(job) }}

func (j *job) run(lo, hi int) {
	if j.xs == nil {
		j.m.mulRows(j.dst[lo:hi], j.in, lo, hi)
		return
	}
	// Tiles of ~32 KiB of packed weights stay in L1/L2 across the inputs.
	tile := max(32<<10/(j.m.Cols*j.m.Bits/8)&^3, 4)
	for r := lo; r < hi; r += tile {
		e := min(r+tile, hi)
		for t, in := range j.xs {
			j.m.mulRows(j.dsts[t][r:e], in, r, e)
		}
	}
}

// ranger runs rows [lo, hi) of a job.
type ranger interface{ run(lo, hi int) }

type task struct {
	f      ranger
	lo, hi int
	wg     *sync.WaitGroup
}

// The worker pool is persistent: decode issues hundreds of products per
// token, so a product costs a channel send per helper, not a goroutine.
var (
	poolOnce  sync.Once
	poolTasks chan task
	poolSize  int
)

func startPool() {
	poolSize = runtime.GOMAXPROCS(0)
	poolTasks = make(chan task, poolSize)
	for range poolSize - 1 {
		go func() {
			for t := range poolTasks {
				t.f.run(t.lo, t.hi)
				t.wg.Done()
			}
		}()
	}
}

// parallel runs f over [0, n) split into contiguous chunks (multiples of 4
// rows, the SIMD kernels' row block) of at least minChunk rows, one per
// worker; the caller runs the first chunk itself.
func parallel(f ranger, wg *sync.WaitGroup, n, minChunk int) {
	poolOnce.Do(startPool)
	w := min(poolSize, n/max(minChunk, 1))
	if w <= 1 {
		f.run(0, n)
		return
	}
	chunk := ((n+w-1)/w + 3) &^ 3
	for lo := chunk; lo < n; lo += chunk {
		wg.Add(1)
		poolTasks <- task{f, lo, min(lo+chunk, n), wg}
	}
	f.run(0, min(chunk, n))
	wg.Wait()
}
