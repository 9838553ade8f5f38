package server

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
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

// TestConnCap: the connection cap is the descriptor limit less a reserve, at least half a small
// limit, at most maxConnCap.
func TestConnCap(t *testing.T) {
	for _, c := range []struct {
		nofile uint64
		want   int
	}{{256, 192}, {1024, 960}, {100, 50}, {2, 1}, {1 << 20, maxConnCap}, {^uint64(0), maxConnCap}, {0, maxConnCap}} {
		if got := connCap(c.nofile); got != c.want {
			t.Errorf("connCap(%d) = %d, want %d", c.nofile, got, c.want)
		}
	}
	if n := connCap(nofileLimit()); n < 1 || n > maxConnCap {
		t.Fatalf("this process's cap: %d", n)
	}
}

// TestConnLimitReplacesStalled: with the server at its connection cap, held by connections that
// dribble their request bodies, a new connection takes the place of an idle keep-alive one first,
// then of the oldest dribbler, so GET /health still answers at once; a stream to a client that
// reads it, on the oldest connection of all, is never the one closed.
func TestConnLimitReplacesStalled(t *testing.T) {
	const limit, slow = 32, 40
	lim, url := cappedServer(t, limit)
	addr := strings.TrimPrefix(url, "http://")
	streamed := readStream(t, url) // on the oldest connection

	// Dribblers 1-20, an idle keep-alive connection, dribblers 21-40: 42 connections for 32 places.
	body := `{"messages":` + userHi + `}`
	dial := func() net.Conn {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	var dribblers []net.Conn
	startDribbler := func() {
		c := dial()
		fmt.Fprintf(c, "POST /v1/chat/completions HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%c", len(body), body[0])
		dribblers = append(dribblers, c)
	}
	for range slow / 2 {
		startDribbler()
	}
	idle := dial()
	fmt.Fprint(idle, "GET /health HTTP/1.1\r\nHost: localhost\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(idle), nil)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("keep-alive health: %v %v", resp, err)
	}
	io.ReadAll(resp.Body)
	for deadline := time.Now().Add(2 * time.Second); connsIn(lim, phaseIdle) != 1; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the keep-alive connection never went idle")
		}
	}
	for range slow - slow/2 {
		startDribbler()
	}
	stop := make(chan struct{})
	dribbled := make(chan struct{})
	go func() { // a byte every 200 ms on each: the bodies would take ~10 s
		defer close(dribbled)
		for i := 1; i < len(body); i++ {
			select {
			case <-stop:
				return
			case <-time.After(200 * time.Millisecond):
			}
			for _, c := range dribblers {
				c.Write([]byte{body[i]}) // fails on a closed connection
			}
		}
	}()
	defer func() { close(stop); <-dribbled }()

	// /health on a fresh connection each time answers within a second.
	health := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: time.Second}
	var lastHealth time.Time
	for i := range 5 {
		start := time.Now()
		resp, err := health.Get(url + "/health")
		if err != nil {
			t.Fatalf("health %d at the cap: %v after %v", i, err, time.Since(start))
		}
		io.ReadAll(resp.Body)
		resp.Body.Close()
		if took := time.Since(start); resp.StatusCode != 200 || took > time.Second {
			t.Fatalf("health %d at the cap: %d after %v", i, resp.StatusCode, took)
		}
		lastHealth = time.Now()
		time.Sleep(100 * time.Millisecond)
	}
	// 42 connections for 32 places, then one more for the first health check (each leaves a
	// place for the next).
	if open, evicted := lim.counts(); open > limit || evicted < 2+slow-limit+1 {
		t.Fatalf("%d connections open (cap %d), %d closed to make room", open, limit, evicted)
	}

	// Closed: the idle one, then the oldest dribblers (9 for the 10 connections too many, one for
	// the health checks). Open: the newest dribblers.
	isClosed := func(c net.Conn) bool {
		_, err := c.Read(make([]byte, 1))
		var ne net.Error
		return !(errors.As(err, &ne) && ne.Timeout())
	}
	for _, c := range append(dribblers, idle) {
		c.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	}
	if !isClosed(idle) {
		t.Error("the idle keep-alive connection was not the first to go")
	}
	for i, c := range dribblers {
		switch closed := isClosed(c); {
		case i < 2+slow-limit-1 && !closed:
			t.Errorf("dribbler %d (of the oldest) still open", i+1)
		case i >= slow-10 && closed:
			t.Errorf("dribbler %d (of the newest) closed", i+1)
		}
	}

	if end := streamed(); !end.After(lastHealth) {
		t.Fatal("the stream ended before the health checks: make it longer")
	}
}

// TestConnLimitSparesStreams: at the cap, with every place taken by a stream being read, a
// newcomer is turned away (its connection closed) and the stream goes on to its end.
func TestConnLimitSparesStreams(t *testing.T) {
	lim, url := cappedServer(t, 1)
	streamed := readStream(t, url)
	health := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 5 * time.Second}
	if resp, err := health.Get(url + "/health"); err == nil {
		resp.Body.Close()
		t.Fatalf("a newcomer with the one place streaming: %d, want its connection closed", resp.StatusCode)
	}
	at := time.Now()
	if _, evicted := lim.counts(); evicted != 1 {
		t.Fatalf("%d connections closed to make room, want 1 (the newcomer)", evicted)
	}
	if end := streamed(); !end.After(at) {
		t.Fatal("the stream ended before the newcomer came: make it longer")
	}
}

// cappedServer serves a slow 200-token stream (2 s or more) with the connection cap at limit.
func cappedServer(t *testing.T, limit int) (*connLimit, string) {
	b := newScripted(t, strings.Repeat("word ", 400))
	b.delay = 10 * time.Millisecond
	s, _ := testServer(t, b, Config{StallTimeout: 30 * time.Second})
	lim := newConnLimit(limit)
	ts := httptest.NewUnstartedServer(s)
	ts.Config = s.httpServer(lim)
	ts.Start()
	t.Cleanup(ts.Close)
	return lim, ts.URL
}

// readStream starts a streaming generation whose client reads steadily and returns once its
// answer has begun; the function it returns fails t unless the stream ends whole (within 15 s),
// and tells when it ended.
func readStream(t *testing.T, url string) func() time.Time {
	type result struct {
		status int
		body   string
		end    time.Time
		err    error
	}
	client := &http.Client{Transport: &http.Transport{}, Timeout: 15 * time.Second}
	t.Cleanup(client.CloseIdleConnections)
	started, streamed := make(chan struct{}), make(chan result, 1)
	go func() {
		resp, err := client.Post(url+"/v1/chat/completions", "application/json",
			strings.NewReader(`{"messages":`+userHi+`,"stream":true,"max_tokens":200}`))
		close(started)
		if err != nil {
			streamed <- result{err: err}
			return
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		streamed <- result{resp.StatusCode, string(body), time.Now(), err}
	}()
	select {
	case <-started:
	case <-time.After(5 * time.Second):
		t.Fatal("the stream did not start")
	}
	return func() time.Time {
		t.Helper()
		select {
		case r := <-streamed:
			if r.err != nil || r.status != 200 || !strings.HasSuffix(strings.TrimSpace(r.body), "data: [DONE]") || strings.Contains(r.body, `"error"`) {
				t.Fatalf("the stream at the cap: %d %v %s", r.status, r.err, r.body)
			}
			return r.end
		case <-time.After(20 * time.Second):
			t.Fatal("the stream did not end")
			return time.Time{}
		}
	}
}

// connsIn counts lim's connections in phase p.
func connsIn(lim *connLimit, p connPhase) int {
	lim.mu.Lock()
	defer lim.mu.Unlock()
	n := 0
	for _, c := range lim.conns {
		if c.phase == p && !c.closed {
			n++
		}
	}
	return n
}
