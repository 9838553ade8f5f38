package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/gin-gonic/gin"
)

// residency is where the served model is, once startup has published it: loaded, being
// released after Config.IdleUnload without requests, released, or being loaded again.
type residency int

const (
	resStartup   residency = iota // startup has not published a model yet (Config.Status says why)
	resLoaded                     // the model serves
	resUnloading                  // idle: Config.Unload releases it
	resUnloaded                   // released; the next request that needs it loads it
	resLoading                    // Config.Load runs; waiters share it
)

// resident keeps the model loaded while it is used. A ~20 GB model held by an idle server is
// memory the rest of the Mac could use, so after Config.IdleUnload with no API request in flight
// it is released, and the next request that needs it waits for one shared load.
type resident struct {
	mu     sync.Mutex
	state  residency
	active int       // API requests in flight that hold the model (they may run it)
	last   time.Time // when active last fell to 0, or the model was loaded
	timer  *time.Timer
	cur    *attempt // the load or unload in progress, or the last one
}

// attempt is one load or unload; done is closed when it ends, err set before.
type attempt struct {
	done chan struct{}
	err  error
}

// heldKey marks a gin request that counts in resident.active (ready gave it the model).
const heldKey = "lily.held"

// unloads reports whether idle unloading is on (Config.IdleUnload with Load and Unload).
func (s *Server) unloads() bool {
	return s.cfg.IdleUnload > 0 && s.cfg.Load != nil && s.cfg.Unload != nil
}

// published records SetModel's change. A load or unload this server started keeps its own
// books; otherwise a model (startup, its retry) is resident, and none is startup's again.
func (s *Server) published(some bool) {
	r := &s.res
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case r.state == resLoading || r.state == resUnloading:
	case some:
		r.state, r.last = resLoaded, time.Now()
		s.armIdle()
	case r.state == resLoaded:
		r.state = resStartup
	}
}

// armIdle starts the idle timer when nothing is in flight; r.mu is held.
func (s *Server) armIdle() {
	r := &s.res
	if !s.unloads() || r.state != resLoaded || r.active > 0 {
		return
	}
	wait := max(s.cfg.IdleUnload-time.Since(r.last), 0)
	if r.timer == nil {
		r.timer = time.AfterFunc(wait, s.idleCheck)
		return
	}
	r.timer.Reset(wait)
}

// hold returns the served model counted as in use until the request ends (the inFlight
// middleware lets it go), loading it first if it was unloaded; nil and an error when there is
// none: still starting (nil error), the load failed, or the request ended while waiting.
func (s *Server) hold(c *gin.Context) (*Model, error) {
	for {
		m, a := s.holdOrLoad(c)
		if a == nil {
			return m, nil
		}
		if err := s.await(c.Request.Context(), a); err != nil {
			return nil, err
		}
	}
}

// holdOrLoad takes the model if it is resident; else it returns the load or unload to wait for,
// starting a load when the model is unloaded.
func (s *Server) holdOrLoad(c *gin.Context) (*Model, *attempt) {
	r := &s.res
	r.mu.Lock()
	defer r.mu.Unlock()
	switch r.state {
	case resUnloaded:
		s.startLoad()
		return nil, r.cur
	case resUnloading, resLoading:
		return nil, r.cur
	}
	m := s.model.Load()
	if m != nil && c != nil && !c.GetBool(heldKey) { // a request counts once, however often it asks
		r.active++
		c.Set(heldKey, true)
	}
	return m, nil
}

// await waits for a to end, within the request's context, the request timeout and the
// server's life; a failed load is the waiter's error.
func (s *Server) await(ctx context.Context, a *attempt) error {
	t := time.NewTimer(s.cfg.RequestTimeout)
	defer t.Stop()
	select {
	case <-a.done:
		if a.err != nil {
			return &apiError{Status: http.StatusServiceUnavailable, Type: "server_error", Code: strp("model_load_failed"),
				Message: "the model could not be loaded again: " + a.err.Error() + " (the next request, or POST /status/load, tries again)"}
		}
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return errTimeout
	case <-s.life.Done():
		return errShuttingDown
	}
}

// inFlight lets the model go when a request that held it ends, and restarts the idle clock.
func (s *Server) inFlight(c *gin.Context) {
	c.Next()
	if !c.GetBool(heldKey) {
		return
	}
	r := &s.res
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.active--; r.active == 0 {
		r.last = time.Now()
		s.armIdle()
	}
}

// idleCheck runs when the idle timer fires: it unloads the model if nothing has held it for
// Config.IdleUnload, else waits out the rest.
func (s *Server) idleCheck() {
	r := &s.res
	r.mu.Lock()
	if r.state != resLoaded || r.active > 0 || s.sched.depth() > 0 || s.life.Err() != nil {
		r.mu.Unlock()
		return
	}
	if time.Since(r.last) < s.cfg.IdleUnload {
		s.armIdle()
		r.mu.Unlock()
		return
	}
	a := &attempt{done: make(chan struct{})}
	r.state, r.cur = resUnloading, a
	m := s.model.Swap(nil)
	r.mu.Unlock()
	if m != nil && m.Runner != nil {
		m.Runner.Cache().Clear() // the snapshots hold backend memory, which must be free before the backend closes
	}
	s.cfg.Unload()
	r.mu.Lock()
	r.state = resUnloaded
	r.mu.Unlock()
	close(a.done)
}

// startLoad runs Config.Load once for every waiter; r.mu is held and the model unloaded.
func (s *Server) startLoad() {
	r := &s.res
	a := &attempt{done: make(chan struct{})}
	r.state, r.cur = resLoading, a
	go func() {
		err := s.cfg.Load(s.life)
		if err == nil && s.model.Load() == nil {
			err = errors.New("the load published no model")
		}
		r.mu.Lock()
		a.err = err
		r.state, r.last = resLoaded, time.Now()
		if err != nil {
			r.state = resUnloaded
		}
		s.armIdle()
		r.mu.Unlock()
		close(a.done)
	}()
}

// loadFailure is the last load's error while the model stays unloaded because of it ("" else).
func (s *Server) loadFailure() string {
	r := &s.res
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.state != resUnloaded || r.cur == nil || r.cur.err == nil {
		return ""
	}
	return r.cur.err.Error()
}

// residencyOf reads the model's residency.
func (s *Server) residencyOf() residency {
	s.res.mu.Lock()
	defer s.res.mu.Unlock()
	return s.res.state
}

// unloadedDetail is /status's detail while the model is unloaded.
func (s *Server) unloadedDetail() string {
	return fmt.Sprintf("The model was unloaded after %s without requests, to free its memory; the next request loads it again.", idleWords(s.cfg.IdleUnload))
}

// idleWords writes an idle duration as a person would: "15 minutes", "1 hour", "200ms".
func idleWords(d time.Duration) string {
	switch {
	case d >= time.Hour && d%time.Hour == 0:
		return plural(int(d/time.Hour), "hour")
	case d >= time.Minute && d%time.Minute == 0:
		return plural(int(d/time.Minute), "minute")
	}
	return d.String()
}

func plural(n int, unit string) string {
	if n == 1 {
		return "1 " + unit
	}
	return fmt.Sprintf("%d %ss", n, unit)
}

// residencyStatus puts the model's residency into /status: phase unloaded with a sentence, a
// failed load as phase error (failed_phase load), a load in progress as phase load unless
// Config.Status says more.
func (s *Server) residencyStatus(out gin.H) {
	switch s.residencyOf() {
	case resUnloading, resUnloaded:
		if failure := s.loadFailure(); failure != "" {
			out["phase"], out["failed_phase"], out["error"] = "error", "load", "the model could not be loaded again: "+failure
			return
		}
		out["phase"], out["detail"], out["error"], out["failed_phase"] = "unloaded", s.unloadedDetail(), "", ""
	case resLoading:
		if s.cfg.Status == nil {
			out["phase"] = "load"
		}
	}
}

// loadModel asks for the model to be loaded (POST /status/load): 202 while it loads, 200 when it
// is resident, 409 while startup has not published it.
func (s *Server) loadModel(c *gin.Context) {
	switch s.residencyOf() {
	case resLoaded:
		reply(c, http.StatusOK, gin.H{"status": "loaded"})
		return
	case resStartup:
		phase, _ := s.startup()
		abortWith(c, &apiError{Status: http.StatusConflict, Message: fmt.Sprintf("the model is still starting (phase %s): it loads when startup ends", phase), Type: "invalid_request_error"})
		return
	}
	go func() {
		ctx, cancel := context.WithTimeout(s.life, s.cfg.RequestTimeout)
		defer cancel()
		for {
			if _, a := s.holdOrLoad(nil); a == nil || s.awaitLoad(ctx, a) != nil {
				return
			}
		}
	}()
	reply(c, http.StatusAccepted, gin.H{"status": "loading"})
}

// awaitLoad waits for a without a request: its failure shows in /status.
func (s *Server) awaitLoad(ctx context.Context, a *attempt) error {
	select {
	case <-a.done:
		return a.err
	case <-ctx.Done():
		return ctx.Err()
	}
}
