//go:build linux

package gpu

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/lilyformac/lily/engine/backend"
	"github.com/lilyformac/lily/engine/model"
	"github.com/lilyformac/lily/engine/sample"
)

// greedy runs one session's greedy generation through ContinueRows (one row): from the token
// Forward left (NextToken), up to max tokens in all, ended early when onToken (may be nil) says
// stop. It returns every token, the first included.
func greedy(s *Session, ctx context.Context, max int, onToken func(id int) bool) ([]int, error) {
	seed := uint64(0)
	toks := []int{s.NextToken()}
	if onToken != nil && onToken(toks[0]) {
		max = 1 // the first token is consumed all the same
	}
	_, err := s.e.ContinueRows(ctx, []backend.GenRow{{Session: s, Params: sample.Params{Seed: &seed}, Generated: toks[:1], Max: max - 1,
		OnToken: func(c sample.Choice) (bool, error) {
			toks = append(toks, c.ID)
			return onToken != nil && onToken(c.ID), nil
		}}})
	return toks, err
}

// TestGenerate runs greedy generation on the device (ContinueRows, one row) on tiny-a after the
// prompt (one prefill, cloned per case): its tokens are HF's greedy ids and Forward-driven greedy
// decoding's; a stop ends it with that token; cancelling from onToken after k tokens returns
// exactly k; and the session afterwards has consumed every returned token (the state rule), so
// Forward continues correctly.
func TestGenerate(t *testing.T) {
	dir := "../../testdata/golden/tiny-a"
	g, _, decode := readGolden(t, dir)
	w, err := model.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	e := newEmu(t, w, EmuOptions{GPUOptions: GPUOptions{MaxCtx: 128, Pages: 16}}) // pages for the eight forks alive at once
	start := time.Now()
	base := e.NewSession().(*Session)
	if _, err := base.Forward(g.PromptIDs, false); err != nil {
		t.Fatal(err)
	}
	P, V := len(g.PromptIDs), g.VocabSize
	ctx := context.Background()

	// Full greedy run against HF, streaming order checked through onToken.
	full := fork(t, base)
	var streamed []int
	toks, err := greedy(full, ctx, len(g.GreedyIDs), func(id int) bool { streamed = append(streamed, id); return false })
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(toks, g.GreedyIDs) || !slices.Equal(streamed, toks) {
		t.Fatalf("greedy %v (streamed %v), HF greedy %v", toks, streamed, g.GreedyIDs)
	}
	if full.Pos() != P+len(toks) {
		t.Fatalf("pos %d after generating %d tokens from %d, want every token consumed", full.Pos(), len(toks), P)
	}

	// Forward-driven greedy decoding (the GPU's argmax), consuming the same tokens: same ids,
	// same continuation and bit-identical logits after both.
	fwd := fork(t, base)
	var byForward []int
	for range len(g.GreedyIDs) {
		id := fwd.NextToken()
		byForward = append(byForward, id)
		if _, err := fwd.Forward([]int{id}, false); err != nil {
			t.Fatal(err)
		}
	}
	if !slices.Equal(byForward, toks) {
		t.Fatalf("Forward-driven greedy %v, greedy %v", byForward, toks)
	}
	if fwd.NextToken() != full.NextToken() {
		t.Fatalf("continuation: Forward %d, greedy %d", fwd.NextToken(), full.NextToken())
	}
	a, err := fwd.Forward([]int{7}, false)
	if err != nil {
		t.Fatal(err)
	}
	b, err := full.Forward([]int{7}, false)
	if err != nil {
		t.Fatal(err)
	}
	if d := maxAbsDiff(a[0], b[0]); d != 0 {
		t.Fatalf("after the same tokens, the generated session differs from Forward's by %g", d)
	}

	// A stop id ends generation with that token (first occurrence of greedy[3]).
	stop := g.GreedyIDs[3]
	if slices.Index(g.GreedyIDs, stop) != 3 {
		t.Fatal("tiny-a's greedy[3] occurs earlier")
	}
	s := fork(t, base)
	toks, err = greedy(s, ctx, 20, func(id int) bool { return id == 999999 || id == stop })
	if err != nil || !slices.Equal(toks, g.GreedyIDs[:4]) || s.Pos() != P+4 {
		t.Fatalf("stop id %d: tokens %v, pos %d, err %v; want %v, pos %d", stop, toks, s.Pos(), err, g.GreedyIDs[:4], P+4)
	}

	// Max ends it (nothing in flight then: the loop commits the last token's step itself).
	s = fork(t, base)
	toks, err = greedy(s, ctx, 2, nil)
	if err != nil || !slices.Equal(toks, g.GreedyIDs[:2]) || s.Pos() != P+2 || s.NextToken() != g.GreedyIDs[2] {
		t.Fatalf("maxTokens 2: tokens %v, pos %d, next %d, err %v", toks, s.Pos(), s.NextToken(), err)
	}

	// Cancel from onToken after k tokens: exactly k, ctx's error, and the session continues.
	const k = 3
	s = fork(t, base)
	cctx, cancel := context.WithCancel(ctx)
	n := 0
	toks, err = greedy(s, cctx, 20, func(int) bool {
		if n++; n == k {
			cancel()
		}
		return false
	})
	cancel()
	if !errors.Is(err, context.Canceled) || !slices.Equal(toks, g.GreedyIDs[:k]) || s.Pos() != P+k {
		t.Fatalf("cancel after %d: tokens %v, pos %d, err %v", k, toks, s.Pos(), err)
	}
	if s.NextToken() != g.GreedyIDs[k] {
		t.Fatalf("after cancel: next token %d, HF %d", s.NextToken(), g.GreedyIDs[k])
	}
	out, err := s.Forward([]int{g.GreedyIDs[k]}, false)
	if err != nil {
		t.Fatal(err)
	}
	if d := maxAbsDiff(out[0], decode[k*V:(k+1)*V]); d > tolerance || argmax(out[0]) != g.GreedyIDs[k+1] {
		t.Fatalf("Forward after cancel: max |logit − HF| %.3g, greedy %d (HF %d)", d, argmax(out[0]), g.GreedyIDs[k+1])
	}
	// Generation continues after the cancelled run.
	toks, err = greedy(s, ctx, 3, nil)
	if err != nil || !slices.Equal(toks, g.GreedyIDs[k+1:k+4]) {
		t.Fatalf("greedy after cancel: %v, %v; HF %v", toks, err, g.GreedyIDs[k+1:k+4])
	}

	// An already-cancelled context returns the pending token only, consumed.
	s = fork(t, base)
	dead, kill := context.WithCancel(ctx)
	kill()
	toks, err = greedy(s, dead, 20, nil)
	if !errors.Is(err, context.Canceled) || !slices.Equal(toks, g.GreedyIDs[:1]) || s.Pos() != P+1 {
		t.Fatalf("cancelled context: tokens %v, pos %d, err %v", toks, s.Pos(), err)
	}
	t.Logf("tiny-a: %v", time.Since(start))
}

// TestGenerateLimits: no prompt is an error; the end of the KV cache ends generation with the
// tokens that fit, and a full one is not run on the device (the host's Forward says why).
func TestGenerateLimits(t *testing.T) {
	dir := "../../testdata/golden/tiny-a"
	g, w := goldenWeights(t, dir)
	e := newEmu(t, w, EmuOptions{GPUOptions: GPUOptions{MaxCtx: 8}})
	s := e.NewSession().(*Session)
	seed := uint64(0)
	row := backend.GenRow{Session: s, Params: sample.Params{Seed: &seed}, Generated: []int{1}, Max: 4}
	if _, err := e.ContinueRows(context.Background(), []backend.GenRow{row}); err == nil || errors.Is(err, backend.ErrNotOnDevice) {
		t.Fatalf("generation without a prompt: %v", err)
	}
	if _, err := s.Forward(g.PromptIDs[:5], false); err != nil {
		t.Fatal(err)
	}
	toks, err := greedy(s, context.Background(), 10, nil)
	if err != nil || len(toks) != 3 || s.Pos() != 8 {
		t.Fatalf("full cache: tokens %v, pos %d, err %v", toks, s.Pos(), err)
	}
	if _, err := greedy(s, context.Background(), 1, nil); !errors.Is(err, backend.ErrNotOnDevice) || s.Pos() != 8 {
		t.Fatalf("generation on a full cache: %v, pos %d", err, s.Pos())
	}
}

// fork continues from s's state in another session, as a prefix-cache hit does (Save, Restore).
func fork(t *testing.T, s *Session) *Session {
	t.Helper()
	snap, err := s.Save()
	if err != nil {
		t.Fatal(err)
	}
	r, err := snap.Restore()
	snap.Close() // the session keeps the pages it shares
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Close)
	return r.(*Session)
}
