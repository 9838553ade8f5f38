package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// completion is what the parallel tests read of a /v1/completions answer.
type completion struct {
	Text     string
	Logprobs []float64
}

// complete posts a one-shot completion of the given token ids; extra adds fields.
func complete(t *testing.T, url string, prompt []int, maxTokens int, extra string) completion {
	t.Helper()
	ids, _ := json.Marshal(prompt)
	body := fmt.Sprintf(`{"prompt": %s, "max_tokens": %d%s}`, ids, maxTokens, extra)
	resp, err := http.Post(url+"/v1/completions", "application/json", strings.NewReader(body))
	if err != nil {
		t.Error(err)
		return completion{}
	}
	defer resp.Body.Close()
	var out struct {
		Choices []struct {
			Text     string
			Logprobs struct {
				TokenLogprobs []float64 `json:"token_logprobs"`
			}
		}
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || resp.StatusCode != 200 || len(out.Choices) != 1 {
		t.Errorf("status %d, %v", resp.StatusCode, err)
		return completion{}
	}
	return completion{out.Choices[0].Text, out.Choices[0].Logprobs.TokenLogprobs}
}

func ids(n, salt int) []int {
	p := make([]int, n)
	for i := range p {
		p[i] = 100 + (i*131+salt*17)%5000
	}
	return p
}

// TestConcurrentEqualsAlone is the batch-invariance acceptance on the emulated GPU backend: four
// requests (different prompts and lengths; greedy and seeded sampling at T 0.8, with logprobs)
// sent at once to `serve --demo --backend emu --parallel 4`, prefix cache off, get exactly the
// tokens and logprobs each gets alone. Alone, a request without logprobs runs on the device's
// sampler (the pipelined loop); together, every row is sampled on the host.
func TestConcurrentEqualsAlone(t *testing.T) {
	url := serveDemoWith(t, serveOptions{backend: "emu", parallel: 4})
	type req struct {
		prompt []int
		max    int
		extra  string
	}
	reqs := []req{
		{ids(5, 1), 6, `, "temperature": 0, "logprobs": 0`},
		{ids(12, 2), 5, `, "temperature": 0.8, "seed": 5, "logprobs": 2`},
		{ids(3, 3), 7, `, "temperature": 0.8, "seed": 9, "top_k": 20`},
		{ids(8, 4), 5, `, "temperature": 0`},
	}
	alone := make([]completion, len(reqs))
	for i, r := range reqs {
		alone[i] = complete(t, url, r.prompt, r.max, r.extra)
	}
	if n := metric(t, url, "lily_batched_steps_total"); n != 0 {
		t.Fatalf("requests alone ran %g multi-row steps", n)
	}
	together := make([]completion, len(reqs))
	var wg sync.WaitGroup
	for i, r := range reqs {
		wg.Go(func() { together[i] = complete(t, url, r.prompt, r.max, r.extra) })
	}
	wg.Wait()
	for i := range reqs {
		if together[i].Text != alone[i].Text || !slices.Equal(together[i].Logprobs, alone[i].Logprobs) || alone[i].Text == "" {
			t.Fatalf("request %d: together %q %v, alone %q %v", i, together[i].Text, together[i].Logprobs, alone[i].Text, alone[i].Logprobs)
		}
	}
	// Together, the rows went through the GPU's multi-row step (how many depends on how the
	// arrivals interleave; at least the last request's first token found another decoding).
	steps, rows := metric(t, url, "lily_batched_steps_total"), metric(t, url, "lily_batched_rows_total")
	if steps < 1 || rows < 2*steps {
		t.Fatalf("together: %g multi-row steps of %g rows", steps, rows)
	}
	t.Logf("together: %g multi-row steps, %.2f rows each", steps, rows/steps)
}

// metric is the value of an unlabelled metric on the server's /metrics page.
func metric(t *testing.T, url, name string) float64 {
	t.Helper()
	resp, err := http.Get(url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		var v float64
		if f := strings.Fields(sc.Text()); len(f) == 2 && f[0] == name {
			if _, err := fmt.Sscan(f[1], &v); err == nil {
				return v
			}
		}
	}
	t.Fatalf("/metrics has no %s", name)
	return 0
}

// streamTimes streams a completion and sends the arrival time of each token event on times,
// closing it at the end; stop ends the stream early.
func streamTimes(t *testing.T, url string, prompt []int, maxTokens int, times chan<- time.Time, stop <-chan struct{}) {
	defer close(times)
	ids, _ := json.Marshal(prompt)
	body := fmt.Sprintf(`{"prompt": %s, "max_tokens": %d, "stream": true, "logit_bias": {"151643": -100, "151645": -100}}`, ids, maxTokens)
	req, _ := http.NewRequest("POST", url+"/v1/completions", bytes.NewReader([]byte(body)))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Error(err)
		return
	}
	defer resp.Body.Close()
	ended := make(chan struct{})
	defer close(ended)
	go func() {
		select {
		case <-stop:
			resp.Body.Close()
		case <-ended:
		}
	}()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if line := sc.Text(); strings.HasPrefix(line, "data: {") {
			times <- time.Now()
		}
	}
}

// TestPrefillDoesNotStallStreams: with `serve --demo --parallel 4` (CPU backend), a stream keeps
// receiving tokens while a 3,000-token prompt prefills: its longest gap is a fraction of that
// prefill, not all of it. And two requests sent together overlap.
func TestPrefillDoesNotStallStreams(t *testing.T) {
	url := serveDemoWith(t, serveOptions{backend: "cpu", parallel: 4})
	times := make(chan time.Time, 10000)
	stop := make(chan struct{})
	go streamTimes(t, url, ids(5, 1), 20000, times, stop)
	<-times // the stream runs
	start := time.Now()
	complete(t, url, ids(3000, 2), 1, "")
	end := time.Now()
	close(stop)
	var during []time.Time
	for tm := range times {
		if tm.After(start) && tm.Before(end) {
			during = append(during, tm)
		}
	}
	prefill := end.Sub(start)
	gap := time.Duration(0)
	last := start
	for _, tm := range append(during, end) {
		gap = max(gap, tm.Sub(last))
		last = tm
	}
	if len(during) < 5 || gap > prefill/3 {
		t.Fatalf("during a %v prefill the stream got %d tokens, its longest gap %v", prefill, len(during), gap)
	}
	t.Logf("prefill of 3,000 tokens %v; the stream got %d tokens meanwhile, longest gap %v", prefill, len(during), gap)

	// Two requests sent together: each gets tokens before the other has finished.
	a, b := make(chan time.Time, 1000), make(chan time.Time, 1000)
	never := make(chan struct{})
	go streamTimes(t, url, ids(40, 3), 300, a, never)
	go streamTimes(t, url, ids(40, 4), 300, b, never)
	ta, tb := collectTimes(a), collectTimes(b)
	if len(ta) < 2 || len(tb) < 2 || !ta[0].Before(tb[len(tb)-1]) || !tb[0].Before(ta[len(ta)-1]) {
		t.Fatalf("the two requests did not overlap: %d and %d tokens", len(ta), len(tb))
	}
}

func collectTimes(c <-chan time.Time) []time.Time {
	var out []time.Time
	for tm := range c {
		out = append(out, tm)
	}
	return out
}
