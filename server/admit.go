package server

import (
	"context"
	"sync"

	"github.com/gin-gonic/gin"
	"golang.org/x/sync/semaphore"
)

// admission is a generation request's way in: a share of the preparation budget while its body
// is read and its prompt built, a place in the queue (taken before the costly rendering and
// tokenizing, so a full queue answers 429 at once), then the slot and the request's deadline.
type admission struct {
	s           *Server
	c           *gin.Context
	releasePrep func()
	t           *ticket
	cancel      func()
}

// startAdmission waits for preparation budget for the request's body.
func (s *Server) startAdmission(c *gin.Context) (*admission, bool) {
	release, err := s.prep.acquire(c.Request.Context(), c.Request.ContentLength)
	if err != nil {
		return nil, false // the client went away while waiting
	}
	return &admission{s: s, c: c, releasePrep: release}, true
}

// enqueue takes a place in the queue, answering 429 when it is full.
func (a *admission) enqueue() bool {
	t, err := a.s.sched.enqueue()
	if err != nil {
		abortWith(a.c, err)
		return false
	}
	a.t = t
	return true
}

// admitted ends preparation: it gives back the budget and returns the generation's context,
// which ends with the client, the request timeout (errTimeout) or Drain (errShuttingDown).
func (a *admission) admitted() (context.Context, *ticket) {
	a.releasePrep()
	ctx, cancel := context.WithCancelCause(a.c.Request.Context())
	stop := context.AfterFunc(a.s.life, func() { cancel(context.Cause(a.s.life)) })
	tctx, cancelT := context.WithTimeoutCause(ctx, a.s.cfg.RequestTimeout, errTimeout)
	a.cancel = func() { cancelT(); stop(); cancel(nil) }
	return tctx, a.t
}

// end gives back whatever the request still holds.
func (a *admission) end() {
	a.releasePrep()
	if a.cancel != nil {
		a.cancel()
	}
	if a.t != nil {
		a.t.release()
	}
}

// prepBudget bounds the work done for requests before they are admitted: reading, parsing,
// rendering and tokenizing their bodies. Each request holds its body's size (Content-Length,
// the body limit when unknown, at least minPrepWeight) from before it reads the body until its
// prompt is tokenized, against a budget of two full-size bodies; requests past it wait, in
// arrival order. Parsing and rendering a chat body allocates about 13 times its size (a 15 MB
// body: ~190 MB), and tokenizing stops at the context, so the phase needs about 26 times the
// body limit whatever the concurrency.
type prepBudget struct {
	sem     *semaphore.Weighted
	maxBody int64
}

const minPrepWeight = 64 << 10

func newPrepBudget(maxBody int64) *prepBudget {
	return &prepBudget{sem: semaphore.NewWeighted(2 * maxBody), maxBody: maxBody}
}

// acquire waits for room for a body of contentLength bytes (-1: unknown); release is safe to
// call more than once.
func (p *prepBudget) acquire(ctx context.Context, contentLength int64) (release func(), err error) {
	w := p.maxBody
	if contentLength >= 0 {
		w = min(max(contentLength, minPrepWeight), p.maxBody)
	}
	if err := p.sem.Acquire(ctx, w); err != nil {
		return nil, err
	}
	var once sync.Once
	return func() { once.Do(func() { p.sem.Release(w) }) }, nil
}
