package server

import (
	"context"
	"net"
	"net/http"
	"sync"
)

// Connection cap. Every connection holds a file descriptor. Once clients hold all the process
// may open (ulimit -n), accept fails with "too many open files" and net/http only backs off and
// retries: nothing new is served, not even GET /health, until StallTimeout frees the stalled
// connections, and the model, the log and the disk cache cannot open files either. So the
// server keeps its connections under a cap below the descriptor limit, and a connection that
// arrives at the cap takes the place of one that does no useful work: an idle keep-alive first
// (its client just reconnects), else the one that has been sending its request (headers or
// body) the longest, oldest first. A connection whose request has fully arrived (its handler
// queues, generates or streams the answer) is never closed for a newcomer: one whose client
// stops reading is StallTimeout's business. Should every connection at the cap be such a one
// (the queue bounds how many can), the newcomer is closed instead of eating into the reserve.
//
// The cap is kept by http.Server's hooks, which net/http runs in its accept loop before it
// serves a connection, so every caller of HTTPServer gets it without wrapping its listeners:
// ConnContext admits each accepted connection (and makes room), ConnState follows it
// (new/active: reading a request; idle; closed/hijacked: gone), and the request body's EOF
// (deadlineBody) marks the request as read.
const (
	// fdReserve is kept back from connections for the rest of the process: stdio and the log file
	// (4), the listeners (2), the runtime's poller (3), a checkpoint being mapped (1: closed once
	// mapped), the disk cache's snapshot writer and a reader (2), a model download's 8 ranged
	// streams and their files (16), Metal and the dynamic loader (a few): ~30, doubled. With
	// macOS's historic soft limit of 256 that leaves 192 connections, with Linux's 1024, 960.
	fdReserve = 64
	// maxConnCap bounds the cap where the limit is huge (Go raises the soft limit to the hard one
	// at start: often a million on Linux, kern.maxfilesperproc on macOS). Each connection costs a
	// goroutine and buffers (~16 KB); a local model server has no use for more.
	maxConnCap = 4096
)

// connCap is the connection cap for a descriptor limit of nofile (0: unknown): nofile less the
// reserve, but at least half of a small limit, and at most maxConnCap.
func connCap(nofile uint64) int {
	if nofile == 0 || nofile >= maxConnCap+fdReserve {
		return maxConnCap
	}
	n := int(nofile)
	return max(n-fdReserve, n/2, 1)
}

// connPhase orders the connections a newcomer may replace: lower goes first.
type connPhase int

const (
	phaseIdle    connPhase = iota // keep-alive between requests
	phaseReading                  // new, or a request whose headers or body have not all arrived
	phaseServing                  // the request has arrived: never replaced
)

// connLimit tracks the open connections of one http.Server and keeps them at most limit.
type connLimit struct {
	limit   int
	mu      sync.Mutex
	conns   map[net.Conn]*trackedConn
	open    int    // tracked connections not closed by the limit
	seq     uint64 // accept order
	evicted int    // connections closed to make room (tests)
}

type trackedConn struct {
	l      *connLimit
	c      net.Conn
	seq    uint64 // accept order: lower is older
	phase  connPhase
	closed bool // closed by the limit: no longer counted
}

type connKey struct{}

func newConnLimit(limit int) *connLimit {
	return &connLimit{limit: limit, conns: map[net.Conn]*trackedConn{}}
}

// admit tracks a just-accepted connection (http.Server.ConnContext) and, at the cap, closes the
// connection it replaces. A scan of every connection: at most maxConnCap, once per accept.
func (l *connLimit) admit(ctx context.Context, c net.Conn) context.Context {
	l.mu.Lock()
	l.seq++
	t := &trackedConn{l: l, c: c, seq: l.seq, phase: phaseReading}
	l.conns[c] = t
	l.open++
	var victim *trackedConn
	if l.open > l.limit {
		victim = t
		for _, o := range l.conns {
			if o != t && !o.closed && o.phase != phaseServing &&
				(victim == t || o.phase < victim.phase || o.phase == victim.phase && o.seq < victim.seq) {
				victim = o
			}
		}
		victim.closed = true
		l.open--
		l.evicted++
	}
	l.mu.Unlock()
	if victim != nil {
		victim.c.Close() // its goroutine's read fails; net/http ends it and reports StateClosed
	}
	return context.WithValue(ctx, connKey{}, t)
}

// state follows net/http's view of a connection (http.Server.ConnState).
func (l *connLimit) state(c net.Conn, st http.ConnState) {
	l.mu.Lock()
	defer l.mu.Unlock()
	t := l.conns[c]
	if t == nil {
		return
	}
	switch st {
	case http.StateActive: // a request's headers are in; its body may not be
		t.phase = phaseReading
	case http.StateIdle:
		t.phase = phaseIdle
	case http.StateHijacked, http.StateClosed: // a hijacked connection is its handler's to close
		delete(l.conns, c)
		if !t.closed {
			l.open--
		}
	}
}

// connOf is the tracked connection a request arrived on; nil on a server without a limit.
func connOf(ctx context.Context) *trackedConn {
	t, _ := ctx.Value(connKey{}).(*trackedConn)
	return t
}

// requestRead marks t's request as fully arrived (its body at EOF, or it has none): from now
// until it is idle again the connection serves an answer and is not replaced.
func (t *trackedConn) requestRead() {
	if t == nil {
		return
	}
	t.l.mu.Lock()
	if t.phase == phaseReading {
		t.phase = phaseServing
	}
	t.l.mu.Unlock()
}

// counts reports the connections open and closed to make room (tests).
func (l *connLimit) counts() (open, evicted int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.open, l.evicted
}
