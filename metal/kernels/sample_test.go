//go:build linux

package kernels

import (
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"testing"

	"github.com/lilyformac/lily/engine/config"
	"github.com/lilyformac/lily/engine/sample"
	"github.com/lilyformac/lily/metal/emu"
)

// ---- soft float, through sample_probe -------------------------------------------------------

// probe runs sample_probe's operation op over (a[i], b[i]). The hook is not dispatched through a
// Call: it reads a[i] unchecked, so it runs exactly len(a) threads (dispatchThreads).
func probe(t testing.TB, lib *emu.Library, op int, a, b []uint64) []uint64 {
	t.Helper()
	p := pipeline(t, lib, "sample_probe", map[int]any{SampleVocab: 1, SampleChunk: 1, SampleProbeOp: op})
	out := emu.NewBuffer(8 * len(a))
	err := p.Dispatch(emu.Dispatch{
		Threads: [3]int{len(a)}, Group: [3]int{256},
		Buffers: map[int]emu.Binding{0: {Buffer: emu.BufferOf(a)}, 1: {Buffer: emu.BufferOf(b)}, 2: {Buffer: out}},
	})
	if err != nil {
		t.Fatal(err)
	}
	o := out.Bytes()
	res := make([]uint64, len(a))
	for i := range res {
		for j := 7; j >= 0; j-- {
			res[i] = res[i]<<8 | uint64(o[8*i+j])
		}
	}
	return res
}

// randF32Bits draws float32 bit patterns from every class: normals of all exponents,
// subnormals, zeros, infinities and NaNs, either sign.
func randF32Bits(r *rand.Rand) uint32 {
	sign := r.Uint32() & 0x80000000
	switch r.IntN(16) {
	case 0:
		return sign | r.Uint32()&0x7fffff // subnormal or zero
	case 1:
		return sign | [...]uint32{0, 0x7f800000, 0x7fc00000, 0x7f800001, 1, 0x7fffff, 0x800000, 0x7f7fffff}[r.IntN(8)]
	case 2, 3, 4, 5:
		return sign | uint32(118+r.IntN(20))<<23 | r.Uint32()&0x7fffff // near 1
	default:
		return sign | uint32(1+r.IntN(254))<<23 | r.Uint32()&0x7fffff
	}
}

func sameF32(got uint64, want float32) bool {
	g := math.Float32frombits(uint32(got))
	if want != want {
		return g != g && got>>32 == 0
	}
	return uint32(got) == math.Float32bits(want) && got>>32 == 0
}

func TestSampleSoftFloat(t *testing.T) {
	lib := library(t, emu.Options{}, "sample.metal")
	r := rand.New(rand.NewPCG(61, 62))
	const n = 1 << 16
	a, b := make([]uint64, n), make([]uint64, n)
	for i := range a {
		x, y := randF32Bits(r), randF32Bits(r)
		switch i % 4 {
		case 1: // close magnitudes: cancellation and ties
			y = x ^ uint32(r.IntN(2))<<31 + uint32(r.IntN(5)) - 2
		case 2: // nearby exponents
			y = x&0xff800000 + uint32(r.IntN(3))<<23 - 1<<23 | r.Uint32()&0x7fffff
		}
		a[i], b[i] = uint64(x), uint64(y)
	}
	for op, f := range []func(x, y float32) float32{
		func(x, y float32) float32 { return x + y },
		func(x, y float32) float32 { return x * y },
		func(x, y float32) float32 { return x / y },
	} {
		got := probe(t, lib, op, a, b)
		bad := 0
		for i := range got {
			x, y := math.Float32frombits(uint32(a[i])), math.Float32frombits(uint32(b[i]))
			if want := f(x, y); !sameF32(got[i], want) {
				if bad++; bad <= 5 {
					t.Errorf("op %d (%#x, %#x) = %#x, want %#x (%g)", op, uint32(a[i]), uint32(b[i]), got[i], math.Float32bits(want), want)
				}
			}
		}
		if bad > 0 {
			t.Errorf("op %d: %d of %d wrong", op, bad, n)
		}
	}

	// exp over y <= 0, and the whole p = exp((x - m)/t) chain.
	ys := make([]uint64, 0, n)
	for _, y := range []float32{0, float32(math.Copysign(0, -1)), -0x1p-25, -0x1.000002p-25, -0x1p-24, -1e-30,
		-103.97, -103.972, -103.98, -87.33655, -87.3365, -127.99, -128, -1e30, float32(math.Inf(-1)), -0x1p-149} {
		ys = append(ys, uint64(math.Float32bits(y)))
	}
	for len(ys) < n {
		var y float32
		switch r.IntN(3) {
		case 0:
			y = -float32(r.Float64() * 110)
		case 1:
			y = -float32(math.Exp(r.Float64()*30 - 25)) // |y| from 1e-11 to 1e2
		default:
			y = -float32(r.Float64() * 3)
		}
		ys = append(ys, uint64(math.Float32bits(y)))
	}
	got := probe(t, lib, 3, ys, make([]uint64, n))
	bad := 0
	for i, yb := range ys {
		y := math.Float32frombits(uint32(yb))
		if want := float32(math.Exp(float64(y))); !sameF32(got[i], want) {
			if bad++; bad <= 5 {
				t.Errorf("exp(%g) = %#x, want %#x", y, got[i], math.Float32bits(want))
			}
		}
	}
	for i := range a {
		m := float32(r.NormFloat64() * 4)
		x := m - float32(math.Abs(r.NormFloat64()*20))
		temp := float32(r.Float64()*2 + 0.01)
		a[i] = uint64(math.Float32bits(x))
		b[i] = uint64(math.Float32bits(m)) | uint64(math.Float32bits(temp))<<32
	}
	got = probe(t, lib, 8, a, b)
	for i := range a {
		x, m, temp := math.Float32frombits(uint32(a[i])), math.Float32frombits(uint32(b[i])), math.Float32frombits(uint32(b[i]>>32))
		if want := float32(math.Exp(float64((x - m) / temp))); !sameF32(got[i], want) {
			if bad++; bad <= 5 {
				t.Errorf("exp((%g - %g)/%g) = %#x, want %#x", x, m, temp, got[i], math.Float32bits(want))
			}
		}
	}
	if bad > 0 {
		t.Errorf("exp: %d wrong", bad)
	}

	// float64 sums and products of non-negative values, float32 -> float64, the uniform.
	rand64 := func() uint64 {
		switch r.IntN(8) {
		case 0:
			return r.Uint64() & (1<<52 - 1) // subnormal or zero
		case 1, 2, 3:
			return uint64(1000+r.IntN(60))<<52 | r.Uint64()&(1<<52-1)
		default:
			return uint64(1+r.IntN(2000))<<52 | r.Uint64()&(1<<52-1)
		}
	}
	for i := range a {
		a[i], b[i] = rand64(), rand64()
		if i%3 == 0 {
			b[i] = a[i] + uint64(r.IntN(200)-100)<<52&(0x7ff<<52) | r.Uint64()&(1<<52-1) // similar exponents
			b[i] &^= 1 << 63
			if b[i]>>52 >= 0x7ff {
				b[i] = 1 << 62
			}
		}
	}
	for op, f := range map[int]func(x, y float64) float64{4: func(x, y float64) float64 { return x + y }, 5: func(x, y float64) float64 { return x * y }} {
		got := probe(t, lib, op, a, b)
		bad := 0
		for i := range got {
			x, y := math.Float64frombits(a[i]), math.Float64frombits(b[i])
			want := f(x, y)
			if math.IsInf(want, 0) {
				continue // out of the sampler's range
			}
			if got[i] != math.Float64bits(want) {
				if bad++; bad <= 5 {
					t.Errorf("op %d (%g, %g) = %g, want %g", op, x, y, math.Float64frombits(got[i]), want)
				}
			}
		}
		if bad > 0 {
			t.Errorf("op %d: %d of %d wrong", op, bad, n)
		}
	}
	for i := range a {
		a[i] = uint64(randF32Bits(r))
		if math.IsNaN(float64(math.Float32frombits(uint32(a[i])))) {
			a[i] = 0
		}
	}
	got = probe(t, lib, 6, a, b)
	for i := range a {
		if want := float64(math.Float32frombits(uint32(a[i]))); got[i] != math.Float64bits(want) {
			t.Fatalf("float64(%#x) = %#x, want %#x", uint32(a[i]), got[i], math.Float64bits(want))
		}
	}
	for i := range a {
		a[i], b[i] = r.Uint64(), uint64(r.IntN(1<<20))
	}
	a[0], b[0] = 0, 0 // splitmix64(0) = 0: U = 0
	got = probe(t, lib, 7, a, b)
	for i := range a {
		if want := splitmixUniform(a[i], b[i]); got[i] != math.Float64bits(want) {
			t.Fatalf("uniform(%#x, %d) = %g, want %g", a[i], b[i], math.Float64frombits(got[i]), want)
		}
	}
}

// splitmixUniform is engine/sample's uniform (Sampler.uniform) for a seed and step.
func splitmixUniform(seed, step uint64) float64 {
	z := seed + step*0x9E3779B97F4A7C15
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9
	z = (z ^ (z >> 27)) * 0x94D049BB133111EB
	z ^= z >> 31
	return float64(z>>11) / (1 << 53)
}

// TestSampleExpExhaustive compares the kernel's exp with float32(math.Exp(float64(y))) for every
// float32 y <= 0, -0 to -inf (2^31 + 1 values). It takes a few minutes: set LILY_EXHAUSTIVE=1.
func TestSampleExpExhaustive(t *testing.T) {
	if os.Getenv("LILY_EXHAUSTIVE") == "" {
		t.Skip("set LILY_EXHAUSTIVE=1")
	}
	lib := library(t, emu.Options{}, "sample.metal")
	lo, hi := uint64(0x80000000), uint64(0xff800000)
	const batch = 1 << 22
	a, b := make([]uint64, batch), make([]uint64, batch)
	var bad []float32
	for start := lo; start <= hi; start += batch {
		for i := range a {
			a[i] = min(start+uint64(i), hi)
		}
		got := probe(t, lib, 3, a, b)
		for i, yb := range a {
			y := math.Float32frombits(uint32(yb))
			if want := float32(math.Exp(float64(y))); uint32(got[i]) != math.Float32bits(want) && (len(bad) == 0 || bad[len(bad)-1] != y) {
				bad = append(bad, y)
				t.Logf("exp(%g = %#x): kernel %#x, float32(math.Exp) %#x", y, uint32(yb), uint32(got[i]), math.Float32bits(want))
			}
		}
	}
	t.Logf("%d float32 inputs in [-inf, -0]: %d differ from float32(math.Exp(float64(y)))", hi-lo+1, len(bad))
}

// ---- the sampler ----------------------------------------------------------------------------

// gpuSampler runs sample_penalties, sample_select and sample_final on the emulator.
type gpuSampler struct {
	lib                                                *emu.Library
	n, chunk, threads                                  int
	params, state, bias, penTab, adj, cand, step, stat *emu.Buffer
}

func newGPUSampler(t *testing.T, lib *emu.Library, setup *SampleSetup, n, chunk int) *gpuSampler {
	t.Helper()
	g := &gpuSampler{
		lib: lib, n: n, chunk: chunk, threads: SampleThreads,
		params: emu.BufferOf(setup.Params.Words()), state: emu.BufferOf(setup.State),
		bias: emu.NewBuffer(4), penTab: emu.NewBuffer(4), adj: emu.NewBuffer(4 * n),
		cand: emu.NewBuffer(8 * SampleCandLen(n, chunk)), step: emu.BufferOf([]uint32{setup.Params.Pos0, 0}), stat: emu.NewBuffer(4),
	}
	if setup.Bias != nil {
		g.bias = emu.BufferOf(setup.Bias)
	}
	if setup.Pen != nil {
		g.penTab = emu.BufferOf(setup.Pen)
	}
	return g
}

// penalties is sample_penalties from logits into g.adj.
func (g *gpuSampler) penalties(logits *emu.Buffer) Call[*emu.Buffer] {
	return SamplePenaltiesCall(g.n, g.chunk, SamplePenaltiesBuffers[*emu.Buffer]{
		Logits: logits, Params: g.params, State: g.state, Bias: g.bias, Pen: g.penTab, Out: g.adj})
}

// next runs one step on logits and returns the chosen id and the status word; it checks that
// step.pos advanced.
func (g *gpuSampler) next(t *testing.T, logits []float32, order emu.Order, seed uint64) (int, uint32) {
	t.Helper()
	pos := g.step.Uint32s()[0]
	g.adj.Fill(0xFF)
	g.cand.Fill(0xFF)
	g.stat.Fill(0xFF)
	mustDispatch(t, g.lib, g.penalties(emu.BufferOf(logits)), order, seed)
	mustDispatch(t, g.lib, SampleSelectCall(g.n, g.chunk, g.threads, SampleSelectBuffers[*emu.Buffer]{Logits: g.adj, Params: g.params, Cand: g.cand}),
		order, seed+1)
	mustDispatch(t, g.lib, SampleFinalCall(g.n, g.chunk, g.threads, SampleFinalBuffers[*emu.Buffer]{
		Params: g.params, Cand: g.cand, Step: g.step, State: g.state, Status: g.stat}), order, seed+2)
	st := g.step.Uint32s()
	if st[0] != pos+1 {
		t.Fatalf("step.pos %d -> %d", pos, st[0])
	}
	return int(st[1]), g.stat.Uint32s()[0]
}

// The sampler tests' logits (kernels.LogitGens).
type logitGen = LogitGen

var logitGens = LogitGens

type sampleCase struct {
	name  string
	p     sample.Params
	n     int
	chunk int
}

func seedPtr(v uint64) *uint64 { return &v }

// runSampleCase samples steps tokens with the GPU kernels and with sample.Sampler from the same
// settings and logits, and fails on the first difference. It returns the number of steps whose
// status asked for a CPU redo (those are not compared).
func runSampleCase(t *testing.T, lib *emu.Library, r *rand.Rand, c sampleCase, gen logitGen, seed uint64, steps int, order emu.Order) (redo int) {
	return runSampleCaseThreads(t, lib, r, c, gen, seed, steps, order, SampleThreads)
}

func runSampleCaseThreads(t *testing.T, lib *emu.Library, r *rand.Rand, c sampleCase, gen logitGen, seed uint64, steps int, order emu.Order, threads int) (redo int) {
	t.Helper()
	p := c.p
	p.Seed = seedPtr(seed)
	p.VocabLimit = c.n
	prompt := []int{1, 5, 5, c.n - 1, r.IntN(c.n)}
	const pos0 = 41
	setup, err := NewSampleSetup(p, prompt, c.n, pos0, 64)
	if err != nil {
		t.Fatal(err)
	}
	cpu := sample.New(p, prompt)
	gpu := newGPUSampler(t, lib, setup, c.n, c.chunk)
	gpu.threads = threads
	logits := make([]float32, c.n+3) // padding rows past the vocab limit must never be chosen
	for step := range steps {
		gen.F(r, logits)
		for i := c.n; i < len(logits); i++ {
			logits[i] = 1e30
		}
		want := cpu.Next(logits).ID
		got, status := gpu.next(t, logits, order, seed+uint64(step))
		if status&1 != 0 {
			redo++
			// the host would resample on the CPU: keep the two samplers in step
			gpu.step.Uint32s()[1] = uint32(want)
			if got != want {
				st := gpu.state.Uint32s()
				st[got], st[want] = setup.State[got], setup.State[want] // undo, then record want
				if setup.Params.Flags&SampleFlagCount != 0 {
					st[want]++
				}
				if setup.Params.Flags&SampleFlagSeen != 0 {
					st[want] |= TokenSeen
				}
			}
		} else if got != want {
			t.Fatalf("%s %s seed %d step %d %v: GPU chose %d, sample.Sampler %d", c.name, gen.Name, seed, step, order, got, want)
		}
		copy(setup.State, gpu.state.Uint32s())
	}
	return redo
}

var sampleCases = []sampleCase{
	{"thinking", sample.Params{Temperature: 1, TopP: 0.95, TopK: 20}, 1000, 256},
	{"non-thinking", sample.Params{Temperature: 0.7, TopP: 0.8, TopK: 20, PresencePenalty: 1.5}, 1000, 256},
	{"all-penalties", sample.Params{Temperature: 0.9, TopK: 50, TopP: 0.5, MinP: 0.1, RepetitionPenalty: 1.3,
		FrequencyPenalty: 0.4, PresencePenalty: -0.3, LogitBias: map[int]float32{3: 5, 7: -100, 11: 2.5, 12: 0}}, 333, 128},
	{"no-topk", sample.Params{Temperature: 1.3}, 700, 256}, // every token a candidate (n <= 1024: exact)
	{"no-topk-minp", sample.Params{Temperature: 0.8, MinP: 0.02, TopK: 700}, 700, 100},
	{"k1", sample.Params{Temperature: 0.5, TopK: 1}, 300, 64},
	{"hot-minp", sample.Params{Temperature: 2, TopK: 300, MinP: 0.05}, 1000, 256},
	{"k1000", sample.Params{Temperature: 1, TopK: 1000, TopP: 0.99, RepetitionPenalty: 0.8}, 3000, 512},
	{"cold", sample.Params{Temperature: 0.05, TopK: 40, FrequencyPenalty: 2}, 1000, 1000},
	{"tiny-topp", sample.Params{Temperature: 1, TopK: 64, TopP: 1e-6}, 200, 256},
}

func TestSample(t *testing.T) {
	lib := library(t, emu.Options{}, "sample.metal")
	r := rand.New(rand.NewPCG(63, 64))
	steps := 0
	for ci, c := range sampleCases {
		for gi, gen := range logitGens {
			for s := range 2 {
				seed := uint64(1000*ci + 10*gi + s)
				order := emu.Orders[(ci+gi+s)%3]
				t.Run(fmt.Sprintf("%s_%s_%d_%v", c.name, gen.Name, s, order), func(t *testing.T) {
					if redo := runSampleCase(t, lib, r, c, gen, seed, 6, order); redo != 0 {
						t.Errorf("%d steps asked for a CPU redo", redo)
					}
					steps += 6
				})
			}
		}
	}
	t.Logf("%d settings × %d logit kinds × 2 seeds: %d steps, GPU choice = sample.Sampler.Next every time", len(sampleCases), len(logitGens), steps)
}

// TestSampleSmallGroups runs sample_select and sample_final with 32 and 64 threads, so threads
// loop over several ids, bins and sort slots.
func TestSampleSmallGroups(t *testing.T) {
	lib := library(t, emu.Options{}, "sample.metal")
	r := rand.New(rand.NewPCG(73, 74))
	for i, c := range []sampleCase{sampleCases[2], sampleCases[7], sampleCases[3]} {
		for j, threads := range []int{32, 64} {
			if redo := runSampleCaseThreads(t, lib, r, c, logitGens[(i+j)%4], uint64(10*i+j), 3, emu.Orders[(i+j)%3], threads); redo != 0 {
				t.Errorf("%s: %d CPU redos", c.name, redo)
			}
		}
	}
}

// TestSampleManySeeds draws one token from the same logits under many seeds: the uniform covers
// the whole candidate list.
func TestSampleManySeeds(t *testing.T) {
	lib := library(t, emu.Options{}, "sample.metal")
	r := rand.New(rand.NewPCG(65, 66))
	c := sampleCase{"seeds", sample.Params{Temperature: 1.5, TopK: 40, TopP: 0.9}, 500, 128}
	logits := make([]float32, c.n)
	logitGens[0].F(r, logits)
	seen := map[int]bool{}
	for seed := range uint64(200) {
		p := c.p
		p.Seed, p.VocabLimit = seedPtr(seed), c.n
		want := sample.New(p, nil).Next(logits).ID
		setup, err := NewSampleSetup(p, nil, c.n, 0, 1)
		if err != nil {
			t.Fatal(err)
		}
		got, status := newGPUSampler(t, lib, setup, c.n, c.chunk).next(t, logits, emu.Orders[seed%3], seed)
		if got != want || status != 0 {
			t.Fatalf("seed %d: GPU chose %d (status %d), sample.Sampler %d", seed, got, status, want)
		}
		seen[got] = true
	}
	t.Logf("200 seeds: %d distinct tokens, all equal to sample.Sampler", len(seen))
}

// TestSampleBoundaries crafts logits whose probabilities are exact binary fractions, so the
// top-p sum and the min-p limit land exactly on a candidate, and logits that tie at ±0 across the
// top-k boundary.
func TestSampleBoundaries(t *testing.T) {
	lib := library(t, emu.Options{}, "sample.metal")
	const n = 300
	ln2 := float32(-math.Ln2)
	if half := float32(math.Exp(float64(ln2))); half != 0.5 {
		t.Fatalf("exp(float32(-ln 2)) = %g: the test needs exactly 0.5", half)
	}
	cases := []struct {
		name string
		p    sample.Params
		set  func(x []float32)
		ids  int // distinct tokens that must show up over the seeds
	}{
		// p = 1, 1, 0, ...: total 2, top_p 0.5 stops exactly at the first (the lower id).
		{"topp-exact", sample.Params{Temperature: 1, TopK: 50, TopP: 0.5}, func(x []float32) { x[17], x[9] = 3, 3 }, 1},
		// p = 1, 0.5: min_p 0.5 keeps the second (p == limit).
		{"minp-exact", sample.Params{Temperature: 1, TopK: 50, MinP: 0.5}, func(x []float32) { x[40], x[200] = 0, ln2 }, 2},
		// p = 1, 0.5, 0.5: top_p 0.75 of 2 reaches 1.5 exactly at the second; ties by id.
		{"topp-tie", sample.Params{Temperature: 1, TopK: 50, TopP: 0.75}, func(x []float32) { x[250], x[30], x[20] = 0, ln2, ln2 }, 2},
		// top_k 3 over ±0 ties: ids 0..2 whatever their zero's sign.
		{"zeros", sample.Params{Temperature: 1, TopK: 3}, func(x []float32) {
			for i := range x {
				x[i] = float32(math.Copysign(0, float64(1-2*(i%2))))
			}
		}, 3},
	}
	for _, c := range cases {
		x := make([]float32, n)
		for i := range x {
			x[i] = -1000 // p underflows to 0
		}
		c.set(x)
		seen := map[int]bool{}
		for seed := range uint64(60) {
			p := c.p
			p.Seed, p.VocabLimit = seedPtr(seed), n
			want := sample.New(p, nil).Next(x).ID
			setup, err := NewSampleSetup(p, nil, n, 0, 1)
			if err != nil {
				t.Fatal(err)
			}
			got, status := newGPUSampler(t, lib, setup, n, 128).next(t, x, emu.Orders[seed%3], seed)
			if got != want || status != 0 {
				t.Fatalf("%s seed %d: GPU chose %d (status %d), sample.Sampler %d", c.name, seed, got, status, want)
			}
			seen[got] = true
		}
		if len(seen) != c.ids {
			t.Errorf("%s: %d distinct tokens over the seeds, want %d", c.name, len(seen), c.ids)
		}
	}
}

// TestSampleOverflow covers top_k = 0 over more than SampleMaxK ids: exact (status 0) when the
// 1024th best candidate cannot count, a CPU redo asked otherwise.
func TestSampleOverflow(t *testing.T) {
	lib := library(t, emu.Options{}, "sample.metal")
	r := rand.New(rand.NewPCG(67, 68))
	c := sampleCase{"overflow", sample.Params{Temperature: 1, TopP: 0.9}, 3000, 1024}
	if redo := runSampleCase(t, lib, r, c, logitGens[3], 7, 4, emu.Shuffle); redo != 0 { // wide: the tail is negligible
		t.Errorf("wide logits: %d steps asked for a CPU redo, want 0", redo)
	}
	if redo := runSampleCase(t, lib, r, c, logitGens[0], 8, 3, emu.Forward); redo != 3 { // flat: every id counts
		t.Errorf("flat logits: %d of 3 steps asked for a CPU redo, want 3", redo)
	}
}

// TestSampleProduction samples over the model's vocabulary (248320 ids, 61 select threadgroups).
func TestSampleProduction(t *testing.T) {
	lib := library(t, emu.Options{}, "sample.metal")
	r := rand.New(rand.NewPCG(69, 70))
	for i, c := range []sampleCase{
		{"thinking", sample.Params{Temperature: 1, TopP: 0.95, TopK: 20}, config.Production().VocabSize, SampleDefaultChunk},
		{"non-thinking", sample.Params{Temperature: 0.7, TopP: 0.8, TopK: 20, PresencePenalty: 1.5, RepetitionPenalty: 1.1}, config.Production().VocabSize, SampleDefaultChunk},
	} {
		if redo := runSampleCase(t, lib, r, c, logitGens[2], uint64(i), 2, emu.Orders[i]); redo != 0 {
			t.Errorf("%s: %d CPU redos", c.name, redo)
		}
	}
	t.Log("248320 ids: GPU choice = sample.Sampler.Next")
}

func TestSampleASan(t *testing.T) {
	lib := library(t, emu.Options{ASan: true}, "sample.metal")
	r := rand.New(rand.NewPCG(71, 72))
	runSampleCase(t, lib, r, sampleCases[2], logitGens[1], 3, 2, emu.Shuffle)
	runSampleCase(t, lib, r, sampleCases[3], logitGens[0], 4, 1, emu.Reverse)
}
