package server

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// loadResult is what a burst of concurrent clients saw.
type loadResult struct {
	codes     map[int]int
	healthP99 time.Duration
	health    int
}

// runLoad sends one request from each of clients concurrent clients (a third streaming, a tenth
// hanging up early) while probing /health, and returns the status counts and /health's p99.
func runLoad(t testing.TB, ts *httptest.Server, clients int) loadResult {
	var mu sync.Mutex
	res := loadResult{codes: map[int]int{}}
	stopProbe := make(chan struct{})
	var lat []time.Duration
	probeDone := make(chan struct{})
	go func() {
		defer close(probeDone)
		for {
			select {
			case <-stopProbe:
				return
			default:
			}
			start := time.Now()
			resp, err := http.Get(ts.URL + "/health")
			if err == nil {
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				lat = append(lat, time.Since(start))
			}
			time.Sleep(2 * time.Millisecond)
		}
	}()
	var wg sync.WaitGroup
	for i := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			stream := i%3 == 0
			body := `{"messages":[{"role":"user","content":"hi ` + strings.Repeat("x", i%7) + `"}],"max_tokens":12,"stream":` + map[bool]string{true: "true", false: "false"}[stream] + `}`
			req, _ := http.NewRequestWithContext(ctx, "POST", ts.URL+"/v1/chat/completions", strings.NewReader(body))
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Errorf("client %d: %v", i, err)
				return
			}
			if i%10 == 9 { // hang up without reading
				cancel()
			} else {
				io.Copy(io.Discard, resp.Body)
			}
			resp.Body.Close()
			mu.Lock()
			res.codes[resp.StatusCode]++
			mu.Unlock()
		}()
	}
	wg.Wait()
	close(stopProbe)
	<-probeDone
	slices.Sort(lat)
	res.health = len(lat)
	if len(lat) > 0 {
		res.healthP99 = lat[len(lat)*99/100]
	}
	return res
}

// TestLoad: 120 concurrent clients against a queue of 16 get 200s and clean 429s only, and the
// server ends with an empty queue and no leaked goroutines.
func TestLoad(t *testing.T) {
	b := newScripted(t, "one two three four five six seven eight nine ten eleven")
	b.delay = 2 * time.Millisecond
	s, ts := testServer(t, b, Config{QueueLimit: 16})
	baseline := runtime.NumGoroutine()
	res := runLoad(t, ts, 120)
	for code, n := range res.codes {
		if code != 200 && code != 429 {
			t.Errorf("%d responses with status %d", n, code)
		}
	}
	if res.codes[200] < 17 || res.codes[429] == 0 {
		t.Errorf("status counts %v: want at least 17 served (queue of 16 + 1 running) and some 429s", res.codes)
	}
	if res.health == 0 {
		t.Error("/health never answered during the load")
	}
	t.Logf("statuses %v; /health p99 %v over %d probes", res.codes, res.healthP99, res.health)
	http.DefaultClient.CloseIdleConnections()
	deadline := time.Now().Add(3 * time.Second)
	for (s.sched.depth() != 0 || runtime.NumGoroutine() > baseline+5) && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if d := s.sched.depth(); d != 0 {
		t.Errorf("queue depth %d after the load", d)
	}
	if n := runtime.NumGoroutine(); n > baseline+5 {
		t.Errorf("goroutines: %d before, %d after the load", baseline, n)
	}
}

// BenchmarkHealthUnderLoad reports /health's p99 latency while 120 clients hammer the server
// (acceptance: < 50 ms), with the share of 429s.
func BenchmarkHealthUnderLoad(b *testing.B) {
	sb := newScripted(b, "one two three four five six seven eight nine ten eleven")
	sb.delay = 2 * time.Millisecond
	_, ts := testServer(b, sb, Config{QueueLimit: 16})
	var worst time.Duration
	var rejected, total int
	for range b.N {
		res := runLoad(b, ts, 120)
		worst = max(worst, res.healthP99)
		rejected += res.codes[429]
		for _, n := range res.codes {
			total += n
		}
	}
	b.ReportMetric(float64(worst.Microseconds())/1000, "health_p99_ms")
	b.ReportMetric(float64(rejected)/float64(total), "rejected_share")
}
