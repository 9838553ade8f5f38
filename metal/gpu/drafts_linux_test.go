//go:build linux

package gpu

import (
	"context"
	"slices"
	"sync"
	"testing"

	"github.com/lilyformac/lily/engine/runner"
	"github.com/lilyformac/lily/engine/sample"
)

// TestDraftsOnEmu: on the emulated GPU, two requests at once (greedy, and seeded T 0.8 with
// top-p, a penalty and logprobs), both biased to repeat, give the same tokens and logprobs with
// drafts always verified (as groups of rows of the multi-row steps, then Keep) as with drafting
// off, and drafts were accepted.
func TestDraftsOnEmu(t *testing.T) {
	_, w := goldenWeights(t, "../../testdata/golden/tiny-b")
	e := newEmu(t, w, EmuOptions{GPUOptions: GPUOptions{MaxCtx: 96, Parallel: 4}})
	defer e.Close()
	seed := uint64(3)
	bias := map[int]float32{17: 20, 93: 20}
	reqs := []runner.Request{
		{Prompt: []int{5, 9, 33, 70, 2, 8}, MaxTokens: 16, Sampling: sample.Params{LogitBias: bias}},
		{Prompt: []int{11, 4, 90, 61}, MaxTokens: 14, Sampling: sample.Params{Temperature: 0.8, TopP: 0.9, PresencePenalty: 0.2, Seed: &seed, Logprobs: true, LogitBias: bias}},
	}
	type out struct {
		ids []int
		lps []float32
	}
	run := func(mode string) ([]out, runner.DraftStats) {
		r := runner.New(e, runner.Options{Parallel: 2, Drafts: runner.DraftOptions{Mode: mode}})
		res := make([]out, len(reqs))
		var wg sync.WaitGroup
		for i, req := range reqs {
			wg.Go(func() {
				_, err := r.Generate(context.Background(), req, func(tok runner.Token) (bool, error) {
					res[i].ids, res[i].lps = append(res[i].ids, tok.ID), append(res[i].lps, tok.Logprob)
					return false, nil
				})
				if err != nil {
					t.Error(err)
				}
			})
		}
		wg.Wait()
		return res, r.DraftStats()
	}
	plain, _ := run(runner.DraftsOff)
	steps, rows := e.Batched()
	drafted, st := run(runner.DraftsAlways)
	steps2, rows2 := e.Batched()
	for i := range reqs {
		if !slices.Equal(plain[i].ids, drafted[i].ids) || !slices.Equal(plain[i].lps, drafted[i].lps) {
			t.Errorf("request %d: with drafts %v %v, without %v %v", i, drafted[i].ids, drafted[i].lps, plain[i].ids, plain[i].lps)
		}
	}
	t.Logf("drafts: %+v; %d multi-row steps of %d rows (off: %d of %d)", st, steps2-steps, rows2-rows, steps, rows)
	if st.Accepted == 0 || rows2-rows <= 2*(steps2-steps) {
		t.Errorf("no draft accepted, or none verified in multi-row steps: %+v", st)
	}
}

// TestDraftsAutoEndsBursts: with drafting auto, priced by the backend's own cost (the plan's
// model of grouped rows), a request on the emulated GPU starts on the device (a burst), the burst
// ends once the drafter has a proposal worth verifying, drafts are verified in multi-row steps
// and accepted, and the tokens are those of drafting off.
func TestDraftsAutoEndsBursts(t *testing.T) {
	_, w := goldenWeights(t, "../../testdata/golden/tiny-b")
	n := 0
	e := counted{newEmu(t, w, EmuOptions{GPUOptions: GPUOptions{MaxCtx: 96}}), &n}
	defer e.Close()
	req := runner.Request{Prompt: []int{5, 9, 33, 70, 2, 8}, MaxTokens: 40, Sampling: sample.Params{LogitBias: map[int]float32{17: 20, 93: 20}}}
	gen := func(o runner.DraftOptions) ([]int, runner.DraftStats) {
		r := runner.New(e, runner.Options{Drafts: o})
		var ids []int
		if _, err := r.Generate(context.Background(), req, func(tok runner.Token) (bool, error) { ids = append(ids, tok.ID); return false, nil }); err != nil {
			t.Fatal(err)
		}
		return ids, r.DraftStats()
	}
	plain, _ := gen(runner.DraftOptions{Mode: runner.DraftsOff})
	n = 0
	before, _ := e.Batched()
	got, st := gen(runner.DraftOptions{Mode: runner.DraftsAuto})
	steps, _ := e.Batched()
	t.Logf("%d bursts, %d multi-row steps; drafts %+v", n, steps-before, st)
	if !slices.Equal(got, plain) || n == 0 || st.Accepted == 0 || steps == before || e.Describe().DraftCost == nil {
		t.Fatalf("auto %v (%d bursts, %+v), off %v", got, n, st, plain)
	}
}
