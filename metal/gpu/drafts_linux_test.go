//go:build linux

package gpu

import (
	"context"
	"slices"
	"sync"
	"testing"

	"github.com/lilyformac/lily/engine/draft"
	"github.com/lilyformac/lily/engine/runner"
	"github.com/lilyformac/lily/engine/sample"
)

// TestDraftsOnEmu: on the emulated GPU, two requests at once (greedy, and seeded T 0.8 with
// top-p, a penalty and logprobs), both biased to repeat, give the same tokens and logprobs with
// drafts always verified (Session.Verify and Keep) as with drafting off, and drafts were
// accepted.
func TestDraftsOnEmu(t *testing.T) {
	_, w := goldenWeights(t, "../../testdata/golden/tiny-b")
	e := newEmu(t, w, EmuOptions{GPUOptions: GPUOptions{MaxCtx: 96, Parallel: 2}})
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
	drafted, st := run(runner.DraftsAlways)
	for i := range reqs {
		if !slices.Equal(plain[i].ids, drafted[i].ids) || !slices.Equal(plain[i].lps, drafted[i].lps) {
			t.Errorf("request %d: with drafts %v %v, without %v %v", i, drafted[i].ids, drafted[i].lps, plain[i].ids, plain[i].lps)
		}
	}
	t.Logf("drafts: %+v", st)
	if st.Accepted == 0 {
		t.Errorf("no draft accepted: %+v", st)
	}
}

// cheapRows prices a step as if a sequence's extra rows cost a twentieth of its first: the cost
// gate then drafts wherever the drafter's estimates promise anything (a stand-in for the multi-row
// verify, which the GPU backend does not have yet: its rows cost what plain steps do).
type cheapRows struct{}

func (cheapRows) Step(groups []draft.Group) float64 {
	c := 0.0
	for _, g := range groups {
		c += 1 + 0.05*float64(g.Rows-1)
	}
	return c
}

// TestDraftsAutoEndsBursts: with drafting auto under a cost that favours it, a request on the
// emulated GPU starts on the device (a burst), the burst ends once the drafter has a proposal
// worth verifying, drafts are verified and accepted on the host's steps, and the tokens are those
// of drafting off.
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
	got, st := gen(runner.DraftOptions{Mode: runner.DraftsAuto, Cost: cheapRows{}})
	t.Logf("%d bursts; drafts %+v", n, st)
	if !slices.Equal(got, plain) || n == 0 || st.Accepted == 0 {
		t.Fatalf("auto %v (%d bursts, %+v), off %v", got, n, st, plain)
	}
}
