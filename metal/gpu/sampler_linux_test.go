//go:build linux

package gpu

import (
	"context"
	"math"
	"slices"
	"testing"

	"github.com/lilyformac/lily/engine/backend"
	"github.com/lilyformac/lily/engine/cpu"
	"github.com/lilyformac/lily/engine/runner"
	"github.com/lilyformac/lily/engine/sample"
)

// counted wraps a GPU backend to count the generations it continued on the device.
type counted struct {
	*GPU
	continued *int
}

func (c counted) ContinueRows(ctx context.Context, rows []backend.GenRow) ([][]float32, error) {
	logits, err := c.GPU.ContinueRows(ctx, rows)
	if err == nil {
		*c.continued++
	}
	return logits, err
}

// hostOnly hides a backend's device loop (it has only backend.Backend's methods): its sessions are
// sampled on the host from the logits.
type hostOnly struct{ backend.Backend }

// TestDeviceSamplerMatchesCPU: through the runner, the emulated GPU's pipelined loop with its
// sampler in the step chooses exactly what engine/sample chooses from the same GPU's logits
// (greedy, seeded sampling with top-k/top-p/min-p, penalties and logit bias, a vocabulary limit,
// a stop id), with the same logprobs and alternatives when asked (values within 2e-6: the
// device sums in float32), and settings the device does not run (top-k off) fall back to the host.
// It also gives the CPU backend's tokens for these seeds: the two backends' logits differ by
// rounding (bf16 KV cache), so a draw landing within that of a boundary between two candidates
// may legitimately go either way, so the seeds here are ones that agree on the committed goldens
// (for the 20-alternatives case seeds 6 and 7 do, 5 and 8 do not).
func TestDeviceSamplerMatchesCPU(t *testing.T) {
	dir := "../../testdata/golden/tiny-b"
	g, w := goldenWeights(t, dir)
	n := 0
	gpu := counted{newEmu(t, w, EmuOptions{GPUOptions: GPUOptions{MaxCtx: 160}}), &n}
	host := cpu.New(w)
	seed := func(s uint64) *uint64 { return &s }
	V := w.Config.VocabSize
	prompt := g.PromptIDs[:8]
	greedy := generate(t, host, runner.Request{Prompt: prompt, MaxTokens: 10, NoCache: true})
	for _, c := range []struct {
		name     string
		p        sample.Params
		stops    []int
		onDevice bool
	}{
		{"greedy to a stop id", sample.Params{}, []int{greedy[6]}, true},
		{"top-k", sample.Params{Temperature: 0.8, TopK: 20, Seed: seed(1)}, nil, true},
		{"penalties, bias, vocab limit", sample.Params{Temperature: 1, TopP: 0.95, TopK: 20, MinP: 0.02, PresencePenalty: 1.5, FrequencyPenalty: 0.3,
			RepetitionPenalty: 1.1, LogitBias: map[int]float32{5: 3, 7: -100}, VocabLimit: V - 100, Seed: seed(2)}, nil, true},
		{"greedy, logprobs", sample.Params{Logprobs: true, TopLogprobs: 5}, nil, true},
		{"sampled, 20 alternatives", sample.Params{Temperature: 0.7, TopK: 20, Seed: seed(6), TopLogprobs: 20, PresencePenalty: 0.5}, nil, true},
		{"top-k off (host)", sample.Params{Temperature: 0.7, Seed: seed(9), Logprobs: true}, nil, false},
	} {
		req := runner.Request{Prompt: prompt, MaxTokens: 10, Sampling: c.p, StopIDs: c.stops, NoCache: true}
		want := generate(t, host, req)
		sampledToks := generateTokens(t, hostOnly{gpu}, req)
		before := n
		gotToks := generateTokens(t, gpu, req)
		got, sampled := ids(gotToks), ids(sampledToks)
		if !slices.Equal(got, sampled) {
			t.Fatalf("%s: the device chose %v, engine/sample from the same logits %v", c.name, got, sampled)
		}
		for i, tok := range gotToks {
			h := sampledToks[i]
			if d := math.Abs(float64(tok.Logprob - h.Logprob)); d > 2e-6*max(1, math.Abs(float64(h.Logprob))) || len(tok.Top) != len(h.Top) {
				t.Fatalf("%s: token %d: logprob %g (%d alternatives), engine/sample %g (%d)", c.name, i, tok.Logprob, len(tok.Top), h.Logprob, len(h.Top))
			}
			for r, alt := range h.Top {
				if tok.Top[r].ID != alt.ID || math.Abs(float64(tok.Top[r].Logprob-alt.Logprob)) > 2e-6*max(1, math.Abs(float64(alt.Logprob))) {
					t.Fatalf("%s: token %d alternative %d: %+v, engine/sample %+v", c.name, i, r, tok.Top[r], alt)
				}
			}
		}
		if !slices.Equal(got, want) {
			t.Fatalf("%s: GPU %v, CPU %v", c.name, got, want)
		}
		if ran := n > before; ran != c.onDevice {
			t.Fatalf("%s: continued on the device %v, want %v", c.name, ran, c.onDevice)
		}
		if c.stops != nil && len(got) != slices.Index(greedy, c.stops[0])+1 {
			t.Fatalf("stop id: %v", got)
		}
	}
}

func generate(t *testing.T, b backend.Backend, req runner.Request) []int {
	t.Helper()
	return ids(generateTokens(t, b, req))
}

// generateTokens runs req through a runner on b and returns what it emitted.
func generateTokens(t *testing.T, b backend.Backend, req runner.Request) []runner.Token {
	t.Helper()
	var toks []runner.Token
	res, err := runner.New(b, runner.Options{}).Generate(context.Background(), req, func(tok runner.Token) (bool, error) {
		toks = append(toks, tok)
		return false, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(ids(toks), res.Tokens) {
		t.Fatalf("emitted %v, result %v", ids(toks), res.Tokens)
	}
	return toks
}

func ids(toks []runner.Token) []int {
	out := make([]int, len(toks))
	for i, t := range toks {
		out[i] = t.ID
	}
	return out
}

// TestOnDevice: what the step's sampler runs (seeded, greedy or a top-k it sorts whole, up to 20
// logprob alternatives) and what it leaves to the host.
func TestOnDevice(t *testing.T) {
	s := uint64(1)
	for _, c := range []struct {
		p    sample.Params
		want bool
	}{
		{sample.Params{Seed: &s}, true},
		{sample.Params{Temperature: 1, TopK: 20, Seed: &s}, true},
		{sample.Params{Temperature: 1, TopK: 1024, Seed: &s}, true},
		{sample.Params{Temperature: 1, TopK: 1025, Seed: &s}, false},
		{sample.Params{Temperature: 1, Seed: &s}, false}, // top-k off: more candidates than it sorts
		{sample.Params{Temperature: 1, TopK: 20}, false}, // no seed
		{sample.Params{TopK: 20, Seed: &s, TopLogprobs: 2}, true},
		{sample.Params{Seed: &s, Logprobs: true}, true},
		{sample.Params{Seed: &s, TopLogprobs: 21}, false},
	} {
		if got := onDevice(c.p); got != c.want {
			t.Errorf("%+v: on device %v, want %v", c.p, got, c.want)
		}
	}
}
