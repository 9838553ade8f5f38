//go:build linux

package kernels

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/lilyformac/lily/engine/config"
	"github.com/lilyformac/lily/engine/sample"
	"github.com/lilyformac/lily/metal/emu"
)

// runArgmax runs argmax_partial and argmax_final over logits[:n] and returns the chosen id.
// params and state may be nil (no penalty bookkeeping).
func runArgmax(t *testing.T, lib *emu.Library, logits []float32, n, groups, threads int, params, state *emu.Buffer, order emu.Order, seed uint64) int {
	t.Helper()
	partial := emu.NewBuffer(8 * groups)
	partial.Fill(0xFF)
	if params == nil {
		params, state = emu.BufferOf(SampleParams{}.Words()), emu.NewBuffer(4)
	}
	step := emu.BufferOf([]uint32{9, 77})
	mustDispatch(t, lib, ArgmaxPartialCall(n, groups, threads, ArgmaxPartialBuffers[*emu.Buffer]{Logits: emu.BufferOf(logits), Partial: partial}), order, seed)
	mustDispatch(t, lib, ArgmaxFinalCall(n, groups, threads, ArgmaxFinalBuffers[*emu.Buffer]{Partial: partial, Step: step, Params: params, State: state}),
		order, seed+1)
	st := step.Uint32s()
	if st[0] != 10 {
		t.Fatalf("step.pos 9 -> %d", st[0])
	}
	return int(st[1])
}

var argmaxGens = append(logitGens[:len(logitGens):len(logitGens)],
	logitGen{"nans", func(r *rand.Rand, x []float32) {
		for i := range x {
			x[i] = float32(r.NormFloat64())
			if r.IntN(3) == 0 {
				x[i] = float32(math.NaN())
			}
		}
		x[0] = float32(math.NaN())
	}},
	logitGen{"all-nan", func(r *rand.Rand, x []float32) {
		for i := range x {
			x[i] = float32(math.NaN())
		}
	}},
	logitGen{"all-neg-inf", func(r *rand.Rand, x []float32) {
		for i := range x {
			x[i] = float32(math.Inf(-1))
		}
	}},
	logitGen{"zeros", func(r *rand.Rand, x []float32) { // -0 first: ties with +0 go to the lower id
		for i := range x {
			x[i] = float32(math.Copysign(0, float64(1-2*((i+1)%2))))
		}
	}},
)

func TestArgmax(t *testing.T) {
	lib := library(t, emu.Options{}, "argmax.metal")
	r := rand.New(rand.NewPCG(81, 82))
	cases := []struct{ n, groups, threads int }{
		{1, 1, 32}, {31, 128, 32}, {1000, 7, 256}, {1000, 3, 40}, {4099, 16, 1024}, {300, 1, 64},
	}
	checked := 0
	for _, c := range cases {
		for gi, gen := range argmaxGens {
			order := emu.Orders[gi%3]
			t.Run(fmt.Sprintf("n%d_g%d_tg%d_%s_%v", c.n, c.groups, c.threads, gen.name, order), func(t *testing.T) {
				x := make([]float32, c.n+5)
				gen.f(r, x)
				for i := c.n; i < len(x); i++ {
					x[i] = float32(math.Inf(1)) // padding rows never win
				}
				want := Argmax(x, c.n)
				if cpu := sample.New(sample.Params{VocabLimit: c.n}, nil).Next(x).ID; cpu != want {
					t.Fatalf("Argmax %d, sample.Sampler %d", want, cpu)
				}
				if got := runArgmax(t, lib, x, c.n, c.groups, c.threads, nil, nil, order, uint64(gi)); got != want {
					t.Fatalf("argmax chose %d, want %d (logit %g vs %g)", got, want, x[min(got, len(x)-1)], x[want])
				}
				checked++
			})
		}
	}
	t.Logf("%d cases: argmax = sample.Sampler.Next (greedy) every time", checked)
}

// TestArgmaxPenalties runs greedy decoding with penalties: sample_penalties then the argmax
// kernels, against sample.Sampler over several steps (the kernels keep the token counts).
func TestArgmaxPenalties(t *testing.T) {
	lib := library(t, emu.Options{}, "sample.metal", "argmax.metal")
	r := rand.New(rand.NewPCG(83, 84))
	const n, steps = 500, 12
	p := sample.Params{PresencePenalty: 1.5, FrequencyPenalty: 0.7, RepetitionPenalty: 1.2,
		LogitBias: map[int]float32{4: 3, 9: -2}, VocabLimit: n, Seed: seedPtr(1)}
	prompt := []int{4, 9, 17}
	setup, err := NewSampleSetup(p, prompt, n, 0, steps)
	if err != nil {
		t.Fatal(err)
	}
	cpu := sample.New(p, prompt)
	gpu := newGPUSampler(t, lib, setup, n, 128)
	x := make([]float32, n)
	logitGens[2].f(r, x)
	for i := range x {
		x[i] *= 0.2 // the penalties decide
	}
	for step := range steps {
		want := cpu.Next(x).ID
		gpu.adj.Fill(0xFF)
		mustDispatch(t, lib, gpu.penalties(emu.BufferOf(x)), emu.Orders[step%3], uint64(step))
		got := runArgmax(t, lib, gpu.adj.Float32s(), n, 8, ArgmaxThreads, gpu.params, gpu.state, emu.Orders[step%3], uint64(step))
		if got != want {
			t.Fatalf("step %d: GPU chose %d, sample.Sampler %d", step, got, want)
		}
	}
	t.Logf("%d greedy steps with bias, repetition, frequency and presence penalties: GPU = sample.Sampler", steps)
}

// TestArgmaxProduction runs the model's vocabulary (248320 ids) in the production geometry.
func TestArgmaxProduction(t *testing.T) {
	lib := library(t, emu.Options{}, "argmax.metal")
	r := rand.New(rand.NewPCG(85, 86))
	n := config.Production().VocabSize
	x := make([]float32, n+64)
	for i, gen := range []logitGen{logitGens[2], logitGens[1]} {
		gen.f(r, x)
		for i := n; i < len(x); i++ {
			x[i] = 1e30
		}
		if got, want := runArgmax(t, lib, x, n, ArgmaxDefaultGroups, ArgmaxThreads, nil, nil, emu.Orders[i], 1), Argmax(x, n); got != want {
			t.Fatalf("%s: argmax chose %d, want %d", gen.name, got, want)
		}
	}
}

func TestArgmaxASan(t *testing.T) {
	lib := library(t, emu.Options{ASan: true}, "argmax.metal")
	r := rand.New(rand.NewPCG(87, 88))
	x := make([]float32, 777)
	logitGens[1].f(r, x)
	if got, want := runArgmax(t, lib, x, len(x), 5, 96, nil, nil, emu.Shuffle, 2), Argmax(x, len(x)); got != want {
		t.Fatalf("argmax chose %d, want %d", got, want)
	}
}

// TestStepCopy: step_copy writes the step buffer's two words into the slot at its binding's
// offset and nothing else, in every thread order and under ASan.
func TestStepCopy(t *testing.T) {
	for _, opt := range []emu.Options{{}, {ASan: true}} {
		lib := library(t, opt, "argmax.metal")
		for _, order := range emu.Orders {
			step := emu.BufferOf([]uint32{123456, 0xfffffffe})
			slots := emu.BufferOf([]uint32{7, 7, 7, 7, 7, 7})
			// The slot at the binding's offset, as metal/gpu's readback rebinds it per step.
			c := StepCopyCall(1, 1, StepCopyBuffers[emu.Binding]{Step: emu.Binding{Buffer: step}, Slot: emu.Binding{Buffer: slots, Offset: 8}})
			if err := dispatchBound(t, lib, c, order, 0); err != nil {
				t.Fatal(err)
			}
			want := StepCopy(step.Uint32s())
			if got := slots.Uint32s(); got[2] != want[0] || got[3] != want[1] || got[0] != 7 || got[1] != 7 || got[4] != 7 || got[5] != 7 {
				t.Fatalf("%v: slots %v, want %v at words 2-3", order, got, want)
			}
		}
	}
}
