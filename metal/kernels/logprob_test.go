//go:build linux

package kernels

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/lilyformac/lily/engine/sample"
	"github.com/lilyformac/lily/metal/emu"
)

// runLogprobs runs logprob_partial and logprob_final over x (the penalised logits of n ids, in
// chunks of chunk) for the chosen token and compares with engine/sample's logprobs of the same
// logits: the alternatives' ids and order exactly, the values within tol of their magnitude (the
// kernels sum exp in float32, engine/sample in float64). It returns the largest difference.
func runLogprobs(t *testing.T, lib *emu.Library, x []float32, n, chunk, token int, order emu.Order) float64 {
	t.Helper()
	groups := SampleGroups(n, chunk)
	bx := emu.BufferOf(x)
	bms, btop, bout := emu.NewBuffer(8*groups), emu.NewBuffer(8*groups*LogprobTopN), emu.NewBuffer(4*LogprobRecordLen)
	for _, b := range []*emu.Buffer{bms, btop, bout} {
		b.Fill(0xFF)
	}
	mustDispatch(t, lib, LogprobPartialCall(n, chunk, LogprobPartialBuffers[*emu.Buffer]{Logits: bx, MS: bms, Top: btop}), order, uint64(token))
	mustDispatch(t, lib, LogprobFinalCall(n, chunk, LogprobFinalBuffers[*emu.Buffer]{
		Logits: bx, MS: bms, Top: btop, Step: emu.BufferOf([]uint32{9, uint32(token)}), Out: bout,
	}), order, uint64(token)+1)
	// engine/sample's logprobs: a greedy sampler reports them for its argmax; the chosen
	// token's logprob is x[token] - logZ, logZ recovered from the argmax's.
	want := sample.New(sample.Params{TopLogprobs: LogprobTopN}, nil).Next(x[:n])
	logZ := x[want.ID] - want.Logprob
	gotToken, lp, top := LogprobRecord(bout.Float32s(), LogprobTopN)
	worst := math.Abs(float64(lp - (x[token] - logZ)))
	if gotToken != token {
		t.Fatalf("token %d echoed as %d", token, gotToken)
	}
	if len(top) != len(want.Top) {
		t.Fatalf("%d alternatives, want %d", len(top), len(want.Top))
	}
	for r, c := range want.Top {
		if top[r].ID != c.ID {
			t.Fatalf("n %d chunk %d %v: alternative %d is id %d (%g), engine/sample's %d (%g)", n, chunk, order, r, top[r].ID, top[r].Logprob, c.ID, c.Logprob)
		}
		worst = max(worst, math.Abs(float64(top[r].Logprob-c.Logprob))/max(1, math.Abs(float64(c.Logprob))))
	}
	if worst > 2e-6 {
		t.Errorf("n %d chunk %d %v: logprobs off by %.2g", n, chunk, order, worst)
	}
	return worst
}

// logprobLogits are N(0, 3²) logits with ties (a repeated value across chunks), -inf ids (a
// vocabulary limit's bias) including a whole chunk of them, and room for a peaked distribution.
func logprobLogits(r *rand.Rand, n, chunk int) []float32 {
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

func TestLogprobs(t *testing.T) {
	lib := library(t, emu.Options{}, "sample.metal")
	r := rand.New(rand.NewPCG(61, 62))
	var worst float64
	for _, c := range []struct{ n, chunk int }{{5000, 1024}, {300, 64}, {25, 4096}} {
		x := logprobLogits(r, c.n, c.chunk)
		for _, order := range emu.Orders {
			t.Run(fmt.Sprintf("n%d_chunk%d_%v", c.n, c.chunk, order), func(t *testing.T) {
				worst = max(worst, runLogprobs(t, lib, x, c.n, c.chunk, r.IntN(c.n-1), order))
			})
		}
	}
	t.Logf("largest difference from engine/sample's logprobs: %.2g (relative, at least 1 absolute)", worst)
}

// TestLogprobsProduction runs the model's vocabulary in the plan's chunks.
func TestLogprobsProduction(t *testing.T) {
	lib := library(t, emu.Options{}, "sample.metal")
	r := rand.New(rand.NewPCG(63, 64))
	const n = 248320
	d := runLogprobs(t, lib, logprobLogits(r, n, SampleDefaultChunk), n, SampleDefaultChunk, 12345, emu.Shuffle)
	t.Logf("248,320 ids: largest difference %.2g", d)
}

func TestLogprobsASan(t *testing.T) {
	lib := library(t, emu.Options{ASan: true}, "sample.metal")
	r := rand.New(rand.NewPCG(65, 66))
	runLogprobs(t, lib, logprobLogits(r, 700, 256), 700, 256, 3, emu.Reverse)
}
