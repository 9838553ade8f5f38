package runner

import (
	"context"
	"errors"
	"slices"
	"sync/atomic"
	"testing"

	"github.com/lilyformac/lily/engine/backend"
	"github.com/lilyformac/lily/engine/cpu"
	"github.com/lilyformac/lily/engine/model"
	"github.com/lilyformac/lily/engine/sample"
)

func tinyBackend(t *testing.T) *cpu.Model {
	t.Helper()
	w, err := model.Load("../../testdata/golden/tiny-a")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	return cpu.New(w)
}

func prompt(n, salt int) []int {
	p := make([]int, n)
	for i := range p {
		p[i] = (i*37 + salt*11 + 5) % 1000
	}
	return p
}

func collect(t *testing.T, r *Runner, req Request) ([]int, Result) {
	t.Helper()
	var ids []int
	res, err := r.Generate(context.Background(), req, func(tok Token) (bool, error) {
		ids = append(ids, tok.ID)
		return false, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(ids, res.Tokens) {
		t.Fatalf("emitted %v, result %v", ids, res.Tokens)
	}
	return ids, res
}

// TestCachedEqualsUncached: reusing snapshots gives exactly the output of a fresh run, for greedy
// and for seeded sampling, for a repeated prompt and for a prompt extending an earlier conversation.
func TestCachedEqualsUncached(t *testing.T) {
	m := tinyBackend(t)
	seed := uint64(11)
	for _, params := range []sample.Params{{}, {Temperature: 0.9, TopP: 0.95, TopK: 20, Seed: &seed}} {
		cold := New(m, Options{}) // no cache
		warm := New(m, Options{CacheBytes: 1 << 30, PrefillSlice: 7})
		p := prompt(70, 1)
		req := Request{Prompt: p, MaxTokens: 12, Sampling: params}
		want, _ := collect(t, cold, req)
		got, res := collect(t, warm, req)
		if !slices.Equal(got, want) || res.CachedTokens != 0 {
			t.Fatalf("first run: %v (cached %d), want %v", got, res.CachedTokens, want)
		}
		got, res = collect(t, warm, req)
		if !slices.Equal(got, want) || res.CachedTokens != len(p) {
			t.Fatalf("repeat: %v (cached %d), want %v (cached %d)", got, res.CachedTokens, want, len(p))
		}
		// A follow-up turn: the conversation so far plus new user tokens.
		next := append(append(slices.Clone(p), want[:len(want)-1]...), prompt(9, 2)...)
		req2 := Request{Prompt: next, MaxTokens: 10, Sampling: params}
		want2, _ := collect(t, cold, req2)
		got2, res2 := collect(t, warm, req2)
		if !slices.Equal(got2, want2) {
			t.Fatalf("follow-up: %v, want %v", got2, want2)
		}
		if res2.CachedTokens != len(p)+len(want)-1 {
			t.Fatalf("follow-up reused %d tokens, want %d (prompt + generation)", res2.CachedTokens, len(p)+len(want)-1)
		}
	}
}

func TestCacheBudgetEvictsLRU(t *testing.T) {
	m := tinyBackend(t)
	probe := New(m, Options{CacheBytes: 1 << 30})
	collect(t, probe, Request{Prompt: prompt(20, 9), MaxTokens: 1})
	one := probe.Cache().Stats().Bytes
	r := New(m, Options{CacheBytes: one*2 + one/2}) // room for two prompt snapshots
	for salt := range 3 {
		collect(t, r, Request{Prompt: prompt(20, salt), MaxTokens: 1})
	}
	st := r.Cache().Stats()
	if st.Entries != 2 || st.Bytes > st.Budget || st.Evictions != 1 {
		t.Fatalf("stats %+v: want 2 entries within budget after 1 eviction", st)
	}
	_, res := collect(t, r, Request{Prompt: prompt(20, 0), MaxTokens: 1})
	if res.CachedTokens != 0 {
		t.Fatal("the least recently used entry was not evicted")
	}
	_, res = collect(t, r, Request{Prompt: prompt(20, 2), MaxTokens: 1})
	if res.CachedTokens != 20 {
		t.Fatalf("recent entry missing: cached %d", res.CachedTokens)
	}
}

func TestCancelStopsWithinOneToken(t *testing.T) {
	m := tinyBackend(t)
	r := New(m, Options{})
	ctx, cancel := context.WithCancel(context.Background())
	n := 0
	_, err := r.Generate(ctx, Request{Prompt: prompt(10, 3), MaxTokens: 50}, func(Token) (bool, error) {
		n++
		if n == 3 {
			cancel()
		}
		return false, nil
	})
	if !errors.Is(err, context.Canceled) || n != 3 {
		t.Fatalf("err %v after %d tokens, want context.Canceled after 3", err, n)
	}
	// The runner is free again.
	collect(t, r, Request{Prompt: prompt(10, 3), MaxTokens: 2})
}

func TestStopsAndLimits(t *testing.T) {
	m := tinyBackend(t)
	r := New(m, Options{Context: 64})
	free, _ := collect(t, r, Request{Prompt: prompt(10, 4), MaxTokens: 8})
	ids, res := collect(t, r, Request{Prompt: prompt(10, 4), MaxTokens: 8, StopIDs: []int{free[2]}})
	if res.FinishReason != "stop" || len(ids) != slices.Index(free, free[2])+1 {
		t.Fatalf("stop id: %v %q (free run %v)", ids, res.FinishReason, free)
	}
	ids, res = collect(t, r, Request{Prompt: prompt(10, 4), MaxTokens: 5})
	if res.FinishReason != "length" || len(ids) != 5 {
		t.Fatalf("length: %v %q", ids, res.FinishReason)
	}
	emitted := 0
	res, err := r.Generate(context.Background(), Request{Prompt: prompt(10, 4), MaxTokens: 8}, func(Token) (bool, error) {
		emitted++
		return emitted == 2, nil
	})
	if err != nil || res.FinishReason != "stop" || len(res.Tokens) != 2 {
		t.Fatalf("caller stop: %v %+v", err, res)
	}
	if _, err := r.Generate(context.Background(), Request{Prompt: prompt(60, 4), MaxTokens: 8}, nil); err == nil {
		t.Fatal("prompt + max tokens beyond the context accepted")
	}
	if _, err := r.Generate(context.Background(), Request{Prompt: prompt(5, 4), MaxTokens: 2, Sampling: sample.Params{TopP: 2}}, nil); err == nil {
		t.Fatal("invalid sampling parameters accepted")
	}
}

// TestCheckpointsServeLaterTurns: a prompt that diverges from an earlier one after a checkpoint
// reuses the state saved there, to the token, with output equal to a run without the cache; the
// periodic checkpoints of a long prefill serve an edit in its middle.
func TestCheckpointsServeLaterTurns(t *testing.T) {
	m := tinyBackend(t)
	seed := uint64(5)
	for _, params := range []sample.Params{{}, {Temperature: 0.8, TopK: 20, Seed: &seed}} {
		cold := New(m, Options{})
		warm := New(m, Options{CacheBytes: 1 << 30, PrefillSlice: 7, CheckpointEvery: 16})
		p1 := prompt(60, 1)
		collect(t, warm, Request{Prompt: p1, MaxTokens: 4, Sampling: params, Checkpoints: []int{45, 20, 45, 0, 60, 99}})
		for _, c := range []struct{ shared, want int }{{45, 45}, {20, 20}, {40, 32}, {17, 16}, {10, 0}} {
			p := append(slices.Clone(p1[:c.shared]), prompt(15, 7)...)
			req := Request{Prompt: p, MaxTokens: 6, Sampling: params, NoCache: false}
			want, _ := collect(t, cold, req)
			got, res := collect(t, warm, req)
			if res.CachedTokens != c.want || !slices.Equal(got, want) {
				t.Fatalf("%+v: cached %d (want %d), output %v (want %v)", c, res.CachedTokens, c.want, got, want)
			}
		}
	}
}

// TestExactHitOnGenerationEnd: a prompt equal to an earlier prompt plus all but the last token
// generated from it needs no prefill, and its first token is that last token (greedy).
func TestExactHitOnGenerationEnd(t *testing.T) {
	r := New(tinyBackend(t), Options{CacheBytes: 1 << 30})
	p := prompt(30, 3)
	gen, _ := collect(t, r, Request{Prompt: p, MaxTokens: 6})
	seq := append(slices.Clone(p), gen[:len(gen)-1]...)
	next, res := collect(t, r, Request{Prompt: seq, MaxTokens: 1})
	if res.CachedTokens != len(seq) || next[0] != gen[len(gen)-1] {
		t.Fatalf("cached %d of %d, next %d, want %d", res.CachedTokens, len(seq), next[0], gen[len(gen)-1])
	}
}

// TestOnLogitsSeesEveryChoice: the hook sees one row per generated token, in order, the row the
// greedy choice was made from.
func TestOnLogitsSeesEveryChoice(t *testing.T) {
	r := New(tinyBackend(t), Options{})
	var steps []int
	var argmaxes []int
	req := Request{Prompt: prompt(12, 2), MaxTokens: 5, OnLogits: func(step int, row []float32) error {
		steps = append(steps, step)
		best := 0
		for i, v := range row {
			if v > row[best] {
				best = i
			}
		}
		argmaxes = append(argmaxes, best)
		return nil
	}}
	ids, _ := collect(t, r, req)
	if !slices.Equal(steps, []int{0, 1, 2, 3, 4}) || !slices.Equal(argmaxes, ids) {
		t.Fatalf("steps %v, row argmaxes %v, tokens %v", steps, argmaxes, ids)
	}
	stop := errors.New("enough")
	req.OnLogits = func(step int, _ []float32) error {
		if step == 2 {
			return stop
		}
		return nil
	}
	if _, err := r.Generate(context.Background(), req, func(Token) (bool, error) { return false, nil }); !errors.Is(err, stop) {
		t.Fatalf("hook error: %v", err)
	}
}

// TestHoldSpansEachGeneration: the hold is taken once a generation starts (before its first
// step: the steps record it) and released when it ends, also when it fails.
func TestHoldSpansEachGeneration(t *testing.T) {
	var held, taken atomic.Int32
	hold := func(string) func() { taken.Add(1); held.Add(1); return func() { held.Add(-1) } }
	r := New(heldSteps{tinyBackend(t), &held, t}, Options{Hold: hold})
	_, err := r.Generate(context.Background(), Request{Prompt: prompt(5, 1), MaxTokens: 3}, func(Token) (bool, error) { return false, nil })
	if n := held.Load(); err != nil || n != 0 || taken.Load() != 1 {
		t.Fatalf("after: err %v, held %d, taken %d times", err, n, taken.Load())
	}
	r.Generate(context.Background(), Request{Prompt: prompt(5, 1), MaxTokens: 3}, func(Token) (bool, error) { return false, errors.New("client gone") })
	if n := held.Load(); n != 0 {
		t.Fatalf("held %d after a failed generation", n)
	}
}

// TestCancelledBeforeAFullHit: a request whose whole prompt is cached, arriving cancelled, emits
// nothing, whether it is withdrawn before admission or admitted with its full hit first.
func TestCancelledBeforeAFullHit(t *testing.T) {
	r := New(tinyBackend(t), Options{CacheBytes: 1 << 30})
	p := prompt(12, 6)
	collect(t, r, Request{Prompt: p, MaxTokens: 2})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	emitted := 0
	res, err := r.Generate(ctx, Request{Prompt: p, MaxTokens: 2}, func(Token) (bool, error) { emitted++; return false, nil })
	if !errors.Is(err, context.Canceled) || emitted != 0 || res.CachedTokens != 0 && res.CachedTokens != len(p) {
		t.Fatalf("err %v, %d emitted, cached %d", err, emitted, res.CachedTokens)
	}
}

// heldSteps fails the test when a step runs without the hold.
type heldSteps struct {
	*cpu.Model
	held *atomic.Int32
	t    *testing.T
}

func (h heldSteps) NewSession() backend.Session { return heldSession{h.Model.NewSession(), h} }

type heldSession struct {
	backend.Session
	h heldSteps
}

func (s heldSession) Forward(tokens []int, all bool) ([][]float32, error) {
	if n := s.h.held.Load(); n != 1 {
		s.h.t.Errorf("a step ran with the hold taken %d times", n)
	}
	return s.Session.Forward(tokens, all)
}

// closeCounting counts the sessions its backend started and closed.
type closeCounting struct {
	*cpu.Model
	opened, closed *int
}

func (c closeCounting) NewSession() backend.Session {
	*c.opened++
	return closingSession{c.Model.NewSession(), c.closed}
}

type closingSession struct {
	backend.Session
	closed *int
}

func (s closingSession) Close() { *s.closed++; s.Session.Close() }

// TestCancelledPrefillClosesSession: a request cancelled during its prefill returns the context's
// error and closes the session it started (it once closed a nil one and panicked).
func TestCancelledPrefillClosesSession(t *testing.T) {
	var opened, closed int
	r := New(closeCounting{tinyBackend(t), &opened, &closed}, Options{PrefillSlice: 4})
	ctx, cancel := context.WithCancel(context.Background())
	calls := 0
	_, err := r.Generate(ctx, Request{Prompt: prompt(40, 3), MaxTokens: 4, Progress: func(done, total int) {
		if calls++; calls == 2 {
			cancel()
		}
	}}, func(Token) (bool, error) { return false, nil })
	if !errors.Is(err, context.Canceled) || opened != 1 || closed != 1 {
		t.Fatalf("err %v, sessions opened %d, closed %d", err, opened, closed)
	}
}

type forceSteer struct {
	at, id int // force id at step at
	step   int
	seen   []int
}

func (f *forceSteer) Next() (int, bool, []uint64) {
	if f.step == f.at {
		return f.id, true, nil
	}
	return 0, false, nil
}
func (f *forceSteer) Accept(id int) error { f.step++; f.seen = append(f.seen, id); return nil }

// TestSteerForcesTokens: a steered generation emits the forced token at its step, tells the
// steer every token, and continues from the forced token (the free run differs after it).
func TestSteerForcesTokens(t *testing.T) {
	m := tinyBackend(t)
	r := New(m, Options{Context: 64})
	free, _ := collect(t, r, Request{Prompt: prompt(10, 4), MaxTokens: 6})
	forced := (free[2] + 1) % m.Config().VocabSize
	st := &forceSteer{at: 2, id: forced}
	ids, _ := collect(t, r, Request{Prompt: prompt(10, 4), MaxTokens: 6, Steer: st})
	if !slices.Equal(ids[:2], free[:2]) || ids[2] != forced || !slices.Equal(st.seen, ids) {
		t.Fatalf("steered %v (steer saw %v), free %v", ids, st.seen, free)
	}
}
