package cases

import (
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/lilyformac/lily/engine/config"
	"github.com/lilyformac/lily/engine/sample"
	"github.com/lilyformac/lily/metal/kernels"
	"github.com/lilyformac/lily/metal/plan"
)

// idTol: argmax and step_copy choose or copy ids: the error is the number of wrong ones; none
// pass, on any device (argmax.metal compiles MathSafe and compares bit patterns).
var idTol = Tol{}

// argmaxGens are argmax's kinds of logits: the sampler's, and NaNs, all NaN, all -inf, and ±0
// ties (which go to the lower id).
var argmaxGens = append(kernels.LogitGens[:len(kernels.LogitGens):len(kernels.LogitGens)],
	kernels.LogitGen{Name: "nans", F: func(r *rand.Rand, x []float32) {
		for i := range x {
			x[i] = float32(r.NormFloat64())
			if r.IntN(3) == 0 {
				x[i] = float32(math.NaN())
			}
		}
		x[0] = float32(math.NaN())
	}},
	kernels.LogitGen{Name: "all-nan", F: func(r *rand.Rand, x []float32) {
		for i := range x {
			x[i] = float32(math.NaN())
		}
	}},
	kernels.LogitGen{Name: "all-neg-inf", F: func(r *rand.Rand, x []float32) {
		for i := range x {
			x[i] = float32(math.Inf(-1))
		}
	}},
	kernels.LogitGen{Name: "zeros", F: func(r *rand.Rand, x []float32) { // -0 first
		for i := range x {
			x[i] = float32(math.Copysign(0, float64(1-2*((i+1)%2))))
		}
	}},
)

func argmaxCases() []Case {
	var out []Case
	// Edge geometries: one id, fewer ids than groups, partial simdgroups, one group; every kind
	// of logits, padding past n (+inf) never chosen.
	for _, s := range []struct{ n, groups, threads int }{{1, 1, 32}, {31, 128, 32}, {1000, 7, 256}, {1000, 3, 40}, {4099, 16, 1024}, {300, 1, 64}} {
		for _, g := range argmaxGens {
			out = append(out, argmaxCase(s.n, s.groups, s.threads, 5, float32(math.Inf(1)), g, false))
		}
	}
	out = append(out, argmaxCase(777, 5, 96, 0, 0, kernels.LogitGens[1], false))
	// The model's vocabulary (248,320 ids) in the production geometry, padding 1e30.
	n := config.Production().VocabSize
	for _, g := range []kernels.LogitGen{kernels.LogitGens[2], kernels.LogitGens[1]} {
		out = append(out, argmaxCase(n, kernels.ArgmaxDefaultGroups, kernels.ArgmaxThreads, 64, 1e30, g, true))
	}
	out = append(out, argmaxBatchCases()...)
	return append(out, argmaxPenaltiesCase(), stepCopyCase())
}

// argmaxCase runs argmax_partial and argmax_final over n logits of gen (then pad values of
// padding) in groups threadgroups of threads: the id must be engine/sample's greedy choice,
// and step.pos must advance.
func argmaxCase(n, groups, threads, pad int, padding float32, gen kernels.LogitGen, heavy bool) Case {
	return Case{
		Name:    fmt.Sprintf("argmax_partial/n%d_g%d_tg%d_%s", n, groups, threads, gen.Name),
		Kernels: []string{"argmax_partial", "argmax_final"}, Tol: idTol, Heavy: heavy,
		Shape: fmt.Sprintf("%d ids (%s logits), %d groups of %d threads, then the final group", n, gen.Name, groups, threads),
		Run: func(c *Ctx) error {
			x := make([]float32, n+pad)
			gen.F(c.R, x)
			for i := n; i < len(x); i++ {
				x[i] = padding // never chosen
			}
			want := kernels.Argmax(x, n)
			if cpu := sample.New(sample.Params{VocabLimit: n}, nil).Next(x).ID; cpu != want {
				return fmt.Errorf("the reference: kernels.Argmax %d, engine/sample %d", want, cpu)
			}
			_, step := argmaxDispatches(c, c.In("logits", x), n, groups, threads, c.In("params", kernels.SampleParams{}.Words()), c.In("state", []uint32{0}), false)
			if err := c.Step(); err != nil {
				return err
			}
			return argmaxStep(c, step, 9, want)
		},
	}
}

// argmaxDispatches adds argmax_partial and argmax_final over logits and returns the partial
// keys' buffer and the step buffer, which starts at {9, 77}.
func argmaxDispatches(c *Ctx, logits, n, groups, threads, params, state int, barrier bool) (partial, step int) {
	partial, step = c.Out("partial", 8*groups), c.InOut("step", []uint32{9, 77})
	c.Add(kernels.ArgmaxPartialCall(n, groups, threads, kernels.ArgmaxPartialBuffers[int]{Logits: logits, Partial: partial}), barrier)
	c.Add(kernels.ArgmaxFinalCall(n, groups, threads, kernels.ArgmaxFinalBuffers[int]{Partial: partial, Step: step, Params: params, State: state}), true)
	return partial, step
}

// argmaxStep checks the step buffer after a step from pos: {pos+1, want}.
func argmaxStep(c *Ctx, step int, pos uint32, want int) error {
	st := c.U32(step)
	if st[0] != pos+1 {
		return fmt.Errorf("step.pos %d -> %d, want %d", pos, st[0], pos+1)
	}
	return c.ID("step.token", int(st[1]), want)
}

// argmaxPenaltiesCase is greedy decoding with penalties: sample_penalties then the argmax
// kernels, against sample.Sampler over several steps (the kernels keep the token counts).
func argmaxPenaltiesCase() Case {
	const n, steps, groups = 500, 12, 8
	return Case{
		Name:    "sample_penalties/argmax_n500_12steps",
		Kernels: []string{"sample_penalties", "argmax_partial", "argmax_final"}, Tol: idTol,
		Shape: "500 ids, 12 greedy steps with bias, repetition, frequency and presence penalties",
		Run: func(c *Ctx) error {
			seed := uint64(1)
			p := sample.Params{PresencePenalty: 1.5, FrequencyPenalty: 0.7, RepetitionPenalty: 1.2,
				LogitBias: map[int]float32{4: 3, 9: -2}, VocabLimit: n, Seed: &seed}
			prompt := []int{4, 9, 17}
			setup, err := kernels.NewSampleSetup(p, prompt, n, 0, steps)
			if err != nil {
				return err
			}
			cpu := sample.New(p, prompt)
			x := make([]float32, n)
			kernels.ModelLogits(c.R, x)
			for i := range x {
				x[i] *= 0.2 // the penalties decide
			}
			params, state, adj := c.In("params", setup.Params.Words()), c.InOut("state", setup.State), c.Out("adjusted", 4*n)
			c.Add(kernels.SamplePenaltiesCall(n, 128, kernels.SamplePenaltiesBuffers[int]{Logits: c.In("logits", x), Params: params, State: state,
				Bias: c.In("bias", orZero(setup.Bias)), Pen: c.In("penalties", orZero(setup.Pen)), Out: adj}), false)
			partial, step := argmaxDispatches(c, adj, n, groups, kernels.ArgmaxThreads, params, state, true)
			return c.Steps(steps, func(s int) {
				c.Poison(adj)
				c.Poison(partial)
				c.Set(step, []uint32{9, 77})
			}, func(s int) error {
				if err := argmaxStep(c, step, 9, cpu.Next(x).ID); err != nil {
					return fmt.Errorf("step %d: %w", s, err)
				}
				return nil
			})
		},
	}
}

// orZero is v, or one zero when v is empty (a buffer the kernel does not read).
func orZero(v []float32) []float32 {
	if len(v) == 0 {
		return []float32{0}
	}
	return v
}

// stepCopyCase: step_copy writes the step buffer's two words into the slot at its binding's
// offset (as metal/gpu's readback rebinds it per step) and nothing else.
func stepCopyCase() Case {
	return Case{
		Name: "step_copy/slot_at_8", Kernels: []string{"step_copy"}, Tol: idTol,
		Shape: "{pos, token} into words 2-3 of six",
		Run: func(c *Ctx) error {
			stepWords := []uint32{123456, 0xfffffffe}
			step, slots := c.In("step", stepWords), c.InOut("slots", []uint32{7, 7, 7, 7, 7, 7})
			c.AddBound(kernels.StepCopyCall(1, 1, kernels.StepCopyBuffers[plan.Binding]{Step: plan.Binding{Buffer: step}, Slot: plan.Binding{Buffer: slots, Offset: 8}}), false)
			if err := c.Step(); err != nil {
				return err
			}
			want := kernels.StepCopy(stepWords)
			got := c.U32(slots)
			wrong := 0
			for i, w := range []uint32{7, 7, want[0], want[1], 7, 7} {
				if got[i] != w {
					wrong++
				}
			}
			c.note(float64(wrong), fmt.Sprintf("slots = %v, want %v at words 2-3", got, want))
			if wrong > 0 {
				return fmt.Errorf("slots %v, want %v at words 2-3 and 7 elsewhere", got, want)
			}
			return nil
		},
	}
}
