package quant

import (
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
)

// DotRow returns row r of m dotted with the prepared input.
func (m *Matrix) DotRow(r int, in *Input) float32 {
	m.check(in)
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
	G, wpr := m.groups(), m.wordsPerRow()
	dst = dst[:n]
	words := m.Words[r0*wpr : r1*wpr]
	scales, biases := m.Scales[r0*G:r1*G], m.Biases[r0*G:r1*G]
	if in.kern == kernGo {
		for i := range dst {
			w, s := words[i*wpr:(i+1)*wpr], scales[i*G:(i+1)*G]
			if m.Bits == 4 {
				dst[i] = dotQ4(w, s, in.x)
			} else {
				dst[i] = dotQ8(w, s, in.x)
			}
			dst[i] += biasDot(biases[i*G:(i+1)*G], in.gsum[:G])
		}
		return
	}
	switch {
	case m.Bits == 8:
		q8MulAVX2(&dst[0], &words[0], &scales[0], &biases[0], &in.x[0], &in.gsum[0], n, G)
	case in.kern == kernVNNI:
		q4MulVNNI(&dst[0], &words[0], &scales[0], &biases[0], &in.xq[0], &in.gsum[0], n, G)
	default:
		q4MulAVX2(&dst[0], &words[0], &scales[0], &biases[0], &in.xp[0], &in.gsum[0], n, G)
	}
	// The assembly adds the bias term for whole blocks of 8 groups.
	if g8 := G &^ 7; g8 != G {
		for i := range dst {
			dst[i] += biasDot(biases[i*G+g8:(i+1)*G], in.gsum[g8:G])
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

// Table lookups beat integer-to-float conversions in the portable kernels.
var (
	nibbleF = func() (t [256][2]float32) { // byte -> (low nibble, high nibble)
		for b := range t {
			t[b] = [2]float32{float32(b & 15), float32(b >> 4)}
		}
		return
	}()
	byteF = func() (t [256]float32) {
		for b := range t {
			t[b] = float32(b)
		}
		return
	}()
)

// dotQ4 is the portable kernel: Σ_g s_g Σ_k q_k x_k (bias term excluded).
func dotQ4(words []uint32, scales []uint16, x []float32) float32 {
	var sum float32
	for g, su := range scales {
		ws, xs := words[g*8:g*8+8], x[g*64:g*64+64]
		var a, b, c, d float32 // independent chains
		for i, w := range ws {
			x := xs[i*8 : i*8+8]
			p0, p1, p2, p3 := &nibbleF[w&255], &nibbleF[w>>8&255], &nibbleF[w>>16&255], &nibbleF[w>>24]
			a += p0[0]*x[0] + p0[1]*x[1]
			b += p1[0]*x[2] + p1[1]*x[3]
			c += p2[0]*x[4] + p2[1]*x[5]
			d += p3[0]*x[6] + p3[1]*x[7]
		}
		sum += BF16ToF32(su) * ((a + b) + (c + d))
	}
	return sum
}

func dotQ8(words []uint32, scales []uint16, x []float32) float32 {
	var sum float32
	for g, su := range scales {
		ws, xs := words[g*16:g*16+16], x[g*64:g*64+64]
		var a, b, c, d float32
		for i, w := range ws {
			x := xs[i*4 : i*4+4]
			a += byteF[w&255] * x[0]
			b += byteF[w>>8&255] * x[1]
			c += byteF[w>>16&255] * x[2]
			d += byteF[w>>24] * x[3]
		}
		sum += BF16ToF32(su) * ((a + b) + (c + d))
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
	_ = dst[m.Rows-1] // bounds check here, not in a worker
	j := jobPool.Get().(*job)
	j.m, j.in, j.dst = m, in, dst
	parallel(j, &j.sched, m.Rows, m.minRows())
	j.m, j.in, j.dst, j.xs, j.dsts = nil, nil, nil, nil, nil // keep sched: its generation must change
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
	parallel(j, &j.sched, m.Rows, m.minRows())
	j.m, j.in, j.dst, j.xs, j.dsts = nil, nil, nil, nil, nil // keep sched: its generation must change
	jobPool.Put(j)
}

// minRows is the fewest rows worth handing to another worker (~64 KiB of
// weights, some microseconds of work), which keeps small matrices serial.
func (m *Matrix) minRows() int {
	return max(64<<10/(m.Cols*m.Bits/8), 4)
}

type job struct {
	sched
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
	// Tiles of ~32 KiB of packed weights stay in cache across the inputs.
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

// sched hands out the chunks of one parallel call. A worker that arrives
// after the call has finished, or after its job was reused, sees another
// generation and leaves without touching the job.
type sched struct {
	state atomic.Uint64 // generation<<32 | next chunk
	done  atomic.Int64  // rows finished
}

type task struct {
	f            ranger
	s            *sched
	gen          uint64
	n, chunkRows int
}

// work claims and runs chunks until none are left.
func (t task) work() {
	for {
		v := t.s.state.Load()
		lo := int(uint32(v)) * t.chunkRows
		if v>>32 != t.gen || lo >= t.n {
			return
		}
		if !t.s.state.CompareAndSwap(v, v+1) {
			continue
		}
		hi := min(lo+t.chunkRows, t.n)
		t.f.run(lo, hi)
		t.s.done.Add(int64(hi - lo))
	}
}

// The worker pool is persistent: decode issues hundreds of products per
// token. A parked worker can take tens of microseconds to wake (more in a
// VM), and a woken goroutine waits on the waker's P, so workers poll
// (yielding) for a while after each task. Chunks are claimed dynamically,
// several per worker, so a slow or descheduled core (or an efficiency core)
// does not hold up the call, and the caller never waits for a worker that
// has not started: it runs the remaining chunks itself.
var (
	poolOnce  sync.Once
	poolTasks chan task
	poolSize  int
)

const spinYields = 2000 // polls (a few hundred µs) before a worker parks

func startPool() {
	poolSize = runtime.GOMAXPROCS(0)
	poolTasks = make(chan task, 4*poolSize)
	for range poolSize - 1 {
		go func() {
			for {
				nextTask().work()
			}
		}()
	}
}

func nextTask() task {
	for range spinYields {
		select {
		case t := <-poolTasks:
			return t
		default:
			runtime.Gosched()
		}
	}
	return <-poolTasks
}

// parallel runs f over [0, n) in chunks of at least minRows rows, about 4
// per worker, starting at multiples of 4 rows (the SIMD kernels' row block,
// so results match a serial pass bit for bit).
func parallel(f ranger, s *sched, n, minRows int) {
	poolOnce.Do(startPool)
	chunk := (max(minRows, n/(4*poolSize)) + 3) &^ 3
	chunks := (n + chunk - 1) / chunk
	if poolSize == 1 || chunks <= 1 {
		f.run(0, n)
		return
	}
	t := task{f: f, s: s, gen: (s.state.Load()>>32 + 1) & (1<<32 - 1), n: n, chunkRows: chunk}
	s.done.Store(0)
	s.state.Store(t.gen << 32)
	for range min(poolSize, chunks) - 1 {
		select {
		case poolTasks <- t:
		default: // queue full: the workers are busy anyway
		}
	}
	t.work()
	for s.done.Load() != int64(n) {
		runtime.Gosched()
	}
}
