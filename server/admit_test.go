package server

import (
	"net/http"
	"runtime"
	rtmetrics "runtime/metrics"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// countingTemplate records how many renders run at once.
type countingTemplate struct {
	Template
	hold              time.Duration
	mu                sync.Mutex
	now, peak, called int
}

func (c *countingTemplate) Render(req RenderRequest) (string, error) {
	c.mu.Lock()
	c.now++
	c.called++
	c.peak = max(c.peak, c.now)
	c.mu.Unlock()
	time.Sleep(c.hold)
	defer func() { c.mu.Lock(); c.now--; c.mu.Unlock() }()
	return c.Template.Render(req)
}

func countRenders(s *Server, hold time.Duration) *countingTemplate {
	m := s.model.Load()
	ct := &countingTemplate{Template: m.Template, hold: hold}
	m.Template = ct
	return ct
}

// bigChat is a chat body of about n bytes.
func bigChat(n int) string {
	return `{"messages":[{"role":"user","content":"` + strings.Repeat("agent code ", n/11) + `"}],"max_tokens":2}`
}

// TestPreparationBounded: bodies are read, rendered and tokenized under a budget of two
// full-size bodies, whatever the number of concurrent requests.
func TestPreparationBounded(t *testing.T) {
	s, ts := testServer(t, newScripted(t, "ok"), Config{MaxBodyBytes: 256 << 10, QueueLimit: 16})
	ct := countRenders(s, 40*time.Millisecond)
	body := bigChat(200 << 10)
	var wg sync.WaitGroup
	var bad atomic.Int32
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if resp, out := post(t, ts.URL+"/v1/chat/completions", body); resp.StatusCode != 400 || !strings.Contains(string(out), "context_length_exceeded") {
				bad.Add(1)
			}
		}()
	}
	wg.Wait()
	if bad.Load() != 0 || ct.called != 8 {
		t.Fatalf("%d unexpected answers, %d renders", bad.Load(), ct.called)
	}
	if ct.peak > 2 {
		t.Fatalf("%d renders of 200 KB bodies ran at once; the budget allows 2 (2 x 256 KiB)", ct.peak)
	}
}

// TestQueueFullAnswersBeforeRendering: with the queue full a request gets 429 (with
// Retry-After) before its prompt is rendered or tokenized.
func TestQueueFullAnswersBeforeRendering(t *testing.T) {
	b := newScripted(t, "x y z")
	b.gate = make(chan struct{})
	s, ts := testServer(t, b, Config{QueueLimit: 0})
	ct := countRenders(s, 0)
	done := make(chan int)
	go func() {
		resp, _ := post(t, ts.URL+"/v1/chat/completions", `{"messages":`+userHi+`,"max_tokens":2}`)
		done <- resp.StatusCode
	}()
	for s.sched.depth() < 1 {
		time.Sleep(2 * time.Millisecond)
	}
	resp, body := post(t, ts.URL+"/v1/chat/completions", `{"messages":`+userHi+`,"max_tokens":2}`)
	if resp.StatusCode != 429 || resp.Header.Get("Retry-After") == "" || !strings.Contains(string(body), "queue_full") {
		t.Fatalf("queue of 0 while one runs: %d Retry-After %q %s", resp.StatusCode, resp.Header.Get("Retry-After"), body)
	}
	if ct.called != 1 {
		t.Fatalf("%d renders: the refused request was rendered", ct.called)
	}
	close(b.gate)
	if code := <-done; code != 200 {
		t.Fatalf("running request: %d", code)
	}
}

// heapPeak samples the Go heap's live objects until stop is closed and returns the peak.
func heapPeak(stop <-chan struct{}) <-chan uint64 {
	out := make(chan uint64, 1)
	go func() {
		sample := []rtmetrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
		var peak uint64
		for {
			rtmetrics.Read(sample)
			peak = max(peak, sample[0].Value.Uint64())
			select {
			case <-stop:
				out <- peak
				return
			case <-time.After(time.Millisecond):
			}
		}
	}()
	return out
}

// TestPreAdmissionMemory: 16 concurrent 2 MB chat bodies against a 2 MiB body limit (the
// 16 x 15 MB of lily serve's defaults, scaled down). Each is read, rendered and tokenized only
// while it holds preparation budget, and tokenized only up to the context, so the heap stays
// near two bodies' worth of work; without the budget all sixteen were rendered and fully
// tokenized at once (~70 MB each).
func TestPreAdmissionMemory(t *testing.T) {
	_, ts := testServer(t, newScripted(t, "ok"), Config{MaxBodyBytes: 2 << 20, QueueLimit: 16})
	body := bigChat(2<<20 - 200)
	runtime.GC()
	base := heapPeak(closedChan())
	stop := make(chan struct{})
	peak := heapPeak(stop)
	var wg sync.WaitGroup
	codes := make(chan int, 16)
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req, _ := http.NewRequest("POST", ts.URL+"/v1/chat/completions", strings.NewReader(body))
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				codes <- 0
				return
			}
			resp.Body.Close()
			codes <- resp.StatusCode
		}()
	}
	wg.Wait()
	close(stop)
	close(codes)
	for c := range codes {
		if c != 400 {
			t.Fatalf("a 2 MB prompt against a 4,096-token context: status %d", c)
		}
	}
	grew := int64(<-peak) - int64(<-base)
	t.Logf("heap peak over the baseline: %d MB for 16 concurrent 2 MB bodies", grew>>20)
	if grew > 250<<20 {
		t.Fatalf("heap grew by %d MB", grew>>20)
	}
}

func closedChan() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}
