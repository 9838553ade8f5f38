package runner

import (
	"context"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lilyformac/lily/engine/backend"
	"github.com/lilyformac/lily/engine/sample"
)

// seq is one request's sequence: the loop's state for it, and what the loop hands its caller.
type seq struct {
	ctx context.Context
	req Request
	key []int // the prompt as the prefix cache knows it (cacheKey)

	// Owned by the loop.
	res      Result
	sess     backend.Session
	params   sample.Params // req.Sampling with its seed fixed
	sampler  *sample.Sampler
	done     int       // prompt tokens the session has consumed
	marks    []int     // checkpoints left to pass (see marks)
	logits   []float32 // the row after what the session consumed; nil while it prefills
	consumed int       // generated tokens the session has consumed
	onHost   bool      // its sampling settings need the host (no device bursts)
	draft    *seqDraft // its drafting state (nil: drafting is off)
	ended    bool      // the loop has finished it
	arrived  time.Time
	started  time.Time // admitted
	decoding time.Time // first token chosen

	// Shared with the caller.
	halted atomic.Bool // the caller stopped it (emit said stop, or failed)
	out    outbox
}

func newSeq(ctx context.Context, req Request) *seq {
	s := &seq{ctx: ctx, req: req, key: cacheKey(req), params: req.Sampling, arrived: time.Now()}
	s.res.PromptTokens = len(req.Prompt)
	if s.params.Seed == nil { // one seed for the host's choices and the device's
		seed := rand.Uint64()
		s.params.Seed = &seed
	}
	s.sampler = sample.New(s.params, req.Prompt)
	s.out.signal = make(chan struct{}, 1)
	return s
}

// reach is the most positions the sequence can come to hold.
func (s *seq) reach() int { return len(s.req.Prompt) + s.req.MaxTokens }

// prefilling reports whether the session has not yet consumed the whole prompt.
func (s *seq) prefilling() bool { return s.logits == nil }

// history is the key of what the session has consumed: the prompt's (its images keyed by their
// pixels) and the generated tokens.
func (s *seq) history() []int {
	h := make([]int, 0, len(s.key)+s.consumed)
	return append(append(h, s.key...), s.res.Tokens[:s.consumed]...)
}

// event is what the loop hands the caller: a token, a prefill's progress, or the end.
type event struct {
	tok      Token
	progress bool
	done     int
	final    bool
	res      Result
	err      error
}

// outbox carries events from the loop to the caller without ever blocking the loop.
type outbox struct {
	mu     sync.Mutex
	events []event
	signal chan struct{}
}

func (o *outbox) post(e event) {
	o.mu.Lock()
	o.events = append(o.events, e)
	o.mu.Unlock()
	select {
	case o.signal <- struct{}{}:
	default:
	}
}

// take waits for events; false when done ends first.
func (o *outbox) take(done <-chan struct{}) ([]event, bool) {
	select {
	case <-o.signal:
	case <-done:
		return nil, false
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	evs := o.events
	o.events = nil
	return evs, true
}

// deliver passes the loop's events to emit until the sequence ends. Once emit stops or fails, or
// ctx ends, later tokens are dropped and the loop is told to end the sequence at its next step;
// a sequence still waiting for a place is withdrawn at once.
func (s *seq) deliver(r *Runner, emit func(Token) (bool, error)) (Result, error) {
	var sent []int
	stopped, cut := false, false
	var failed error
	done := s.ctx.Done()
	for {
		evs, ok := s.out.take(done)
		if !ok {
			if r.withdraw(s) {
				return s.res, s.ctx.Err()
			}
			done = nil // running: the loop ends it at its next step and says so
			continue
		}
		for _, e := range evs {
			switch {
			case e.final:
				if cut && failed == nil && !stopped {
					failed = s.ctx.Err()
				}
				return s.outcome(e, sent, stopped, failed)
			case e.progress:
				if s.req.Progress != nil && !stopped {
					s.req.Progress(e.done, len(s.req.Prompt))
				}
			case stopped:
			case s.ctx.Err() != nil:
				cut = true
			default:
				sent = append(sent, e.tok.ID)
				stop, err := emit(e.tok)
				if stop || err != nil {
					stopped, failed = true, err
					s.halted.Store(true)
				}
			}
		}
	}
}

// outcome is Generate's answer once the loop has ended the sequence.
func (s *seq) outcome(e event, sent []int, stopped bool, failed error) (Result, error) {
	res := e.res
	switch {
	case failed != nil:
		res.Tokens = sent
		return res, failed
	case stopped:
		res.Tokens, res.FinishReason = sent, "stop"
		return res, nil
	case e.err != nil:
		res.Tokens = sent
		return res, e.err
	}
	return res, nil
}
