package server

import (
	"context"
	"sync"
)

// scheduler admits one generation at a time behind a bounded FIFO queue. Admission is decided at
// once (so a full queue is a plain 429 before any streaming starts); the wait comes after.
type scheduler struct {
	mu      sync.Mutex
	holder  *ticket   // the running request's ticket
	waiting []*ticket // FIFO
	limit   int       // maximum waiting requests
}

// ticket is one request's place: granted once turn is closed.
type ticket struct {
	s    *scheduler
	turn chan struct{}
	done bool
}

func newScheduler(limit int) *scheduler { return &scheduler{limit: limit} }

// enqueue takes a place in the queue, or fails with errQueueFull.
func (s *scheduler) enqueue() (*ticket, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	t := &ticket{s: s, turn: make(chan struct{})}
	switch {
	case s.holder == nil:
		s.holder = t
		close(t.turn)
	case len(s.waiting) >= s.limit:
		return nil, errQueueFull
	default:
		s.waiting = append(s.waiting, t)
	}
	return t, nil
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
	if len(s.waiting) > 0 {
		s.holder, s.waiting = s.waiting[0], s.waiting[1:]
		close(s.holder.turn)
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
