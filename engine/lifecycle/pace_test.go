package lifecycle

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lilyformac/lily/engine/lifecycle/hub"
	"github.com/lilyformac/lily/engine/lifecycle/hub/hubtest"
)

// fakeClock is the State's clock in these tests: time moves only when the test says.
type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time          { return c.t }
func (c *fakeClock) advance(d time.Duration) { c.t = c.t.Add(d) }

func stateAt(c *fakeClock) *State {
	s := NewState(&syncBuffer{})
	s.now = c.now
	return s
}

// TestRateIsOverTheRecentWindow: the rate is what arrived in the last RateWindow, not since the
// start: after 60 s at 10 MB/s and 20 s at 1 MB/s it reads 1 MB/s, and the time left follows it.
func TestRateIsOverTheRecentWindow(t *testing.T) {
	c := &fakeClock{t: time.Unix(1_000_000, 0)}
	s := stateAt(c)
	s.Enter(PhasePull, "")
	const total = 2_000_000_000
	done := int64(500_000_000) // a resume: bytes already on disk are no speed
	s.SetBytes(done, total, "a")
	if st := s.Status(); st.BytesPerS != 0 || st.ETASeconds != -1 {
		t.Fatalf("before any history: %v B/s, eta %d; want 0 and -1 (unknown)", st.BytesPerS, st.ETASeconds)
	}
	for range 240 { // 60 s of reports every 250 ms at 10 MB/s
		c.advance(250 * time.Millisecond)
		done += 2_500_000
		s.SetBytes(done, total, "a")
	}
	if st := s.Status(); st.BytesPerS != 10e6 {
		t.Fatalf("steady 10 MB/s reads %v B/s", st.BytesPerS)
	}
	for range 80 { // then 20 s at 1 MB/s
		c.advance(250 * time.Millisecond)
		done += 250_000
		s.SetBytes(done, total, "a")
	}
	st := s.Status()
	if st.BytesPerS != 1e6 {
		t.Fatalf("after slowing to 1 MB/s for longer than the window: %v B/s (a since-start average would say %v)",
			st.BytesPerS, float64(done-500_000_000)/80)
	}
	if want := int64((total - done) / 1e6); st.ETASeconds != want {
		t.Fatalf("eta %d s, want %d", st.ETASeconds, want)
	}
	if n := len(s.samples); n > int(RateWindow/(250*time.Millisecond))+2 {
		t.Fatalf("%d samples kept for a %v window of 250 ms reports", n, RateWindow)
	}

	// Reports keep coming but nothing arrives: the rate falls to 0 within the window.
	for range 4 * int(RateWindow/time.Second) {
		c.advance(250 * time.Millisecond)
		s.SetBytes(done, total, "a")
	}
	if st := s.Status(); st.BytesPerS != 0 || st.ETASeconds != -1 {
		t.Fatalf("stalled for a whole window: %v B/s, eta %d", st.BytesPerS, st.ETASeconds)
	}

	// A phase change starts a fresh history.
	s.Enter(PhaseVerify, "")
	s.SetBytes(0, total, "a")
	c.advance(time.Second)
	if st := s.Status(); st.BytesPerS != 0 || st.Retry != nil {
		t.Fatalf("verify inherited the pull's rate: %+v", st)
	}
}

// TestRateFallsWhenReportsStop: no report for a while (a listing retried) lowers the rate,
// which is measured up to now, not to the last report.
func TestRateFallsWhenReportsStop(t *testing.T) {
	c := &fakeClock{t: time.Unix(1_000_000, 0)}
	s := stateAt(c)
	s.Enter(PhasePull, "")
	s.SetBytes(0, 100e6, "a")
	c.advance(5 * time.Second)
	s.SetBytes(50e6, 100e6, "a")
	if got := s.Status().BytesPerS; got != 10e6 {
		t.Fatalf("%v B/s", got)
	}
	c.advance(5 * time.Second)
	if got := s.Status().BytesPerS; got != 5e6 {
		t.Fatalf("5 s without a report: %v B/s, want 5e6", got)
	}
}

// TestRetryShowsUntilBytesFlow: a scheduled retry shows with its reason and the time to the
// next attempt, counting down, and goes once a byte arrives; the JSON carries it as "retry".
func TestRetryShowsUntilBytesFlow(t *testing.T) {
	c := &fakeClock{t: time.Unix(1_000_000, 0)}
	s := stateAt(c)
	s.Enter(PhasePull, "")
	s.SetBytes(1000, 5000, "a")
	if s.Status().Retry != nil {
		t.Fatal("a retry before any failed")
	}
	s.SetRetry(hub.Retry{Reason: "HTTP 503", Err: errors.New("GET x: Service Unavailable (HTTP 503)"), Attempt: 2, Attempts: 7, Wait: 8 * time.Second})
	// The first report after the retry may count bytes other streams delivered before it: it
	// is the baseline, not a sign the download moves again.
	s.SetBytes(1000+200, 5000, "a")
	c.advance(3 * time.Second)
	s.SetBytes(1000+200, 5000, "a") // reports without bytes keep it
	r := s.Status().Retry
	if r == nil || r.Reason != "HTTP 503" || r.InS != 5 || r.Attempt != 2 || r.Attempts != 7 || !r.At.Equal(time.Unix(1_000_008, 0)) || !strings.Contains(r.Error, "Service Unavailable") {
		t.Fatalf("retry %+v", r)
	}
	raw, _ := json.Marshal(s.Status())
	var m map[string]any
	json.Unmarshal(raw, &m)
	if rm, ok := m["retry"].(map[string]any); !ok || rm["reason"] != "HTTP 503" || rm["in_s"] != 5.0 {
		t.Fatalf("JSON %s", raw)
	}
	c.advance(10 * time.Second)
	if r := s.Status().Retry; r == nil || r.InS != 0 {
		t.Fatalf("past its time, the attempt is under way: %+v", r)
	}
	s.SetBytes(1201, 5000, "a")
	if r := s.Status().Retry; r != nil {
		t.Fatalf("bytes arrived and the retry still shows: %+v", r)
	}
	raw, _ = json.Marshal(s.Status())
	if !strings.Contains(string(raw), `"retry":null`) || !strings.Contains(string(raw), `"eta_s":`) || !strings.Contains(string(raw), `"bytes_per_s":`) {
		t.Fatalf("every key is present: %s", raw)
	}
}

// fakeHold counts takes and releases, and whether the hold is held now.
type fakeHold struct {
	taken, released atomic.Int32
	reason          atomic.Pointer[string]
}

func (h *fakeHold) hold(reason string) func() {
	h.taken.Add(1)
	h.reason.Store(&reason)
	return func() { h.released.Add(1) }
}

func (h *fakeHold) held() bool { return h.taken.Load() > h.released.Load() }

// TestPullHoldsTheMacAwake: the pull phase takes the hold before it downloads, keeps it while
// bytes arrive, and releases it once, after success and after failure alike; a stalled download
// shows its retry in the status while it waits.
func TestPullHoldsTheMacAwake(t *testing.T) {
	fh := hubtest.New(t, "org/tiny", "v1", map[string][]byte{"config.json": []byte("{}"), "model.safetensors": make([]byte, 5000)})
	var fails atomic.Int32
	fh.Fault = func(c hubtest.Call, w http.ResponseWriter, r *http.Request) bool {
		if c.Kind == "file" && c.File == "model.safetensors" && fails.Add(1) <= 1 {
			w.Header().Set("Retry-After", "0")
			http.Error(w, "unavailable", http.StatusServiceUnavailable)
			return true
		}
		return false
	}
	h := &fakeHold{}
	c := hub.New()
	c.Endpoint, c.Token = fh.URL(), ""
	c.Backoff, c.MaxBackoff = time.Millisecond, 2*time.Millisecond
	var heldDuringProgress, sawRetry atomic.Bool
	heldDuringProgress.Store(true)
	s := NewState(&syncBuffer{})
	c.Progress = func(hub.Progress) {
		if !h.held() {
			heldDuringProgress.Store(false)
		}
	}
	c.Retrying = func(r hub.Retry) {
		if st := s.Status(); st.Retry != nil && st.Retry.Reason == "HTTP 503" && r.Reason == "HTTP 503" && h.held() {
			sawRetry.Store(true)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := (&Runner{State: s, Steps: []Step{PullIfMissing(c, "org/tiny", "v1", t.TempDir(), h.hold)}}).Run(ctx); err != nil {
		t.Fatal(err)
	}
	if h.taken.Load() != 1 || h.released.Load() != 1 || !heldDuringProgress.Load() {
		t.Fatalf("hold taken %d, released %d, held during every progress report: %v", h.taken.Load(), h.released.Load(), heldDuringProgress.Load())
	}
	if r := *h.reason.Load(); !strings.Contains(r, "org/tiny") {
		t.Fatalf("hold reason %q", r)
	}
	if !sawRetry.Load() {
		t.Fatal("the 503 was not in the status while the pull waited to retry")
	}
	if st := s.Status(); st.Retry != nil {
		t.Fatalf("ready, and still retrying: %+v", st.Retry)
	}

	// A pull that fails (the repo does not exist) releases the hold too.
	h2 := &fakeHold{}
	s2 := NewState(&syncBuffer{})
	if err := (&Runner{State: s2, Steps: []Step{PullIfMissing(c, "org/missing", "v1", t.TempDir(), h2.hold)}}).Run(ctx); err == nil {
		t.Fatal("a pull of a missing repo succeeded")
	}
	if h2.taken.Load() != 1 || h2.released.Load() != 1 {
		t.Fatalf("after a failed pull: taken %d, released %d", h2.taken.Load(), h2.released.Load())
	}
}

// TestPendingDownload: an empty directory needs the whole model, a partial one less, and one
// with the pinned revision's marker and files nothing; free space is measured on its disk.
func TestPendingDownload(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "not", "yet")
	d := PendingDownload(dir)
	if d.Complete || d.Left != ModelBytes || d.Free <= 0 || d.Dir != dir {
		t.Fatalf("missing dir: %+v", d)
	}
	os.MkdirAll(dir, 0o755)
	os.WriteFile(filepath.Join(dir, "model-00001.safetensors"), make([]byte, 4096), 0o644)
	if d := PendingDownload(dir); d.Complete || d.Left != ModelBytes-4096 {
		t.Fatalf("partial dir: %+v", d)
	}
	files := []hub.File{{Path: "model-00001.safetensors", Size: 4096, SHA256: strings.Repeat("0", 64)}}
	writeMarker := func(repo, rev string) {
		raw, _ := json.Marshal(hub.Marker{Repo: repo, Revision: rev, Files: files, CompletedAt: time.Now()})
		if err := os.WriteFile(filepath.Join(dir, hub.MarkerName), raw, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	writeMarker(DefaultRepo, "0123456789012345678901234567890123456789")
	if d := PendingDownload(dir); d.Complete {
		t.Fatalf("another revision counts as complete: %+v", d)
	}
	writeMarker(DefaultRepo, DefaultRevision)
	if d := PendingDownload(dir); !d.Complete || d.Left != 0 {
		t.Fatalf("complete dir: %+v", d)
	}
}
