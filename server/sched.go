package server

import (
	"context"
	"sync"
	"time"
)

// scheduler admits up to slots generations at once (the engine loop's running sequences) behind a
// bounded FIFO queue. Admission is decided at once (so a full queue is a plain 429 before any
// streaming starts); the wait comes after.
type scheduler struct {
	mu      sync.Mutex
	slots   int              // generations that run at once
	holders map[*ticket]bool // the running requests' tickets
	waiting []*ticket        // FIFO
	limit   int              // maximum waiting requests
	held    time.Duration    // moving average of how long a request holds a slot
}

// ticket is one request's place: granted once turn is closed.
type ticket struct {
	s       *scheduler
	turn    chan struct{}
	granted time.Time
	done    bool
}

func newScheduler(limit int) *scheduler {
	return &scheduler{limit: limit, slots: 1, holders: map[*ticket]bool{}}
}

// setSlots sets how many generations run at once (the model's engine loop's Parallel); waiting
// requests are granted the new places at once.
func (s *scheduler) setSlots(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.slots = max(n, 1)
	s.grantWaiting()
}

// enqueue takes a place in the queue, or fails with a 429 whose Retry-After is the time a place
// is expected to free: a running request's usual time in its slot, shared by the slots.
func (s *scheduler) enqueue() (*ticket, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	t := &ticket{s: s, turn: make(chan struct{})}
	switch {
	case len(s.holders) < s.slots:
		s.grant(t)
	case len(s.waiting) >= s.limit:
		e := *errQueueFull
		e.RetryAfter = min(max(s.held/time.Duration(s.slots), time.Second), time.Minute)
		return nil, &e
	default:
		s.waiting = append(s.waiting, t)
	}
	return t, nil
}

func (s *scheduler) grant(t *ticket) {
	s.holders[t], t.granted = true, time.Now()
	close(t.turn)
}

// grantWaiting gives the free slots to the oldest waiting requests.
func (s *scheduler) grantWaiting() {
	for len(s.holders) < s.slots && len(s.waiting) > 0 {
		next := s.waiting[0]
		s.waiting = s.waiting[1:]
		s.grant(next)
	}
}

// wait blocks until the ticket holds a generation slot or ctx ends.
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
	if !s.holders[t] {
		for i, w := range s.waiting {
			if w == t {
				s.waiting = append(s.waiting[:i], s.waiting[i+1:]...)
				break
			}
		}
		return
	}
	delete(s.holders, t)
	s.held += (time.Since(t.granted) - s.held) / 4
	s.grantWaiting()
}

// depth is the number of waiting requests plus the running ones.
func (s *scheduler) depth() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.waiting) + len(s.holders)
}
