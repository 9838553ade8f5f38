package server

import (
	"encoding/json"
	"errors"
	"net/http"
	"sync"
	"time"

	"github.com/gin-gonic/gin"
)

// sseWriter writes server-sent events (or JSON lines: startNDJSON); a keep-alive goroutine may
// write comments concurrently. After a failed write (the client is gone or stalled: see
// conn.go) every write fails at once.
type sseWriter struct {
	mu   sync.Mutex
	w    gin.ResponseWriter
	rc   *http.ResponseController
	last time.Time
	err  error
	stop chan struct{}
	ping func(w *sseWriter) []byte // the keep-alive (called with mu held): a comment, or the dialect's ping event
	seq  int                       // the next sequence number (seqEvent)
}

func startSSE(c *gin.Context, keepAlive time.Duration) *sseWriter {
	comment := []byte(": keep-alive\n\n")
	return startSSEPing(c, keepAlive, func(*sseWriter) []byte { return comment })
}

// startSSEPing starts a stream whose keep-alive is what ping returns.
func startSSEPing(c *gin.Context, keepAlive time.Duration, ping func(w *sseWriter) []byte) *sseWriter {
	w := startStream(c, "text/event-stream")
	w.ping = ping
	go w.keepAlive(keepAlive)
	return w
}

// startNDJSON starts a stream of JSON lines (Ollama's framing). It has no keep-alive: a blank
// line is not JSON, and Ollama's clients parse every line they get.
func startNDJSON(c *gin.Context) *sseWriter { return startStream(c, "application/x-ndjson") }

// startStream sends the headers of a streamed response of the given type.
func startStream(c *gin.Context, contentType string) *sseWriter {
	h := c.Writer.Header()
	h.Set("Content-Type", contentType)
	h.Set("Cache-Control", "no-cache")
	h.Set("Connection", "keep-alive")
	h.Set("X-Accel-Buffering", "no")
	c.Writer.WriteHeader(http.StatusOK)
	c.Writer.Flush()
	return &sseWriter{w: c.Writer, rc: http.NewResponseController(c.Writer), last: time.Now(), stop: make(chan struct{})}
}

// keepAlive sends pings (`: keep-alive` comments) when nothing was written for a while (queueing, long
// prompt processing), so proxies and clients do not time out.
func (w *sseWriter) keepAlive(every time.Duration) {
	t := time.NewTicker(every / 2)
	defer t.Stop()
	for {
		select {
		case <-w.stop:
			return
		case <-t.C:
			w.mu.Lock()
			if time.Since(w.last) >= every {
				w.writeLocked(w.ping(w))
			}
			w.mu.Unlock()
		}
	}
}

func (w *sseWriter) writeLocked(b []byte) error {
	if w.err != nil {
		return w.err
	}
	w.last = time.Now()
	if _, w.err = w.w.Write(b); w.err == nil {
		w.err = w.rc.Flush()
	}
	return w.err
}

// data sends one `data: <json>` event.
func (w *sseWriter) data(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.writeLocked(append(append([]byte("data: "), b...), '\n', '\n'))
}

// event sends one `event: <name>` + `data: <json>` event (the Anthropic and Responses framing).
func (w *sseWriter) event(name string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.writeLocked(append(append([]byte("event: "+name+"\ndata: "), b...), '\n', '\n'))
}

// seqEvent is event with the stream's next sequence_number set in fields (Responses events).
func (w *sseWriter) seqEvent(name string, fields map[string]any) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.writeLocked(w.seqEventLocked(name, fields))
}

// seqEventLocked encodes a sequence-numbered event; mu is held.
func (w *sseWriter) seqEventLocked(name string, fields map[string]any) []byte {
	fields["type"], fields["sequence_number"] = name, w.seq
	w.seq++
	b, err := json.Marshal(fields)
	if err != nil { // never an event without its data: the stream says what went wrong instead
		name = "error"
		b = must(json.Marshal(gin.H{"type": name, "sequence_number": fields["sequence_number"], "code": "server_error",
			"message": "an event could not be encoded: " + err.Error(), "param": nil}))
	}
	return append(append([]byte("event: "+name+"\ndata: "), b...), '\n', '\n')
}

// line sends one JSON value and a newline (NDJSON).
func (w *sseWriter) line(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.writeLocked(append(b, '\n'))
}

// close ends the stream with `data: [DONE]`.
func (w *sseWriter) close() {
	close(w.stop)
	w.mu.Lock()
	defer w.mu.Unlock()
	w.writeLocked([]byte("data: [DONE]\n\n"))
}

// end ends a stream whose dialect has no [DONE] (its last event says it is over).
func (w *sseWriter) end() { close(w.stop) }

// fail reports an error inside an already started stream, then ends it.
func (w *sseWriter) fail(err error) {
	var ae *apiError
	if !errors.As(err, &ae) {
		ae = &apiError{Status: http.StatusInternalServerError, Message: err.Error(), Type: "server_error"}
	}
	w.data(gin.H{"error": ae})
	w.close()
}
