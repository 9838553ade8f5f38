package server

import (
	"context"
	"sync"
	"time"
)

// scheduler admits one generation at a time behind a bounded FIFO queue. Admission is decided at
// once (so a full queue is a plain 429 before any streaming starts); the wait comes after.
type scheduler struct {
	mu      sync.Mutex
	holder  *ticket       // the running request's ticket
	waiting []*ticket     // FIFO
	limit   int           // maximum waiting requests
	held    time.Duration // moving average of how long a request holds the slot
}

// ticket is one request's place: granted once turn is closed.
type ticket struct {
	s       *scheduler
	turn    chan struct{}
	granted time.Time
	done    bool
}

func newScheduler(limit int) *scheduler { return &scheduler{limit: limit} }

// enqueue takes a place in the queue, or fails with a 429 whose Retry-After is the time a place
// is expected to free: the running request's usual time in the slot.
func (s *scheduler) enqueue() (*ticket, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	t := &ticket{s: s, turn: make(chan struct{})}
	switch {
	case s.holder == nil:
		s.grant(t)
	case len(s.waiting) >= s.limit:
		e := *errQueueFull
		e.RetryAfter = min(max(s.held, time.Second), time.Minute)
		return nil, &e
	default:
		s.waiting = append(s.waiting, t)
	}
	return t, nil
}

func (s *scheduler) grant(t *ticket) {
	s.holder, t.granted = t, time.Now()
	close(t.turn)
}

// wait blocks until the ticket holds the generation slot or ctx ends.
func (t *ticket) wait(ctx context.Context) error {
	select {
	case <-t.turn:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// release gives the slot (or the queue place) back; safe to call more than once.
func (t *ticket) release() {
	s := t.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if t.done {
		return
	}
	t.done = true
	if s.holder != t {
		for i, w := range s.waiting {
			if w == t {
				s.waiting = append(s.waiting[:i], s.waiting[i+1:]...)
				break
			}
		}
		return
	}
	s.holder = nil
	s.held += (time.Since(t.granted) - s.held) / 4
	if len(s.waiting) > 0 {
		next := s.waiting[0]
		s.waiting = s.waiting[1:]
		s.grant(next)
	}
}

// depth is the number of waiting requests plus the running one.
func (s *scheduler) depth() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := len(s.waiting)
	if s.holder != nil {
		n++
	}
	return n
}
