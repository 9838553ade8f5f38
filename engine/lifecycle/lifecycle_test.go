package lifecycle

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/adrg/xdg"

	"github.com/lilyformac/lily/engine/lifecycle/hub"
	"github.com/lilyformac/lily/engine/lifecycle/hub/hubtest"
)

// syncBuffer collects log lines written from several goroutines.
type syncBuffer struct {
	mu sync.Mutex
	sb strings.Builder
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.sb.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.sb.String()
}

func step(p Phase, run func(s *State) error) Step {
	return Step{Phase: p, Run: func(_ context.Context, s *State) error { return run(s) }}
}

func TestPhasesTransitionFailAndRetry(t *testing.T) {
	var log syncBuffer
	s := NewState(&log)
	if st := s.Status(); st.Phase != PhaseChecks { // serve's first phase: the checks before any download
		t.Fatalf("initial phase %q", st.Phase)
	}
	loadFails := true
	r := &Runner{State: s, Steps: []Step{
		step(PhasePull, func(s *State) error { s.SetBytes(50, 200, "model.safetensors"); return nil }),
		step(PhaseVerify, func(s *State) error { s.SetProgress(1, "6 files"); return nil }),
		step(PhaseChecks, func(*State) error { return nil }),
		step(PhaseLoad, func(s *State) error {
			// Mid-phase, the status carries the phase's own progress only.
			if st := s.Status(); st.Phase != PhaseLoad || st.BytesTotal != 0 || st.Progress != 0 {
				t.Errorf("entering load: %+v", st)
			}
			if loadFails {
				return errors.New("out of GPU memory")
			}
			return nil
		}),
		step(PhaseWarm, func(s *State) error { s.SetProgress(2, "clamped"); return nil }),
	}}

	if err := r.Retry(context.Background()); err == nil || !strings.Contains(err.Error(), "nothing to retry") {
		t.Fatalf("retry before a failure: %v", err)
	}
	err := r.Run(context.Background())
	if err == nil || err.Error() != "load: out of GPU memory" {
		t.Fatalf("run: %v", err)
	}
	raw, _ := json.Marshal(s)
	if want := `{"phase":"error","progress":0,"detail":"","error":"out of GPU memory","failed_phase":"load","bytes_done":0,"bytes_total":0,"file":"","bytes_per_s":0,"eta_s":-1,"retry":null}`; string(raw) != want {
		t.Fatalf("status JSON\n got %s\nwant %s", raw, want)
	}

	loadFails = false
	if err := r.Retry(context.Background()); err != nil {
		t.Fatal(err)
	}
	raw, _ = json.Marshal(s)
	if want := `{"phase":"ready","progress":1,"detail":"","error":"","failed_phase":"","bytes_done":0,"bytes_total":0,"file":"","bytes_per_s":0,"eta_s":-1,"retry":null}`; string(raw) != want {
		t.Fatalf("status JSON\n got %s\nwant %s", raw, want)
	}
	want := []string{
		"lily: phase pull", "lily: phase verify", "lily: phase checks", "lily: phase load",
		"lily: phase error (load failed): out of GPU memory",
		"lily: retrying startup after load failed",
		"lily: phase pull", "lily: phase verify", "lily: phase checks", "lily: phase load", "lily: phase warm", "lily: phase ready",
	}
	if got := strings.Split(strings.TrimSpace(log.String()), "\n"); strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("log lines\n got %q\nwant %q", got, want)
	}
}

func TestProgressAndConcurrency(t *testing.T) {
	s := NewState(&syncBuffer{})
	s.SetBytes(50, 200, "a.safetensors")
	if st := s.Status(); st.Progress != 0.25 || st.BytesDone != 50 || st.File != "a.safetensors" {
		t.Fatalf("%+v", st)
	}
	s.SetProgress(-1, "x")
	if s.Status().Progress != 0 {
		t.Fatal("progress not clamped")
	}

	// Readers poll the status while a step reports progress and a second Run is refused.
	release := make(chan struct{})
	r := &Runner{State: s, Steps: []Step{step(PhaseLoad, func(s *State) error {
		for i := range 1000 {
			s.SetBytes(int64(i), 1000, "f")
		}
		<-release
		return nil
	})}}
	done := make(chan error)
	go func() { done <- r.Run(context.Background()) }()
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for range 200 {
				if _, err := json.Marshal(s); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	for s.Status().Phase != PhaseLoad {
		time.Sleep(time.Millisecond)
	}
	if err := r.Run(context.Background()); !errors.Is(err, ErrBusy) {
		t.Fatalf("concurrent run: %v", err)
	}
	close(release)
	if err := <-done; err != nil || s.Status().Phase != PhaseReady {
		t.Fatalf("run: %v, %+v", err, s.Status())
	}
}

func TestPullIfMissingAndVerifySteps(t *testing.T) {
	files := map[string][]byte{"config.json": []byte("{}"), "model.safetensors": make([]byte, 5000)}
	fh := hubtest.New(t, "org/tiny", "v1", files)
	dir := t.TempDir()
	c := hub.New()
	c.Endpoint, c.Token = fh.URL(), ""
	s := NewState(&syncBuffer{})
	var seen Status
	c.Progress = func(hub.Progress) { seen = s.Status() } // the caller's callback still runs
	r := &Runner{State: s, Steps: []Step{PullIfMissing(c, "org/tiny", "v1", dir, nil), VerifyStep(dir, hub.VerifyFull)}}
	if err := r.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	if seen.Phase != PhasePull || seen.BytesDone != 5002 || seen.BytesTotal != 5002 || seen.Progress != 1 {
		t.Fatalf("pull progress in the status: %+v", seen)
	}
	if st := s.Status(); st.Phase != PhaseReady || fh.Served() != fh.TotalSize() {
		t.Fatalf("%+v, served %d", st, fh.Served())
	}

	// Same-size damage passes pull's cheap check but fails the full verify; Retry repairs it.
	os.WriteFile(filepath.Join(dir, "model.safetensors"), append(make([]byte, 4999), 1), 0o644)
	fh.ResetServed()
	if err := r.Run(context.Background()); err == nil || s.Status().FailedPhase != PhaseVerify {
		t.Fatalf("run on a damaged dir: %v, %+v", err, s.Status())
	}
	if err := r.Retry(context.Background()); err != nil {
		t.Fatal(err)
	}
	if s.Status().Phase != PhaseReady || fh.Served() != 5000 {
		t.Fatalf("after retry: %+v, served %d", s.Status(), fh.Served())
	}

	// A checkpoint the user brought, without a marker, passes verify with a note.
	vs := NewState(&syncBuffer{})
	if err := VerifyStep(t.TempDir(), hub.VerifyFast).Run(context.Background(), vs); err != nil {
		t.Fatal(err)
	}
	if d := vs.Status().Detail; !strings.Contains(d, "not pulled by lily") {
		t.Fatalf("detail %q", d)
	}
}

// TestPullIfMissingLogsRetries: a download that meets a server error says so in the state's log
// (serve's stderr) before it retries, and the caller's own Logf still hears it.
func TestPullIfMissingLogsRetries(t *testing.T) {
	fh := hubtest.New(t, "org/tiny", "v1", map[string][]byte{"config.json": []byte("{}"), "model.safetensors": make([]byte, 5000)})
	var fails atomic.Int32
	fh.Fault = func(c hubtest.Call, w http.ResponseWriter, r *http.Request) bool {
		if c.Kind == "file" && c.File == "model.safetensors" && fails.Add(1) <= 2 {
			http.Error(w, "bad gateway", http.StatusBadGateway)
			return true
		}
		return false
	}
	c := hub.New()
	c.Endpoint, c.Token = fh.URL(), ""
	c.Backoff, c.MaxBackoff = time.Millisecond, 2*time.Millisecond
	var callerLines atomic.Int32
	c.Logf = func(string, ...any) { callerLines.Add(1) }
	var log syncBuffer
	s := NewState(&log)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := (&Runner{State: s, Steps: []Step{PullIfMissing(c, "org/tiny", "v1", t.TempDir(), nil)}}).Run(ctx); err != nil {
		t.Fatalf("%v\n%s", err, log.String())
	}
	for _, want := range []string{"lily: pull: model.safetensors: GET ", "Bad Gateway (HTTP 502); retry 1/7 in ", "Bad Gateway (HTTP 502); retry 2/7 in "} {
		if !strings.Contains(log.String(), want) {
			t.Errorf("log lacks %q:\n%s", want, log.String())
		}
	}
	if n := callerLines.Load(); n != 2 {
		t.Errorf("the caller's Logf heard %d lines, want the 2 retries", n)
	}
}

// A listing whose Link rel="next" points back at itself used to keep serve in phase pull
// forever, at one request per round trip; now the pull fails and serve shows why.
func TestPullIfMissingFailsOnALoopingListing(t *testing.T) {
	fh := hubtest.New(t, "org/tiny", "v1", map[string][]byte{"config.json": []byte("{}")})
	var calls atomic.Int32
	fh.Fault = func(c hubtest.Call, w http.ResponseWriter, r *http.Request) bool {
		if c.Kind != "tree" {
			return false
		}
		if calls.Add(1) > 50 { // a guard for the test, not the behaviour under test
			http.Error(w, "test guard: too many listing requests", http.StatusBadRequest)
			return true
		}
		w.Header().Set("Link", "<"+fh.URL()+r.URL.RequestURI()+`>; rel="next"`)
		w.Write([]byte("[]"))
		return true
	}
	c := hub.New()
	c.Endpoint, c.Token = fh.URL(), ""
	s := NewState(&syncBuffer{})
	r := &Runner{State: s, Steps: []Step{PullIfMissing(c, "org/tiny", "v1", t.TempDir(), nil)}}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := r.Run(ctx); err == nil {
		t.Fatal("startup succeeded")
	}
	st := s.Status()
	if st.Phase != PhaseError || st.FailedPhase != PhasePull || !strings.Contains(st.Error, "the listing loops") {
		t.Fatalf("status %+v after %d listing requests", st, calls.Load())
	}
	if calls.Load() != 1 {
		t.Fatalf("%d listing requests, want 1", calls.Load())
	}
}

func TestResolveModelDir(t *testing.T) {
	t.Setenv("XDG_DATA_HOME", t.TempDir())
	xdg.Reload()
	t.Cleanup(xdg.Reload)
	dir := ModelDir(DefaultRepo)
	if !strings.HasSuffix(dir, filepath.Join("Lily", "models", "mlx-community", "Qwen3.6-35B-A3B-4bit")) {
		t.Fatalf("ModelDir = %s", dir)
	}
	if got, err := ResolveModelDir("/my/ckpt"); got != "/my/ckpt" || err != nil {
		t.Fatalf("flag value: %q %v", got, err)
	}
	if _, err := ResolveModelDir(""); err == nil || !strings.Contains(err.Error(), "run `lily pull` to download") {
		t.Fatalf("nothing pulled: %v", err)
	}
	os.MkdirAll(dir, 0o755)
	if _, err := ResolveModelDir(""); err == nil || !strings.Contains(err.Error(), "run `lily pull` to resume") {
		t.Fatalf("partial: %v", err)
	}

	// A completed pull of the pinned revision (from a fake hub serving it).
	fh := hubtest.New(t, DefaultRepo, DefaultRevision, map[string][]byte{"config.json": []byte("{}")})
	c := hub.New()
	c.Endpoint, c.Token = fh.URL(), ""
	if _, err := c.Pull(context.Background(), DefaultRepo, DefaultRevision, dir); err != nil {
		t.Fatal(err)
	}
	if got, err := ResolveModelDir(""); got != dir || err != nil {
		t.Fatalf("pulled: %q %v", got, err)
	}
	os.Remove(filepath.Join(dir, "config.json"))
	if _, err := ResolveModelDir(""); err == nil || !strings.Contains(err.Error(), "damaged") {
		t.Fatalf("damaged: %v", err)
	}
}
