package runner

import (
	"context"
	"slices"
	"sync"
	"testing"

	"github.com/lilyformac/lily/engine/sample"
)

// repeating biases the tiny model toward a few tokens, so its output repeats (its random weights
// rarely repeat text by themselves) and the suffix drafter finds continuations to draft.
var repeating = map[int]float32{17: 20, 93: 20}

// draftRequests are four requests of different kinds: greedy, seeded T 0.8 with top-p,
// penalties and logprobs, greedy with a steer that forces a token and sees every one, and
// greedy with top logprobs; all but the steered one biased to repeat.
func draftRequests() []Request {
	seed := uint64(11)
	return []Request{
		{Prompt: prompt(12, 1), MaxTokens: 24, Sampling: sample.Params{LogitBias: repeating}},
		{Prompt: prompt(30, 2), MaxTokens: 20, Sampling: sample.Params{Temperature: 0.8, TopP: 0.9, PresencePenalty: 0.3, RepetitionPenalty: 1.1,
			Seed: &seed, Logprobs: true, LogitBias: repeating}},
		{Prompt: prompt(7, 3), MaxTokens: 16, Steer: &forceSteer{at: 5, id: 17}, Sampling: sample.Params{LogitBias: repeating}},
		{Prompt: prompt(20, 4), MaxTokens: 18, Sampling: sample.Params{TopLogprobs: 3, LogitBias: repeating}, StopIDs: []int{93}},
	}
}

// TestDraftsChangeNothing: the four requests run at once with drafts always verified give
// exactly the tokens, logprobs and finish reasons they give with drafting off, and drafts were
// verified and accepted (the output repeats); each request alone with drafts gives the same too.
func TestDraftsChangeNothing(t *testing.T) {
	b := tinyBackend(t)
	run4 := func(mode string) ([]run, DraftStats) {
		r := New(b, Options{PrefillSlice: 8, Parallel: 4, Drafts: DraftOptions{Mode: mode}})
		reqs := draftRequests()
		out := make([]run, len(reqs))
		var wg sync.WaitGroup
		for i, req := range reqs {
			wg.Go(func() { out[i] = generate(context.Background(), r, req) })
		}
		wg.Wait()
		return out, r.DraftStats()
	}
	plain, off := run4(DraftsOff)
	drafted, st := run4(DraftsAlways)
	for i := range plain {
		p, d := plain[i], drafted[i]
		if d.err != nil || p.err != nil || !slices.Equal(p.ids, d.ids) || !slices.Equal(p.lps, d.lps) || p.res.FinishReason != d.res.FinishReason {
			t.Errorf("request %d: with drafts %v %v %q (%v); without %v %v %q (%v)", i, d.ids, d.lps, d.res.FinishReason, d.err, p.ids, p.lps, p.res.FinishReason, p.err)
		}
	}
	t.Logf("drafts: %+v", st)
	if off.Steps != 0 || st.Steps == 0 || st.Accepted == 0 || st.Tokens != st.Steps+st.Accepted {
		t.Errorf("drafting off %+v; always %+v: want verify steps with accepted drafts", off, st)
	}
	alone := New(b, Options{PrefillSlice: 8, Drafts: DraftOptions{Mode: DraftsAlways}})
	for i, req := range draftRequests() {
		if got := generate(context.Background(), alone, req); !slices.Equal(got.ids, plain[i].ids) || !slices.Equal(got.lps, plain[i].lps) {
			t.Errorf("request %d alone with drafts: %v, without %v", i, got.ids, plain[i].ids)
		}
	}
}

// TestDraftsAutoOnLinearCost: under the CPU backend's cost (every row costs the same) the gate
// never drafts, however well the drafter would do.
func TestDraftsAutoOnLinearCost(t *testing.T) {
	r := New(tinyBackend(t), Options{PrefillSlice: 8, Drafts: DraftOptions{Mode: DraftsAuto}})
	generate(context.Background(), r, draftRequests()[0])
	if st := r.DraftStats(); st.Steps != 0 {
		t.Fatalf("auto drafted on the CPU: %+v", st)
	}
}

// TestDraftsCacheHoldsCommittedState: a generation with drafts leaves in the prefix cache the
// state of exactly its committed tokens: a request continuing its conversation (prompt + output)
// gets the same tokens from the cache as from a fresh prefill.
func TestDraftsCacheHoldsCommittedState(t *testing.T) {
	b := tinyBackend(t)
	req := draftRequests()[0]
	cached := New(b, Options{PrefillSlice: 8, CacheBytes: 64 << 20, Drafts: DraftOptions{Mode: DraftsAlways}})
	first := generate(context.Background(), cached, req)
	next := Request{Prompt: append(slices.Clone(req.Prompt), first.ids...), MaxTokens: 8}
	got := generate(context.Background(), cached, next)
	want := generate(context.Background(), New(b, Options{PrefillSlice: 8}), next)
	if got.res.CachedTokens == 0 || !slices.Equal(got.ids, want.ids) || !slices.Equal(got.lps, want.lps) {
		t.Fatalf("continued from the cache (%d cached): %v; fresh %v", got.res.CachedTokens, got.ids, want.ids)
	}
	if st := cached.DraftStats(); st.Accepted == 0 {
		t.Fatalf("no draft accepted: %+v", st)
	}
}
