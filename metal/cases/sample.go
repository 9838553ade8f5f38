package cases

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"

	"github.com/lilyformac/lily/engine/config"
	"github.com/lilyformac/lily/engine/sample"
	"github.com/lilyformac/lily/metal/kernels"
)

// The sampler (sample_penalties, sample_select, sample_final) reproduces engine/sample's choice
// exactly, and sample_probe's soft float is correctly rounded: ids and bits compare with idTol
// (the error is the number of wrong ones; none pass, on any device: sample.metal compiles
// MathSafe and its float arithmetic is in integers).

func sampleCases() []Case {
	var out []Case
	for i, op := range kernels.SampleProbeOps {
		out = append(out, sampleProbeCase(i, op, 1<<16, nil))
	}
	// Every setting of the server's sampler over every kind of logits, two seeds of six steps
	// each, a random prompt counted by the penalties; no step may ask for a CPU redo.
	for _, s := range sampleSettings {
		for _, g := range kernels.LogitGens {
			s := s
			s.gen, s.seeds, s.steps, s.prompt = g, 2, 6, true
			out = append(out, sampleCase(s))
		}
	}
	// Threadgroups of 32 and 64: threads loop over several ids, bins and sort slots.
	for i, s := range []sampleShape{sampleSettings[2], sampleSettings[7], sampleSettings[3]} {
		for j, threads := range []int{32, 64} {
			s := s
			s.threads, s.gen, s.seeds, s.steps, s.prompt = threads, kernels.LogitGens[(i+j)%4], 1, 3, true
			out = append(out, sampleCase(s))
		}
	}
	// One token from the same logits under 200 seeds: the uniform covers the candidate list.
	// (Many steps: Heavy, one order and no ASan, as the kernel tests ran them.)
	out = append(out, sampleCase(sampleShape{name: "seeds", p: sample.Params{Temperature: 1.5, TopK: 40, TopP: 0.9}, n: 500, chunk: 128,
		gen: kernels.LogitGens[0], fixed: true, seeds: 200, steps: 1, heavy: true}))
	// Probabilities that are exact binary fractions, so the top-p sum and the min-p limit land
	// exactly on a candidate, and ±0 ties across the top-k boundary: the distinct tokens over 60
	// seeds are the ones the rule keeps (Heavy, as above).
	ln2 := float32(-math.Ln2) // exp(float32(-ln 2)) is exactly 0.5
	for _, b := range []struct {
		name string
		p    sample.Params
		set  func(x []float32)
		ids  int
	}{
		// p = 1, 1, 0, ...: total 2, top_p 0.5 stops exactly at the first (the lower id).
		{"topp_exact", sample.Params{Temperature: 1, TopK: 50, TopP: 0.5}, func(x []float32) { x[17], x[9] = 3, 3 }, 1},
		// p = 1, 0.5: min_p 0.5 keeps the second (p == limit).
		{"minp_exact", sample.Params{Temperature: 1, TopK: 50, MinP: 0.5}, func(x []float32) { x[40], x[200] = 0, ln2 }, 2},
		// p = 1, 0.5, 0.5: top_p 0.75 of 2 reaches 1.5 exactly at the second; ties by id.
		{"topp_tie", sample.Params{Temperature: 1, TopK: 50, TopP: 0.75}, func(x []float32) { x[250], x[30], x[20] = 0, ln2, ln2 }, 2},
		// top_k 3 over ±0 ties: ids 0..2 whatever their zero's sign.
		{"zeros", sample.Params{Temperature: 1, TopK: 3}, func(x []float32) {
			for i := range x {
				x[i] = float32(math.Copysign(0, float64(1-2*(i%2))))
			}
		}, 3},
	} {
		set := b.set
		gen := kernels.LogitGen{Name: "crafted", F: func(_ *rand.Rand, x []float32) {
			for i := range x {
				x[i] = -1000 // p underflows to 0
			}
			set(x)
		}}
		out = append(out, sampleCase(sampleShape{name: b.name, p: b.p, n: 300, chunk: 128, gen: gen, fixed: true, seeds: 60, steps: 1, distinct: b.ids, heavy: true}))
	}
	// top_k off over more than SampleMaxK ids: exact when the 1024th best candidate cannot count
	// (wide logits), a CPU redo asked at every step otherwise (flat ones).
	overflow := sampleShape{name: "overflow", p: sample.Params{Temperature: 1, TopP: 0.9}, n: 3000, chunk: 1024, seeds: 1, prompt: true}
	wide, flat := overflow, overflow
	wide.gen, wide.steps = kernels.LogitGens[3], 4
	flat.gen, flat.steps, flat.redo = kernels.LogitGens[0], 3, 3
	out = append(out, sampleCase(wide), sampleCase(flat))
	// The model's vocabulary (248,320 ids, 61 select threadgroups), and the selftest's 65,536.
	n := config.Production().VocabSize
	out = append(out,
		sampleCase(sampleShape{name: "thinking", p: sample.Params{Temperature: 1, TopP: 0.95, TopK: 20}, n: n, chunk: kernels.SampleDefaultChunk,
			gen: kernels.LogitGens[2], seeds: 1, steps: 2, prompt: true, heavy: true}),
		sampleCase(sampleShape{name: "non-thinking", p: sample.Params{Temperature: 0.7, TopP: 0.8, TopK: 20, PresencePenalty: 1.5, RepetitionPenalty: 1.1},
			n: n, chunk: kernels.SampleDefaultChunk, gen: kernels.LogitGens[2], seeds: 1, steps: 2, prompt: true, heavy: true}),
		sampleCase(sampleShape{name: "thinking-presence", p: sample.Params{Temperature: 1, TopP: 0.95, TopK: 20, PresencePenalty: 1.5},
			n: 65536, chunk: kernels.SampleDefaultChunk, gen: kernels.LogitGens[2], seeds: 1, steps: 3, prompt: true, heavy: true}),
	)
	// The multi-row decode step's rows forms (sample_batch.go), at every R.
	return append(out, sampleBatchCases()...)
}

// sampleSettings are the server's sampler settings the cases cover, each over n ids in chunks.
var sampleSettings = []sampleShape{
	{name: "thinking", p: sample.Params{Temperature: 1, TopP: 0.95, TopK: 20}, n: 1000, chunk: 256},
	{name: "non-thinking", p: sample.Params{Temperature: 0.7, TopP: 0.8, TopK: 20, PresencePenalty: 1.5}, n: 1000, chunk: 256},
	{name: "all-penalties", p: sample.Params{Temperature: 0.9, TopK: 50, TopP: 0.5, MinP: 0.1, RepetitionPenalty: 1.3,
		FrequencyPenalty: 0.4, PresencePenalty: -0.3, LogitBias: map[int]float32{3: 5, 7: -100, 11: 2.5, 12: 0}}, n: 333, chunk: 128},
	{name: "no-topk", p: sample.Params{Temperature: 1.3}, n: 700, chunk: 256}, // every token a candidate (n <= 1024: exact)
	{name: "no-topk-minp", p: sample.Params{Temperature: 0.8, MinP: 0.02, TopK: 700}, n: 700, chunk: 100},
	{name: "k1", p: sample.Params{Temperature: 0.5, TopK: 1}, n: 300, chunk: 64},
	{name: "hot-minp", p: sample.Params{Temperature: 2, TopK: 300, MinP: 0.05}, n: 1000, chunk: 256},
	{name: "k1000", p: sample.Params{Temperature: 1, TopK: 1000, TopP: 0.99, RepetitionPenalty: 0.8}, n: 3000, chunk: 512},
	{name: "cold", p: sample.Params{Temperature: 0.05, TopK: 40, FrequencyPenalty: 2}, n: 1000, chunk: 1000},
	{name: "tiny-topp", p: sample.Params{Temperature: 1, TopK: 64, TopP: 1e-6}, n: 200, chunk: 256},
}

// sampleShape is one sampler case: settings, ids, chunk, select/final threads (0: SampleThreads),
// logits, seeds × steps per seed.
type sampleShape struct {
	name     string
	p        sample.Params
	n, chunk int
	threads  int
	gen      kernels.LogitGen
	fixed    bool // the same logits (made once) at every step of every seed
	seeds    int  // seeds 0, 1, … (fixed), else drawn
	steps    int  // steps per seed
	prompt   bool // a prompt {1, 5, 5, n-1, random} counted by the penalties, from position 41; else none, from 0
	redo     int  // steps that must ask for a CPU redo (status bit 0; those are not compared)
	distinct int  // with fixed: the distinct tokens the seeds must choose (0: not checked)
	heavy    bool
}

// sampleCase samples with the kernels and with sample.Sampler from the same settings, seeds and
// logits (padding ids past n at 1e30, never chosen): each step's id must be engine/sample's and
// step.pos must advance; a step asking for a CPU redo takes engine/sample's token, as the host
// does.
func sampleCase(s sampleShape) Case {
	threads := s.threads
	if threads == 0 {
		threads = kernels.SampleThreads
	}
	name := fmt.Sprintf("sample_select/%s_n%d_chunk%d", s.name, s.n, s.chunk)
	if s.gen.Name != "crafted" && s.gen.Name != "" {
		name += "_" + s.gen.Name
	}
	if s.threads != 0 {
		name += fmt.Sprintf("_tg%d", s.threads)
	}
	return Case{
		Name: name, Kernels: []string{"sample_select", "sample_penalties", "sample_final"}, Tol: idTol, Heavy: s.heavy,
		Shape: fmt.Sprintf("%s settings (temperature %g, top-k %d, top-p %g, min-p %g, penalties ×%g −%g·count −%g, %d biases) over %d ids (%s logits) in chunks of %d, threadgroups of %d; %d seeds × %d steps",
			s.name, s.p.Temperature, s.p.TopK, s.p.TopP, s.p.MinP, s.p.RepetitionPenalty, s.p.FrequencyPenalty, s.p.PresencePenalty, len(s.p.LogitBias), s.n, s.gen.Name, s.chunk, threads, s.seeds, s.steps),
		Run: func(c *Ctx) error { return runSample(c, s, threads) },
	}
}

func runSample(c *Ctx, s sampleShape, threads int) error {
	pos0, maxCount := 0, 1
	if s.prompt {
		pos0, maxCount = 41, 64
	}
	seeds := make([]uint64, s.seeds)
	for i := range seeds {
		seeds[i] = uint64(i)
		if !s.fixed {
			seeds[i] = c.R.Uint64()
		}
	}
	setupFor := func(seed uint64) (sample.Params, []int, *kernels.SampleSetup, error) {
		p := s.p
		p.Seed, p.VocabLimit = &seed, s.n
		var prompt []int
		if s.prompt {
			prompt = []int{1, 5, 5, s.n - 1, c.R.IntN(s.n)}
		}
		setup, err := kernels.NewSampleSetup(p, prompt, s.n, pos0, maxCount)
		return p, prompt, setup, err
	}
	_, _, setup, err := setupFor(seeds[0])
	if err != nil {
		return err
	}
	x := make([]float32, s.n+3)
	logits := c.In("logits", x)
	params, state, bias, pen := c.In("params", setup.Params.Words()), c.InOut("state", setup.State), c.In("bias", orZero(setup.Bias)), c.In("penalties", orZero(setup.Pen))
	adj, cand := c.Out("adjusted", 4*s.n), c.Out("candidates", 8*kernels.SampleCandLen(s.n, s.chunk))
	step, stat := c.InOut("step", []uint32{uint32(pos0), 0}), c.Out("status", 4)
	c.Add(kernels.SamplePenaltiesCall(s.n, s.chunk, kernels.SamplePenaltiesBuffers[int]{Logits: logits, Params: params, State: state, Bias: bias, Pen: pen, Out: adj}), false)
	c.Add(kernels.SampleSelectCall(s.n, s.chunk, threads, kernels.SampleSelectBuffers[int]{Logits: adj, Params: params, Cand: cand}), true)
	c.Add(kernels.SampleFinalCall(s.n, s.chunk, threads, kernels.SampleFinalBuffers[int]{Params: params, Cand: cand, Step: step, State: state, Status: stat}), true)

	var cpu *sample.Sampler
	var prev []uint32 // the token states before the step
	var flags uint32
	redo, seen := 0, map[int]bool{}
	if s.fixed {
		s.gen.F(c.R, x)
	}
	var stepErr error
	err = c.Steps(s.seeds*s.steps, func(k int) {
		if k%s.steps == 0 {
			p, prompt, setup, err := setupFor(seeds[k/s.steps])
			if err != nil {
				stepErr = err
				return
			}
			cpu, prev, flags = sample.New(p, prompt), slices.Clone(setup.State), setup.Params.Flags
			c.Set(params, setup.Params.Words())
			c.Set(state, setup.State)
			c.Set(step, []uint32{uint32(pos0), 0})
		}
		if !s.fixed {
			s.gen.F(c.R, x)
		}
		for i := s.n; i < len(x); i++ {
			x[i] = 1e30
		}
		c.Set(logits, x)
		c.Poison(adj)
		c.Poison(cand)
		c.Poison(stat)
	}, func(k int) error {
		if stepErr != nil {
			return stepErr
		}
		seed, i := seeds[k/s.steps], k%s.steps
		want := cpu.Next(x).ID
		st := c.U32(step)
		if st[0] != uint32(pos0+i+1) {
			return fmt.Errorf("seed %d step %d: step.pos %d, want %d", seed, i, st[0], pos0+i+1)
		}
		got, status := int(st[1]), c.U32(stat)[0]
		if status&1 != 0 {
			// the host resamples on the CPU: keep the two samplers in step
			redo++
			c.Set(step, []uint32{st[0], uint32(want)})
			if got != want {
				sts := c.U32(state)
				if got < len(sts) {
					sts[got] = prev[got]
				}
				sts[want] = prev[want] // undo, then record want
				if flags&kernels.SampleFlagCount != 0 {
					sts[want]++
				}
				if flags&kernels.SampleFlagSeen != 0 {
					sts[want] |= kernels.TokenSeen
				}
				c.Set(state, sts)
			}
		} else {
			if status != 0 {
				return fmt.Errorf("seed %d step %d: status %#x", seed, i, status)
			}
			if err := c.ID(fmt.Sprintf("seed %d step %d: token", seed, i), got, want); err != nil {
				return err
			}
		}
		seen[want] = true
		prev = c.U32(state)
		return nil
	})
	if err != nil {
		return err
	}
	if redo != s.redo {
		c.note(math.Abs(float64(redo-s.redo)), fmt.Sprintf("%d of %d steps asked for a CPU redo, want %d", redo, s.seeds*s.steps, s.redo))
		return fmt.Errorf("%d of %d steps asked for a CPU redo, want %d", redo, s.seeds*s.steps, s.redo)
	}
	if s.distinct != 0 && len(seen) != s.distinct {
		return fmt.Errorf("%d distinct tokens over %d seeds, want %d", len(seen), s.seeds, s.distinct)
	}
	return nil
}

// ---- soft float, through sample_probe ---------------------------------------------------------

// sampleProbeCase runs sample_probe's operation op over n operand pairs (of the op's kind, or
// from inputs when set) and requires every result bit for bit: float32 results correctly
// rounded (any NaN for a NaN) with a zero high word, float64 ones and the uniform exactly.
func sampleProbeCase(op int, name string, n int, inputs func(r *rand.Rand) (a, b []uint64)) Case {
	if inputs == nil {
		inputs = func(r *rand.Rand) ([]uint64, []uint64) { return probeInputs(r, name, n) }
	}
	return Case{
		Name: "sample_probe/" + name, Kernels: []string{"sample_probe+" + name}, Tol: idTol,
		Shape: fmt.Sprintf("%d operand pairs", n),
		Run: func(c *Ctx) error {
			a, b := inputs(c.R)
			out := c.Out("out", 8*len(a))
			c.Add(kernels.SampleProbeCall(op, len(a), kernels.SampleProbeBuffers[int]{A: c.In("a", a), B: c.In("b", b), Out: out}), false)
			if err := c.Step(); err != nil {
				return err
			}
			got := U64s(c.Bytes(out))
			bad, first := 0, ""
			for i := range a {
				want, skip := probeWant(name, a[i], b[i])
				if skip {
					continue
				}
				ok := got[i] == want
				if name != "f64_add" && name != "f64_mul" && name != "f32_to_f64" && name != "uniform" {
					w := math.Float32frombits(uint32(want))
					ok = got[i]>>32 == 0 && (uint32(got[i]) == uint32(want) || w != w && math.Float32frombits(uint32(got[i])) != math.Float32frombits(uint32(got[i])))
				}
				if !ok {
					if bad++; bad == 1 {
						first = fmt.Sprintf("%s(%#x, %#x) = %#x, want %#x", name, a[i], b[i], got[i], want)
					}
				}
			}
			c.note(float64(bad), first)
			if bad > 0 {
				return fmt.Errorf("%d of %d wrong, first %s", bad, len(a), first)
			}
			return nil
		},
	}
}

// probeWant is the Go result of sample_probe's operation name on (a, b), as its bits; skip for an
// input outside the sampler's range (a float64 overflow).
func probeWant(name string, a, b uint64) (want uint64, skip bool) {
	f32 := func(v float32) uint64 { return uint64(math.Float32bits(v)) }
	x, y := math.Float32frombits(uint32(a)), math.Float32frombits(uint32(b))
	switch name {
	case "f32_add":
		return f32(x + y), false
	case "f32_mul":
		return f32(x * y), false
	case "f32_div":
		return f32(x / y), false
	case "f32_exp":
		return f32(float32(math.Exp(float64(x)))), false
	case "p_chain": // exp((x - m) / t), m and t in b's low and high words
		m, t := y, math.Float32frombits(uint32(b>>32))
		return f32(float32(math.Exp(float64((x - m) / t)))), false
	case "f64_add", "f64_mul":
		u, v := math.Float64frombits(a), math.Float64frombits(b)
		w := u + v
		if name == "f64_mul" {
			w = u * v
		}
		return math.Float64bits(w), math.IsInf(w, 0)
	case "f32_to_f64":
		return math.Float64bits(float64(x)), false
	case "uniform":
		return math.Float64bits(splitmixUniform(a, b)), false
	}
	panic("sample_probe: no operation " + name)
}

// probeInputs are n operand pairs for sample_probe's operation name.
func probeInputs(r *rand.Rand, name string, n int) (a, b []uint64) {
	a, b = make([]uint64, n), make([]uint64, n)
	switch name {
	case "f32_add", "f32_mul", "f32_div":
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
	case "f32_exp": // y <= 0: the edges of the range, then random magnitudes
		a = a[:0]
		for _, y := range []float32{0, float32(math.Copysign(0, -1)), -0x1p-25, -0x1.000002p-25, -0x1p-24, -1e-30,
			-103.97, -103.972, -103.98, -87.33655, -87.3365, -127.99, -128, -1e30, float32(math.Inf(-1)), -0x1p-149} {
			a = append(a, uint64(math.Float32bits(y)))
		}
		for len(a) < n {
			var y float32
			switch r.IntN(3) {
			case 0:
				y = -float32(r.Float64() * 110)
			case 1:
				y = -float32(math.Exp(r.Float64()*30 - 25)) // |y| from 1e-11 to 1e2
			default:
				y = -float32(r.Float64() * 3)
			}
			a = append(a, uint64(math.Float32bits(y)))
		}
	case "p_chain": // the whole p = exp((x - m)/t) of sample_final
		for i := range a {
			m := float32(r.NormFloat64() * 4)
			x := m - float32(math.Abs(r.NormFloat64()*20))
			t := float32(r.Float64()*2 + 0.01)
			a[i], b[i] = uint64(math.Float32bits(x)), uint64(math.Float32bits(m))|uint64(math.Float32bits(t))<<32
		}
	case "f64_add", "f64_mul": // float64 sums and products of non-negative values
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
	case "f32_to_f64":
		for i := range a {
			a[i] = uint64(randF32Bits(r))
			if math.IsNaN(float64(math.Float32frombits(uint32(a[i])))) {
				a[i] = 0
			}
		}
	case "uniform": // the uniform for seed a and step b; splitmix64(0) = 0: U = 0
		for i := range a {
			a[i], b[i] = r.Uint64(), uint64(r.IntN(1<<20))
		}
		a[0], b[0] = 0, 0
	default:
		panic("sample_probe: no operation " + name)
	}
	return a, b
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

// splitmixUniform is engine/sample's uniform (Sampler.uniform) for a seed and step.
func splitmixUniform(seed, step uint64) float64 {
	z := seed + step*0x9E3779B97F4A7C15
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9
	z = (z ^ (z >> 27)) * 0x94D049BB133111EB
	z ^= z >> 31
	return float64(z>>11) / (1 << 53)
}
