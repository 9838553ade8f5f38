package runner

import (
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lilyformac/lily/engine/backend"
	"github.com/lilyformac/lily/engine/cpu"
	"github.com/lilyformac/lily/engine/sample"
)

// stepLog is a CPU backend that records every Forward call in order (which session, how many
// tokens) and counts sessions opened and closed.
type stepLog struct {
	*cpu.Model
	mu             sync.Mutex
	calls          []call
	opened, closed atomic.Int32
}

type call struct{ sess, n int }

func (l *stepLog) NewSession() backend.Session {
	id := int(l.opened.Add(1))
	return &loggedSession{l.Model.NewSession(), l, id}
}

type loggedSession struct {
	backend.Session
	l  *stepLog
	id int
}

func (s *loggedSession) Forward(tokens []int, all bool) ([][]float32, error) {
	s.l.mu.Lock()
	s.l.calls = append(s.l.calls, call{s.id, len(tokens)})
	s.l.mu.Unlock()
	return s.Session.Forward(tokens, all)
}

func (s *loggedSession) Close() { s.l.closed.Add(1); s.Session.Close() }

func (s *loggedSession) Save() (backend.Snapshot, error) {
	sn, err := s.Session.Save()
	if err != nil {
		return nil, err
	}
	return loggedSnapshot{sn, s.l}, nil
}

// loggedSnapshot restores into logged sessions, so restored sessions are counted too.
type loggedSnapshot struct {
	backend.Snapshot
	l *stepLog
}

func (sn loggedSnapshot) Restore() (backend.Session, error) {
	sess, err := sn.Snapshot.Restore()
	if err != nil {
		return nil, err
	}
	return &loggedSession{sess, sn.l, int(sn.l.opened.Add(1))}, nil
}

// run is one request's outcome with its logprobs.
type run struct {
	ids []int
	lps []float32
	res Result
	err error
}

func generate(ctx context.Context, r *Runner, req Request) run {
	var out run
	out.res, out.err = r.Generate(ctx, req, func(tok Token) (bool, error) {
		out.ids, out.lps = append(out.ids, tok.ID), append(out.lps, tok.Logprob)
		return false, nil
	})
	return out
}

// TestBatchInvariance: four requests of different prompts and lengths, greedy and seeded
// sampling at T 0.8, run at once get exactly the tokens and logprobs each gets alone, and did
// run at once.
func TestBatchInvariance(t *testing.T) {
	l := &stepLog{Model: tinyBackend(t)}
	seed := uint64(7)
	reqs := []Request{
		{Prompt: prompt(9, 1), MaxTokens: 14},
		{Prompt: prompt(40, 2), MaxTokens: 9, Sampling: sample.Params{Temperature: 0.8, Seed: &seed, Logprobs: true}},
		{Prompt: prompt(3, 3), MaxTokens: 12, Sampling: sample.Params{Temperature: 0.8, TopP: 0.9, Seed: &seed}},
		{Prompt: prompt(25, 4), MaxTokens: 10},
	}
	solo := New(l, Options{PrefillSlice: 8})
	var want []run
	for _, req := range reqs {
		want = append(want, generate(context.Background(), solo, req))
	}
	l.calls = nil
	batched := New(l, Options{PrefillSlice: 8, Parallel: 4})
	got := make([]run, len(reqs))
	var wg sync.WaitGroup
	for i, req := range reqs {
		wg.Go(func() { got[i] = generate(context.Background(), batched, req) })
	}
	wg.Wait()
	for i := range reqs {
		if got[i].err != nil || !slices.Equal(got[i].ids, want[i].ids) || !slices.Equal(got[i].lps, want[i].lps) {
			t.Fatalf("request %d: batched %v %v (%v), alone %v %v", i, got[i].ids, got[i].lps, got[i].err, want[i].ids, want[i].lps)
		}
	}
	if n := maxInterleaved(l.calls); n < 2 {
		t.Fatalf("the requests never ran at once (at most %d sessions between two steps of one)", n)
	}
}

// maxInterleaved is the most distinct sessions that ran between two consecutive calls of one
// session, plus it.
func maxInterleaved(calls []call) int {
	best := 0
	last := map[int]int{}
	for i, c := range calls {
		if j, ok := last[c.sess]; ok {
			seen := map[int]bool{}
			for _, d := range calls[j:i] {
				seen[d.sess] = true
			}
			best = max(best, len(seen))
		}
		last[c.sess] = i
	}
	return best
}

// TestPrefillNeverStallsStreams: while a 3,000-token prompt prefills, a running stream gets a
// token between every two of its slices, so it waits at most one slice plus a step.
func TestPrefillNeverStallsStreams(t *testing.T) {
	l := &stepLog{Model: tinyBackend(t)}
	r := New(l, Options{PrefillSlice: 128, Parallel: 2, CheckpointEvery: -1})
	started := make(chan struct{})
	streamDone := make(chan run)
	go func() {
		first := true
		var out run
		out.res, out.err = r.Generate(context.Background(), Request{Prompt: prompt(5, 1), MaxTokens: 400}, func(tok Token) (bool, error) {
			if first {
				first = false
				close(started)
			}
			out.ids = append(out.ids, tok.ID)
			return false, nil
		})
		streamDone <- out
	}()
	<-started
	long := generate(context.Background(), r, Request{Prompt: prompt(3000, 2), MaxTokens: 2})
	stream := <-streamDone
	if long.err != nil || stream.err != nil {
		t.Fatal(long.err, stream.err)
	}
	slices, decodes, gapMax, gap := 0, 0, 0, 0
	for _, c := range l.calls {
		switch {
		case c.sess == 1:
			decodes++
			gap = 0
		case c.n > 1:
			slices++
			if gap++; gap > gapMax {
				gapMax = gap
			}
		}
	}
	if slices < 3000/128 || gapMax > 1 {
		t.Fatalf("%d prefill slices; the stream waited up to %d slices between two of its steps", slices, gapMax)
	}
	if len(stream.ids) != 400 {
		t.Fatalf("the stream got %d tokens", len(stream.ids))
	}
}

// TestManyRequestsLeaveNothingBehind: 200 concurrent requests, some cancelled at random points
// (before admission, while prefilling, while decoding), some stopped by their callers, leave no
// session open and no sequence in the loop; the cache stays within its budget.
func TestManyRequestsLeaveNothingBehind(t *testing.T) {
	l := &stepLog{Model: tinyBackend(t)}
	r := New(l, Options{PrefillSlice: 16, Parallel: 4, CacheBytes: 8 << 20})
	var wg sync.WaitGroup
	var failures atomic.Int32
	for i := range 200 {
		rng := rand.New(rand.NewPCG(uint64(i), 3))
		wg.Go(func() {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			if rng.IntN(3) == 0 {
				time.AfterFunc(time.Duration(rng.IntN(30))*time.Millisecond, cancel)
			}
			stopAt := rng.IntN(12)
			n := 0
			// Prompts share prefixes, so the cache hits and is written while others run.
			p := append(prompt(10+rng.IntN(4)*10, 1), prompt(1+rng.IntN(40), i)...)
			_, err := r.Generate(ctx, Request{Prompt: p, MaxTokens: 1 + rng.IntN(10)}, func(Token) (bool, error) {
				n++
				return n == stopAt, nil
			})
			if err != nil && !errors.Is(err, context.Canceled) {
				failures.Add(1)
			}
		})
	}
	wg.Wait()
	if f := failures.Load(); f > 0 {
		t.Fatalf("%d requests failed other than by cancellation", f)
	}
	if running, waiting := r.Load(); running != 0 || waiting != 0 {
		t.Fatalf("%d running, %d waiting after every request returned", running, waiting)
	}
	st := r.Cache().Stats()
	if open := l.opened.Load() - l.closed.Load(); int(open) != 0 {
		t.Fatalf("%d sessions left open (%d cache entries)", open, st.Entries)
	}
	if st.Bytes > 8<<20 {
		t.Fatalf("the cache holds %d bytes over its budget", st.Bytes)
	}
}

// roomFor is a CPU backend whose sequences share a pool of cap positions (Fits).
type roomFor struct {
	*stepLog
	cap int
}

func (r roomFor) Fits(positions []int) bool {
	n := 0
	for _, p := range positions {
		n += p
	}
	return n <= r.cap
}

// TestAdmitsOnlyWhatFits: a request whose memory is not there waits, in arrival order, until the
// running one ends; it still runs alone when only it could ever fit.
func TestAdmitsOnlyWhatFits(t *testing.T) {
	l := &stepLog{Model: tinyBackend(t)}
	r := New(roomFor{l, 80}, Options{Parallel: 4, PrefillSlice: 8})
	var wg sync.WaitGroup
	reqs := []Request{{Prompt: prompt(10, 1), MaxTokens: 40}, {Prompt: prompt(10, 2), MaxTokens: 40}, {Prompt: prompt(5, 3), MaxTokens: 3}}
	for i, req := range reqs {
		wg.Go(func() {
			if res := generate(context.Background(), r, req); res.err != nil {
				t.Errorf("request %d: %v", i, res.err)
			}
		})
		time.Sleep(20 * time.Millisecond) // arrival order
	}
	wg.Wait()
	last := func(sess int) int { // index of a session's last call
		i := -1
		for j, c := range l.calls {
			if c.sess == sess {
				i = j
			}
		}
		return i
	}
	first := func(sess int) int { return slices.IndexFunc(l.calls, func(c call) bool { return c.sess == sess }) }
	if first(2) < last(1) || first(3) < first(2) {
		t.Fatalf("sessions 2 and 3 started at calls %d and %d, session 1 ended at %d: the second request did not wait for room, or the third jumped it", first(2), first(3), last(1))
	}
	alone := New(roomFor{l, 10}, Options{Parallel: 4})
	if res := generate(context.Background(), alone, Request{Prompt: prompt(10, 1), MaxTokens: 5}); res.err != nil || len(res.ids) != 5 {
		t.Fatalf("a request larger than the pool alone: %v, %d tokens", res.err, len(res.ids))
	}
}

// TestRunningSequencesShareTheCache: two requests running at once that extend a cached prompt
// (two agents with one system prompt) both start from it, and get what they get alone.
func TestRunningSequencesShareTheCache(t *testing.T) {
	l := &stepLog{Model: tinyBackend(t)}
	r := New(l, Options{Parallel: 2, CacheBytes: 1 << 30, PrefillSlice: 8})
	system := prompt(30, 1)
	generate(context.Background(), r, Request{Prompt: system, MaxTokens: 1})
	cold := New(l, Options{PrefillSlice: 8})
	var wg sync.WaitGroup
	for i := range 2 {
		req := Request{Prompt: append(slices.Clone(system), prompt(6, 10+i)...), MaxTokens: 6}
		want := generate(context.Background(), cold, req)
		wg.Go(func() {
			got := generate(context.Background(), r, req)
			if got.err != nil || got.res.CachedTokens != len(system) || !slices.Equal(got.ids, want.ids) {
				t.Errorf("agent %d: cached %d of %d, tokens %v (alone, uncached: %v), %v", i, got.res.CachedTokens, len(system), got.ids, want.ids, got.err)
			}
		})
	}
	wg.Wait()
}

// TestWaitingRequestWithdraws: a request waiting for a place whose caller goes away returns at
// once, never runs, and leaves the running one alone.
func TestWaitingRequestWithdraws(t *testing.T) {
	l := &stepLog{Model: tinyBackend(t)}
	r := New(l, Options{Parallel: 1})
	started := make(chan struct{})
	first := make(chan run, 1)
	go func() {
		var once sync.Once
		var out run
		out.res, out.err = r.Generate(context.Background(), Request{Prompt: prompt(5, 1), MaxTokens: 300}, func(tok Token) (bool, error) {
			once.Do(func() { close(started) })
			out.ids = append(out.ids, tok.ID)
			return false, nil
		})
		first <- out
	}()
	<-started
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(20*time.Millisecond, cancel)
	res := generate(ctx, r, Request{Prompt: prompt(5, 2), MaxTokens: 5})
	if !errors.Is(res.err, context.Canceled) || len(res.ids) != 0 {
		t.Fatalf("withdrawn request: %v, %d tokens", res.err, len(res.ids))
	}
	select {
	case out := <-first:
		t.Fatalf("the withdrawn request waited for the running one to end (%d tokens, %v)", len(out.ids), out.err)
	default:
	}
	if out := <-first; out.err != nil || len(out.ids) != 300 {
		t.Fatalf("running request: %v, %d tokens", out.err, len(out.ids))
	}
	if opened := l.opened.Load(); opened != 1 {
		t.Fatalf("%d sessions opened: the withdrawn request ran", opened)
	}
}
