package server

import (
	"io"
	"net"
	"net/http"
	"sync"
	"time"
)

// Connection deadlines. A client that stops reading its stream must not hold the one
// generation slot: every write and flush of a response gets a deadline of StallTimeout, and a
// write that misses it fails, which makes net/http close the connection and cancel the
// request's context, so the generation ends and the slot frees. A client that reads slowly but
// steadily is never cut off (each write gets a fresh deadline). A request body must arrive
// within StallTimeout of its first read, so connections that dribble bytes cannot pile up;
// headers have readHeaderTimeout and idle keep-alive connections Config.IdleTimeout.
const (
	readHeaderTimeout = 10 * time.Second
	// sendBuffer caps the kernel's socket send buffer (auto-tuned, it grew to ~2 MB for a client
	// that never read): what a stalled client has not taken must fill it before a write can
	// block, so it bounds how long a stalled stream runs before its StallTimeout starts. SSE
	// needs little; 64 KB still carries hundreds of MB/s on loopback.
	sendBuffer = 64 << 10
)

// HTTPServer is the http.Server to run s with: its handler, timeouts, socket settings and a cap
// on open connections under the process's descriptor limit (connlimit.go).
func (s *Server) HTTPServer() *http.Server {
	return s.httpServer(newConnLimit(connCap(nofileLimit())))
}

func (s *Server) httpServer(l *connLimit) *http.Server {
	return &http.Server{
		Handler:           s,
		ReadHeaderTimeout: readHeaderTimeout,
		IdleTimeout:       s.cfg.IdleTimeout,
		ConnContext:       l.admit,
		ConnState: func(c net.Conn, st http.ConnState) {
			if tc, ok := c.(*net.TCPConn); ok && st == http.StateNew {
				tc.SetWriteBuffer(sendBuffer)
			}
			l.state(c, st)
		},
	}
}

// withDeadlines wraps one request's writer and body with the deadlines above. finish, run
// after the handler, leaves one more StallTimeout for net/http's last flush of the response.
func (s *Server) withDeadlines(w http.ResponseWriter, r *http.Request) (http.ResponseWriter, *http.Request, func()) {
	rc := http.NewResponseController(w)
	stall := s.cfg.StallTimeout
	// A deadline left by this connection's previous response may have passed: renew it before
	// net/http writes anything of its own (a 100 Continue).
	rc.SetWriteDeadline(time.Now().Add(stall))
	conn := connOf(r.Context())
	if r.Body != nil && r.Body != http.NoBody {
		rc.SetReadDeadline(time.Now().Add(stall)) // re-armed at the first read, after any wait
		r.Body = &deadlineBody{ReadCloser: r.Body, rc: rc, stall: stall, conn: conn}
	} else {
		conn.requestRead() // nothing more to arrive: the connection is serving its answer
	}
	return &stallWriter{ResponseWriter: w, rc: rc, stall: stall}, r, func() { rc.SetWriteDeadline(time.Now().Add(stall)) }
}

// stallWriter gives each write and flush a fresh write deadline.
type stallWriter struct {
	http.ResponseWriter
	rc    *http.ResponseController
	stall time.Duration
}

func (w *stallWriter) Write(b []byte) (int, error) {
	w.rc.SetWriteDeadline(time.Now().Add(w.stall))
	return w.ResponseWriter.Write(b)
}

func (w *stallWriter) Flush() { w.FlushError() }

// FlushError lets http.ResponseController report a failed flush (a stalled client).
func (w *stallWriter) FlushError() error {
	w.rc.SetWriteDeadline(time.Now().Add(w.stall))
	return w.rc.Flush()
}

func (w *stallWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// deadlineBody arms the body's read deadline at its first read and clears it at its end: after
// the body, net/http's background read watches for the client hanging up during a generation,
// and a deadline there would cancel the request. (A failed read keeps the passed deadline: the
// connection is not reused.) Its end also tells the connection cap that the request has arrived:
// until then the connection is a stalled candidate to close for a newcomer, after it never.
type deadlineBody struct {
	io.ReadCloser
	rc      *http.ResponseController
	stall   time.Duration
	conn    *trackedConn
	started sync.Once
}

func (b *deadlineBody) Read(p []byte) (int, error) {
	b.started.Do(func() { b.rc.SetReadDeadline(time.Now().Add(b.stall)) })
	n, err := b.ReadCloser.Read(p)
	if err == io.EOF {
		b.rc.SetReadDeadline(time.Time{})
		b.conn.requestRead()
	}
	return n, err
}
