package main

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lilyformac/lily/engine/lifecycle"
	"github.com/lilyformac/lily/engine/lifecycle/hub/hubtest"
	"github.com/lilyformac/lily/engine/lifecycle/syscheck"
	"github.com/lilyformac/lily/metal/mtl"
)

// pinnedHub serves the demo checkpoint's files as the pinned repo@revision, points HF_* at it and
// the data and cache directories at temporary ones, so `lily serve` without --model pulls from it.
func pinnedHub(t *testing.T) *hubtest.Hub {
	t.Helper()
	t.Setenv("XDG_CACHE_HOME", t.TempDir())
	demo, err := demoDir()
	if err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(demo)
	if err != nil {
		t.Fatal(err)
	}
	files := map[string][]byte{}
	for _, e := range entries {
		if e.Type().IsRegular() && !strings.HasPrefix(e.Name(), ".") {
			if files[e.Name()], err = os.ReadFile(filepath.Join(demo, e.Name())); err != nil {
				t.Fatal(err)
			}
		}
	}
	return isolateRepo(t, lifecycle.DefaultRepo, lifecycle.DefaultRevision, files)
}

// onMac makes serve's checks judge a made-up Mac with memGB of memory and a GPU working set of
// workingSetGB, with plenty of free disk, instead of the machine the test runs on.
func onMac(t *testing.T, memGB, workingSetGB uint64) {
	t.Helper()
	serveMachine = &syscheck.Machine{
		System:    syscheck.System{OS: "darwin", OSVersion: "15.5", Chip: "Apple M4", MemBytes: memGB << 30, MemSource: "hw.memsize"},
		GPU:       &syscheck.GPUInfo{Name: "Apple M4", Family: "Apple9", RecommendedMaxWorkingSet: workingSetGB << 30, Available: true},
		FreeBytes: 1 << 40,
	}
	t.Cleanup(func() { serveMachine = nil })
}

// startServe runs `lily serve` (no --model) until the log matches until or the deadline passes;
// it returns the log, the server's base URL, and a stop function that ends serve and waits for it.
func startServe(t *testing.T, until *regexp.Regexp) (log *syncBuffer, base string, stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	log = &syncBuffer{}
	root := newRootCmd()
	root.SetOut(log)
	root.SetErr(log)
	root.SetArgs([]string{"serve", "--backend", "cpu", "--port", "0", "--api-key", "", "--disk-cache-gb", "0"})
	served := make(chan error, 1)
	go func() { served <- root.ExecuteContext(ctx) }()
	stop = func() {
		cancel()
		select {
		case err := <-served:
			if err != nil {
				t.Errorf("serve after the stop signal: %v", err)
			}
		case <-time.After(shutdownGrace + 5*time.Second):
			t.Errorf("serve still running after the stop signal")
		}
	}
	for deadline := time.Now().Add(90 * time.Second); !until.MatchString(log.String()); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			stop()
			t.Fatalf("serve's log never matched %s:\n%s", until, log.String())
		}
	}
	if m := regexp.MustCompile(`listening at (http://\S+)/v1`).FindStringSubmatch(log.String()); m != nil {
		base = m[1]
	}
	return log, base, stop
}

// phaseOrder is the startup phases in the order serve's log entered them.
func phaseOrder(log string) []string {
	var phases []string
	for _, m := range regexp.MustCompile(`(?m)^lily: phase (\w+)`).FindAllStringSubmatch(log, -1) {
		phases = append(phases, m[1])
	}
	return phases
}

// TestServeChecksBeforePull: on a 16 GB Mac (facts injected, not probed) `lily serve` without
// --model fails in its first phase, checks, with the memory check's fix, and never asks the Hub
// for anything: the 19 GB download does not start.
func TestServeChecksBeforePull(t *testing.T) {
	fh := pinnedHub(t)
	onMac(t, 16, 10)
	log, base, stop := startServe(t, regexp.MustCompile(`phase error`))
	defer stop()
	if got := phaseOrder(log.String()); strings.Join(got, " ") != "checks error" {
		t.Errorf("phases %v, want checks then error:\n%s", got, log.String())
	}
	var st lifecycle.Status
	getJSON(t, base+"/status", &st)
	if st.Phase != lifecycle.PhaseError || st.FailedPhase != lifecycle.PhaseChecks ||
		!strings.Contains(st.Error, "memory: 16.0 GB") || !strings.Contains(st.Error, "use a Mac with 24 GB or more") {
		t.Errorf("status %+v", st)
	}
	if calls := fh.Calls(); len(calls) != 0 || fh.Served() != 0 {
		t.Errorf("the Hub saw %d requests (%d bytes) from a Mac the checks refused", len(calls), fh.Served())
	}
	if _, err := os.Stat(lifecycle.ModelDir(lifecycle.DefaultRepo)); err == nil {
		t.Error("the model directory was created")
	}
}

// TestServePullRetryLogged: on a Mac big enough for the model the phases run checks → pull →
// verify → checks → load → warm; the Hub answers the weights' first request with a 503 and
// Retry-After: 2, and the retry is a line in serve's log and, while it waits, /status's "retry".
// The pull holds the Mac awake (pullHold) and lets go when it ends.
func TestServePullRetryLogged(t *testing.T) {
	fh := pinnedHub(t)
	onMac(t, 64, 48)
	var taken, released atomic.Int32
	pullHold = func(string) func() { taken.Add(1); return func() { released.Add(1) } }
	t.Cleanup(func() { pullHold = mtl.BeginActivity })
	var failed atomic.Bool
	fh.Fault = func(c hubtest.Call, w http.ResponseWriter, r *http.Request) bool {
		if c.Server == "hub" && c.Kind == "file" && c.File == "model.safetensors" && failed.CompareAndSwap(false, true) {
			// Fail once the other files are in: their bytes arriving during the wait would
			// (rightly) end the stall that /status is checked for below.
			others := fh.TotalSize() - int64(len(fh.Files["model.safetensors"]))
			for deadline := time.Now().Add(10 * time.Second); fh.Served() < others && time.Now().Before(deadline); {
				time.Sleep(5 * time.Millisecond)
			}
			w.Header().Set("Retry-After", "2")
			http.Error(w, "overloaded", http.StatusServiceUnavailable)
			return true
		}
		return false
	}
	log, base, stop := startServe(t, regexp.MustCompile(`retry 1/|ready at|phase error`))
	defer stop()
	var st lifecycle.Status
	getJSON(t, base+"/status", &st)
	if st.Phase != lifecycle.PhasePull || st.Retry == nil || st.Retry.Reason != "HTTP 503" || st.Retry.InS <= 0 || st.Retry.InS > 2 {
		t.Errorf("/status while the pull waits to retry: %+v retry %+v", st, st.Retry)
	}
	if taken.Load() != 1 || released.Load() != 0 {
		t.Errorf("during the pull the hold was taken %d times, released %d", taken.Load(), released.Load())
	}
	for deadline := time.Now().Add(60 * time.Second); !regexp.MustCompile(`ready at|phase error`).MatchString(log.String()); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("serve never got ready:\n%s", log.String())
		}
	}
	if taken.Load() != 1 || released.Load() != 1 {
		t.Errorf("after the pull the hold was taken %d times, released %d", taken.Load(), released.Load())
	}
	out := log.String()
	if got := strings.Join(phaseOrder(out), " "); got != "checks pull verify checks load warm ready" || !strings.Contains(out, "ready at") {
		t.Errorf("phases %q, want checks pull verify checks load warm ready:\n%s", got, out)
	}
	if !failed.Load() {
		t.Fatal("the fault never fired: the pull did not fetch model.safetensors")
	}
	retry := regexp.MustCompile(`(?m)^lily: pull: model\.safetensors: .*503.*; retry 1/\d+ in \S+$`)
	if !retry.MatchString(out) {
		t.Errorf("no retry line in serve's log:\n%s", out)
	}
	if fh.Served() < fh.TotalSize() {
		t.Errorf("served %d of %d bytes", fh.Served(), fh.TotalSize())
	}
}
