package cases

import (
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/lilyformac/lily/engine/config"
	"github.com/lilyformac/lily/engine/sample"
	"github.com/lilyformac/lily/metal/kernels"
)

// logprobTol: the chosen token's and the alternatives' logprobs against engine/sample's, relative
// to max(1, |logprob|): 2e-6 on the emulator (the kernels sum exp in float32, engine/sample in
// float64); Metal 2e-5. The alternatives' ids and order must be engine/sample's exactly.
var logprobTol = Tol{Emu: 2e-6, Metal: 2e-5}

func logprobCases() []Case {
	var out []Case
	for _, c := range []struct{ n, chunk int }{{5000, 1024}, {300, 64}, {25, 4096}, {700, 256}} {
		out = append(out, logprobCase(c.n, c.chunk, -1, "ties", logprobLogits(c.n, c.chunk)))
	}
	// The model's vocabulary in the plan's chunks: the ties' logits, and a model's.
	n := config.Production().VocabSize
	out = append(out, logprobCase(n, kernels.SampleDefaultChunk, 12345, "ties", logprobLogits(n, kernels.SampleDefaultChunk)),
		logprobCase(n, kernels.SampleDefaultChunk, 777, "model", func(r *rand.Rand) []float32 {
			x := make([]float32, n)
			kernels.ModelLogits(r, x)
			return x
		}))
	return out
}

// logprobLogits are N(0, 3²) logits with ties (a repeated value across chunks), -inf ids (a
// vocabulary limit's bias) including a whole chunk of them, and room for a peaked distribution.
func logprobLogits(n, chunk int) func(r *rand.Rand) []float32 {
	return func(r *rand.Rand) []float32 {
		x := make([]float32, n)
		for i := range x {
			x[i] = float32(r.NormFloat64() * 3)
		}
		for i := 0; i < n; i += 97 {
			x[i] = 7.25 // ties among the most likely, ordered by id
		}
		for i := chunk; i < min(2*chunk, n); i++ {
			x[i] = float32(math.Inf(-1))
		}
		x[n-1] = float32(math.Inf(-1))
		return x
	}
}

// logprobCase runs logprob_partial and logprob_final over the penalised logits of n ids, in
// chunks of chunk, for the chosen token (token < 0: a random one) and compares with
// engine/sample's logprobs of the same logits.
func logprobCase(n, chunk, token int, kind string, gen func(*rand.Rand) []float32) Case {
	return Case{
		Name:    fmt.Sprintf("logprob_partial/n%d_chunk%d_%s", n, chunk, kind),
		Kernels: []string{"logprob_partial", "logprob_final"}, Tol: logprobTol, Heavy: n > 100000,
		Shape: fmt.Sprintf("%d ids (%s logits) in chunks of %d, %d alternatives", n, kind, chunk, kernels.LogprobTopN),
		Run: func(c *Ctx) error {
			x := gen(c.R)
			tok := token
			if tok < 0 {
				tok = c.R.IntN(n - 1)
			}
			groups := kernels.SampleGroups(n, chunk)
			logits, ms, top := c.In("logits", x), c.Out("ms", 8*groups), c.Out("top", 8*groups*kernels.LogprobTopN)
			rec := c.Out("record", 4*kernels.LogprobRecordLen)
			c.Add(kernels.LogprobPartialCall(n, chunk, kernels.LogprobPartialBuffers[int]{Logits: logits, MS: ms, Top: top}), false)
			c.Add(kernels.LogprobFinalCall(n, chunk, kernels.LogprobFinalBuffers[int]{Logits: logits, MS: ms, Top: top,
				Step: c.In("step", []uint32{9, uint32(tok)}), Out: rec}), true)
			if err := c.Step(); err != nil {
				return err
			}
			// engine/sample's logprobs: a greedy sampler reports them for its argmax; the chosen
			// token's logprob is x[tok] - logZ, logZ recovered from the argmax's.
			want := sample.New(sample.Params{TopLogprobs: kernels.LogprobTopN}, nil).Next(x[:n])
			logZ := x[want.ID] - want.Logprob
			gotToken, lp, alts := kernels.LogprobRecord(c.F32(rec), kernels.LogprobTopN)
			if gotToken != tok || len(alts) != len(want.Top) {
				return fmt.Errorf("record for token %d with %d alternatives, want %d and %d", gotToken, len(alts), tok, len(want.Top))
			}
			rel := func(a, b float32) float64 {
				if a == b { // -inf for an id no one may choose
					return 0
				}
				return math.Abs(float64(a-b)) / max(1, math.Abs(float64(b)))
			}
			c.note(rel(lp, x[tok]-logZ), fmt.Sprintf("logprob of token %d = %g, want %g", tok, lp, x[tok]-logZ))
			for r, w := range want.Top {
				if alts[r].ID != w.ID {
					return fmt.Errorf("alternative %d is id %d (%g), engine/sample's %d (%g)", r, alts[r].ID, alts[r].Logprob, w.ID, w.Logprob)
				}
				c.note(rel(alts[r].Logprob, w.Logprob), fmt.Sprintf("alternative %d (id %d) = %g, want %g", r, w.ID, alts[r].Logprob, w.Logprob))
			}
			return nil
		},
	}
}
