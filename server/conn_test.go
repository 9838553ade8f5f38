package server

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// rawRequest writes an HTTP/1.1 request on a fresh connection and returns the connection.
func rawRequest(t *testing.T, ts string, method, path, body string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", strings.TrimPrefix(ts, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	fmt.Fprintf(c, "%s %s HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", method, path, len(body), body)
	return c
}

// waitIdle waits up to d for the scheduler to be empty.
func waitIdle(s *Server, d time.Duration) bool {
	for deadline := time.Now().Add(d); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if s.sched.depth() == 0 {
			return true
		}
	}
	return false
}

// TestStalledReaderLosesSlot: a client that sends a streaming request and never reads holds the
// generation slot only until its socket buffers are full plus StallTimeout; then its stream is
// dropped, its generation cancelled, and the next request runs.
func TestStalledReaderLosesSlot(t *testing.T) {
	b := newScripted(t, strings.Repeat("lorem ipsum dolor sit amet ", 2000))
	s, ts := testServer(t, b, Config{StallTimeout: 300 * time.Millisecond})
	c := rawRequest(t, ts.URL, "POST", "/v1/chat/completions", `{"messages":`+userHi+`,"stream":true,"max_tokens":3500}`)
	c.(*net.TCPConn).SetReadBuffer(4096) // a client that never reads
	start := time.Now()
	for s.sched.depth() == 0 && time.Since(start) < 2*time.Second {
		time.Sleep(5 * time.Millisecond)
	}
	if !waitIdle(s, 10*time.Second) {
		t.Fatalf("a client that never reads still holds the slot after %v (%d forwards)", time.Since(start), b.forwards.Load())
	}
	held := time.Since(start)
	n := b.forwards.Load()
	if n >= 3500 {
		t.Fatalf("the generation ran to its end (%d forwards): it was not cancelled", n)
	}
	time.Sleep(50 * time.Millisecond)
	if b.forwards.Load() != n {
		t.Fatal("the generation goes on after its stream was dropped")
	}
	if r, body := post(t, ts.URL+"/v1/chat/completions", `{"messages":`+userHi+`,"max_tokens":2}`); r.StatusCode != 200 {
		t.Fatalf("next request: %d %s", r.StatusCode, body)
	}
	t.Logf("a never-reading client held the slot for %v (%d tokens generated)", held, n)
}

// TestSlowReaderKeepsStream: a client that reads slowly but steadily is never cut off, however
// long the whole stream takes.
func TestSlowReaderKeepsStream(t *testing.T) {
	b := newScripted(t, strings.Repeat("word ", 40))
	b.delay = 15 * time.Millisecond
	_, ts := testServer(t, b, Config{StallTimeout: 100 * time.Millisecond})
	resp, body := post(t, ts.URL+"/v1/chat/completions", `{"messages":`+userHi+`,"stream":true,"max_tokens":30}`)
	data, _ := sseEvents(t, strings.NewReader(string(body)))
	if resp.StatusCode != 200 || data[len(data)-1] != "[DONE]" || strings.Contains(string(body), `"error"`) {
		t.Fatalf("a 30-token stream of ~0.5 s with a 100 ms stall timeout: %d %s", resp.StatusCode, body)
	}
}

// TestSlowBodyDropped: a body dribbled a byte at a time must still arrive within StallTimeout;
// the connection is then answered 408 and closed, not held for as long as the client likes.
func TestSlowBodyDropped(t *testing.T) {
	b := newScripted(t, "ok")
	_, ts := testServer(t, b, Config{StallTimeout: 300 * time.Millisecond})
	c, err := net.Dial("tcp", strings.TrimPrefix(ts.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	body := `{"messages":` + userHi + `}`
	fmt.Fprintf(c, "POST /v1/chat/completions HTTP/1.1\r\nHost: localhost\r\nContent-Length: %d\r\n\r\n", len(body))
	start := time.Now()
	go func() { // a byte every 50 ms: the whole body would take ~3 s
		for i := range len(body) {
			if _, err := c.Write([]byte{body[i]}); err != nil {
				return
			}
			time.Sleep(50 * time.Millisecond)
		}
	}()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("no answer to a dribbled body after %v: %v", time.Since(start), err)
	}
	rest, _ := io.ReadAll(resp.Body)
	lived := time.Since(start)
	if resp.StatusCode != http.StatusRequestTimeout || !strings.Contains(string(rest), "body_timeout") {
		t.Fatalf("dribbled body: %d %s", resp.StatusCode, rest)
	}
	if lived > 2*time.Second {
		t.Fatalf("the connection lived %v with a 300 ms stall timeout", lived)
	}
	if n := b.forwards.Load(); n != 0 {
		t.Fatalf("%d forwards for a request whose body never arrived", n)
	}
	t.Logf("a connection dribbling its body was answered and closed after %v", lived)
}

// TestIdleConnectionClosed: a keep-alive connection left idle is closed after IdleTimeout.
func TestIdleConnectionClosed(t *testing.T) {
	_, ts := testServer(t, newScripted(t, "ok"), Config{IdleTimeout: 200 * time.Millisecond})
	c := rawRequest(t, ts.URL, "GET", "/health", "")
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("health: %v %v", resp, err)
	}
	io.ReadAll(resp.Body)
	start := time.Now()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := br.ReadByte(); err != io.EOF {
		t.Fatalf("idle connection: %v after %v, want EOF", err, time.Since(start))
	}
	if idle := time.Since(start); idle < 150*time.Millisecond || idle > 2*time.Second {
		t.Fatalf("idle connection closed after %v, IdleTimeout 200 ms", idle)
	}
}
