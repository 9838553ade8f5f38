package hub

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/lilyformac/lily/engine/lifecycle/hub/hubtest"
)

const (
	repo  = "mlx-community/Tiny-4bit"
	rev   = "38740b847e4cb78f352aba30aa41c76e08e6eb46"
	shard = "model-00001-of-00002.safetensors" // 5 chunks of 64 KiB
)

func testFiles() map[string][]byte {
	rnd := rand.New(rand.NewPCG(1, 2))
	random := func(n int) []byte {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(rnd.Uint32())
		}
		return b
	}
	return map[string][]byte{
		"config.json":                      []byte(`{"model_type":"qwen3_5_moe"}`),
		"tokenizer_config.json":            random(900),
		shard:                              random(300_000),
		"model-00002-of-00002.safetensors": random(170_001),
		"sub/extra.json":                   []byte("{}\n"),
		"sub/deeper/empty.txt":             {},
	}
}

// harness is a fake hub plus a client pointed at it with short timings; sleeps are recorded,
// not slept, and log lines are kept.
type harness struct {
	t   *testing.T
	hub *hubtest.Hub
	dir string

	mu     sync.Mutex
	sleeps []time.Duration
	logs   []string
}

func newHarness(t *testing.T) *harness {
	h := &harness{t: t, hub: hubtest.New(t, repo, rev, testFiles()), dir: filepath.Join(t.TempDir(), "model")}
	h.hub.Token = "hf_secret"
	return h
}

func (h *harness) client() *Client {
	c := New()
	c.Endpoint, c.Token = h.hub.URL(), "hf_secret"
	c.ChunkSize = 64 << 10
	c.Backoff, c.MaxBackoff = time.Millisecond, 4*time.Millisecond
	c.StallTimeout = 2 * time.Second
	c.ProgressInterval = 5 * time.Millisecond
	c.sleep = func(ctx context.Context, d time.Duration) error {
		h.mu.Lock()
		h.sleeps = append(h.sleeps, d)
		h.mu.Unlock()
		return ctx.Err()
	}
	c.Logf = func(format string, args ...any) {
		h.mu.Lock()
		h.logs = append(h.logs, fmt.Sprintf(format, args...))
		h.mu.Unlock()
	}
	return c
}

func (h *harness) pull(c *Client) (*Marker, error) {
	return c.Pull(context.Background(), repo, rev, h.dir)
}

func (h *harness) logged(sub string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, l := range h.logs {
		if strings.Contains(l, sub) {
			return true
		}
	}
	return false
}

// checkComplete asserts that dir holds exactly the hub's files, a matching marker, and no
// partial data.
func (h *harness) checkComplete() {
	h.t.Helper()
	for p, want := range h.hub.Files {
		got, err := os.ReadFile(filepath.Join(h.dir, p))
		if err != nil || !bytes.Equal(got, want) {
			h.t.Fatalf("%s: content differs from the hub (err %v)", p, err)
		}
	}
	m, err := ReadMarker(h.dir)
	if err != nil || m.Repo != repo || m.Revision != rev || len(m.Files) != len(h.hub.Files) {
		h.t.Fatalf("marker %+v, err %v", m, err)
	}
	h.checkNoUnverified()
	filepath.WalkDir(h.dir, func(p string, d fs.DirEntry, err error) error {
		if strings.HasSuffix(p, PartSuffix) || strings.HasSuffix(p, SideSuffix) {
			h.t.Errorf("leftover %s", p)
		}
		return nil
	})
}

// checkNoUnverified asserts that every file at its final name has the hub's content.
func (h *harness) checkNoUnverified() {
	h.t.Helper()
	for p, want := range h.hub.Files {
		got, err := os.ReadFile(filepath.Join(h.dir, p))
		if err == nil && !bytes.Equal(got, want) {
			h.t.Fatalf("%s is at its final name with unverified content", p)
		}
	}
}

func TestPullFreshListsPagesAndSubdirsAndKeepsTokenOffCDN(t *testing.T) {
	h := newHarness(t)
	c := h.client()
	var last Progress
	var calls atomic.Int32
	c.Progress = func(p Progress) {
		if p.Done < 0 || p.Done > p.Total {
			t.Errorf("progress %+v out of range", p)
		}
		calls.Add(1)
		last = p
	}
	m, err := h.pull(c)
	if err != nil {
		t.Fatal(err)
	}
	h.checkComplete()
	if len(m.Files) != 6 || h.hub.Served() != h.hub.TotalSize() {
		t.Fatalf("%d files, served %d of %d bytes", len(m.Files), h.hub.Served(), h.hub.TotalSize())
	}
	if last.Done != last.Total || last.Total != h.hub.TotalSize() || last.FilesDone != 6 || calls.Load() < 2 {
		t.Fatalf("last progress %+v after %d calls", last, calls.Load())
	}
	var trees, cdn int
	for _, call := range h.hub.Calls() {
		switch call.Server {
		case "hub":
			if call.Auth != "Bearer hf_secret" {
				t.Errorf("hub %s call without the token: %q", call.Kind, call.Auth)
			}
			if call.Kind == "tree" {
				trees++
			}
		case "cdn":
			cdn++
			if call.Auth != "" {
				t.Errorf("token forwarded to the CDN after the redirect: %q", call.Auth)
			}
		}
	}
	// 3 directories; the root (5 entries) and nothing else exceed the page size of 3.
	if trees != 4 || cdn < 8 {
		t.Fatalf("%d tree calls (want 4: pagination + subdirectories), %d CDN calls", trees, cdn)
	}

	// A complete directory pinned to a commit is answered from the marker, without the network.
	h.hub.ResetServed()
	if _, err := h.pull(h.client()); err != nil {
		t.Fatal(err)
	}
	if n := len(h.hub.Calls()); n != 0 {
		t.Fatalf("rerun of a complete pull made %d requests", n)
	}
}

func TestPullDroppedConnectionResumesMidRange(t *testing.T) {
	for _, tc := range []struct {
		name string
		drop func(h *hubtest.Hub, w http.ResponseWriter, r *http.Request, data []byte)
	}{
		{"mid-body", func(h *hubtest.Hub, w http.ResponseWriter, r *http.Request, data []byte) { h.Drop(w, r, data, 10_000) }},
		{"before-headers", func(_ *hubtest.Hub, w http.ResponseWriter, _ *http.Request, _ []byte) {
			conn, _, _ := http.NewResponseController(w).Hijack()
			conn.Close()
		}},
		// A 206 whose Content-Length is shorter than its Content-Range: the body ends cleanly, early.
		{"short-content-length", func(h *hubtest.Hub, w http.ResponseWriter, r *http.Request, data []byte) { h.Short(w, r, data, 1000) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			var faults atomic.Int32
			h.hub.Fault = func(c hubtest.Call, w http.ResponseWriter, r *http.Request) bool {
				if c.Server == "cdn" && c.File == shard && faults.Add(1) <= 3 {
					tc.drop(h.hub, w, r, c.Data)
					return true
				}
				return false
			}
			if _, err := h.pull(h.client()); err != nil {
				t.Fatal(err)
			}
			h.checkComplete()
			if faults.Load() < 4 {
				t.Fatalf("only %d requests for the shard", faults.Load())
			}
			if h.logged("expires=") {
				t.Errorf("retry logs should name the CDN URL without its signed query: %q", h.logs)
			}
			// Every byte the server delivered was kept: retries ask only for the rest.
			if h.hub.Served() != h.hub.TotalSize() {
				t.Fatalf("served %d bytes, want exactly %d", h.hub.Served(), h.hub.TotalSize())
			}
		})
	}
}

func TestPullRejectsWrongContentLength(t *testing.T) {
	h := newHarness(t)
	var faults atomic.Int32
	h.hub.Fault = func(c hubtest.Call, w http.ResponseWriter, r *http.Request) bool {
		// A 200 (Range ignored) whose Content-Length disagrees with the listing's size.
		if c.Server == "cdn" && c.File == shard && faults.Add(1) <= 2 {
			w.Header().Set("Content-Length", "5")
			w.WriteHeader(http.StatusOK)
			w.Write(c.Data[:5])
			return true
		}
		return false
	}
	if _, err := h.pull(h.client()); err != nil {
		t.Fatal(err)
	}
	h.checkComplete()
	if !h.logged("Content-Length 5, but the listing says 300000") {
		t.Fatalf("no retry logged for the wrong Content-Length: %q", h.logs)
	}
}

func TestPullAcceptsShorterRangesWithoutBackoff(t *testing.T) {
	h := newHarness(t)
	h.hub.Fault = func(c hubtest.Call, w http.ResponseWriter, r *http.Request) bool {
		if c.Server != "cdn" {
			return false
		}
		// Answer at most 10,000 bytes of any range, correctly labelled, as RFC 9110 allows.
		var start, end int
		fmt.Sscanf(c.Range, "bytes=%d-%d", &start, &end)
		end = min(end, start+9_999)
		w.Header().Set("Content-Range", fmt.Sprintf("bytes %d-%d/%d", start, end, len(c.Data)))
		w.Header().Set("Content-Length", fmt.Sprint(end-start+1))
		w.WriteHeader(http.StatusPartialContent)
		w.Write(c.Data[start : end+1])
		return true
	}
	if _, err := h.pull(h.client()); err != nil {
		t.Fatal(err)
	}
	h.checkComplete()
	if len(h.sleeps) != 0 {
		t.Fatalf("%d backoffs for legitimate short ranges", len(h.sleeps))
	}
}

func TestPullRetriesStalledBody(t *testing.T) {
	h := newHarness(t)
	var stalls atomic.Int32
	h.hub.Fault = func(c hubtest.Call, w http.ResponseWriter, r *http.Request) bool {
		if c.Server == "cdn" && c.File == shard && stalls.Add(1) == 1 {
			h.hub.Short(&stallWriter{ResponseWriter: w, r: r}, r, c.Data, 70_000)
			return true
		}
		return false
	}
	c := h.client()
	c.StallTimeout = 50 * time.Millisecond
	if _, err := h.pull(c); err != nil {
		t.Fatal(err)
	}
	h.checkComplete()
	if !h.logged("download stalled") {
		t.Fatalf("stall not logged: %q", h.logs)
	}
}

// stallWriter sends the first 1000 bytes of a body, then hangs until the client goes away.
type stallWriter struct {
	http.ResponseWriter
	r    *http.Request
	sent int
}

func (w *stallWriter) Write(p []byte) (int, error) {
	if w.sent+len(p) > 1000 {
		p = p[:1000-w.sent]
		w.ResponseWriter.Write(p)
		http.NewResponseController(w.ResponseWriter).Flush()
		select {
		case <-w.r.Context().Done():
		case <-time.After(5 * time.Second):
		}
		return len(p), errors.New("stalled")
	}
	w.sent += len(p)
	return w.ResponseWriter.Write(p)
}

// corruptOnce flips one byte of the shard's first chunk in the first n answers for it.
func corruptFirst(h *hubtest.Hub, n int32) *atomic.Int32 {
	var count atomic.Int32
	h.Fault = func(c hubtest.Call, w http.ResponseWriter, r *http.Request) bool {
		if c.Server == "cdn" && c.File == shard && strings.HasPrefix(c.Range, "bytes=0-") && count.Add(1) <= n {
			bad := bytes.Clone(c.Data)
			bad[1234] ^= 0xff
			h.Serve(w, r, bad)
			return true
		}
		return false
	}
	return &count
}

func TestPullCorruptFileIsDownloadedAgain(t *testing.T) {
	h := newHarness(t)
	corruptFirst(h.hub, 1)
	if _, err := h.pull(h.client()); err != nil {
		t.Fatal(err)
	}
	h.checkComplete()
	if want := h.hub.TotalSize() + 300_000; h.hub.Served() != want {
		t.Fatalf("served %d, want %d (the shard twice)", h.hub.Served(), want)
	}
	if !h.logged("sha256 is") || !h.logged("downloading it again") {
		t.Fatalf("mismatch not logged: %q", h.logs)
	}
}

func TestPullCorruptFileGivesUpAndNeverPlacesIt(t *testing.T) {
	h := newHarness(t)
	corruptFirst(h.hub, 100)
	_, err := h.pull(h.client())
	if !errors.Is(err, ErrMismatch) || !strings.Contains(err.Error(), "gave up after 3 downloads") {
		t.Fatalf("err = %v", err)
	}
	for _, p := range []string{shard, shard + PartSuffix, MarkerName} {
		if _, err := os.Stat(filepath.Join(h.dir, p)); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s exists after a failed verification", p)
		}
	}
	h.checkNoUnverified()
	// Once the hub serves good bytes again, a rerun completes.
	h.hub.Fault = nil
	if _, err := h.pull(h.client()); err != nil {
		t.Fatal(err)
	}
	h.checkComplete()
}

func TestPullHTTPErrorsAreClearAndNotRetried(t *testing.T) {
	notFound := func(code string) func(c hubtest.Call, w http.ResponseWriter, r *http.Request) bool {
		return func(c hubtest.Call, w http.ResponseWriter, r *http.Request) bool {
			if c.File == "config.json" {
				w.Header().Set("X-Error-Code", code)
				http.Error(w, "Entry not found", http.StatusNotFound)
				return true
			}
			return false
		}
	}
	for _, tc := range []struct {
		name, token, repo, rev string
		fault                  func(c hubtest.Call, w http.ResponseWriter, r *http.Request) bool
		want                   []string
	}{
		{"401 no token", "", repo, rev, nil, []string{"HTTP 401", "set HF_TOKEN", "/settings/tokens"}},
		{"403 no access", "hf_other", repo, rev, nil, []string{"HTTP 403", "accept its terms", "HF_TOKEN"}},
		{"404 repo", "hf_secret", "mlx-community/Nope", rev, nil, []string{"repo mlx-community/Nope not found (HTTP 404)", "--repo"}},
		{"404 revision", "hf_secret", repo, "0000000000000000000000000000000000000000", nil, []string{"revision 0000000000000000000000000000000000000000 not found", "--revision"}},
		{"404 file", "hf_secret", repo, rev, notFound("EntryNotFound"), []string{"file config.json not found in " + repo + "@" + rev}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			h.hub.Fault = tc.fault
			c := h.client()
			c.Token = tc.token
			_, err := c.Pull(context.Background(), tc.repo, tc.rev, h.dir)
			if err == nil {
				t.Fatal("pull succeeded")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
			if strings.Contains(err.Error(), "\n") {
				t.Errorf("error is not one line: %q", err)
			}
			if len(h.sleeps) != 0 {
				t.Errorf("a 4xx was retried (%d sleeps)", len(h.sleeps))
			}
		})
	}
}

func TestPullRetries429HonouringRetryAfterAnd5xx(t *testing.T) {
	h := newHarness(t)
	var treeCalls, fileCalls atomic.Int32
	h.hub.Fault = func(c hubtest.Call, w http.ResponseWriter, r *http.Request) bool {
		switch {
		case c.Kind == "tree" && treeCalls.Add(1) == 1:
			w.Header().Set("Retry-After", "7")
			http.Error(w, "slow down", http.StatusTooManyRequests)
			return true
		case c.File == "config.json":
			switch fileCalls.Add(1) {
			case 1:
				http.Error(w, "oops", http.StatusInternalServerError)
				return true
			case 2:
				http.Error(w, "busy", http.StatusServiceUnavailable)
				return true
			}
		}
		return false
	}
	if _, err := h.pull(h.client()); err != nil {
		t.Fatal(err)
	}
	h.checkComplete()
	if len(h.sleeps) != 3 || h.sleeps[0] != 7*time.Second {
		t.Fatalf("sleeps %v: want Retry-After's 7s then two backoffs", h.sleeps)
	}
	for _, d := range h.sleeps[1:] {
		if d <= 0 || d > 4*time.Millisecond {
			t.Fatalf("backoff %v outside (0, MaxBackoff]", d)
		}
	}

	// A server that keeps failing is given up on after Attempts tries.
	h2 := newHarness(t)
	h2.hub.Fault = func(c hubtest.Call, w http.ResponseWriter, r *http.Request) bool {
		http.Error(w, "down", http.StatusBadGateway)
		return true
	}
	c := h2.client()
	c.Attempts = 3
	_, err := h2.pull(c)
	if err == nil || !strings.Contains(err.Error(), "giving up after 3 attempts") || !strings.Contains(err.Error(), "Bad Gateway") {
		t.Fatalf("err = %v", err)
	}
}

// writePartial lays out a download interrupted by an earlier pull: chunk 0 of the shard
// complete, chunk 1 half done, chunk 3 complete; config.json already verified in place; and
// tokenizer_config.json in place but stale (right size, other content).
func writePartial(t *testing.T, h *harness) (onDisk int64) {
	data := h.hub.Files[shard]
	const cs = 64 << 10
	done := []int64{cs, cs / 2, 0, cs, 0}
	part := make([]byte, 4*cs)
	copy(part[:cs+cs/2], data)
	copy(part[3*cs:], data[3*cs:4*cs])
	os.MkdirAll(h.dir, 0o755)
	os.WriteFile(filepath.Join(h.dir, shard+PartSuffix), part, 0o644)
	st, _ := json.Marshal(partState{Size: int64(len(data)), Hash: hubtest.SHA256(data), ChunkSize: cs, Done: done})
	os.WriteFile(filepath.Join(h.dir, shard+SideSuffix), st, 0o644)
	os.WriteFile(filepath.Join(h.dir, "config.json"), h.hub.Files["config.json"], 0o644)
	stale := bytes.Clone(h.hub.Files["tokenizer_config.json"])
	stale[0] ^= 1
	os.WriteFile(filepath.Join(h.dir, "tokenizer_config.json"), stale, 0o644)
	return 2*cs + cs/2 + int64(len(h.hub.Files["config.json"]))
}

func TestPullResumesPartialFileTransferringOnlyMissingBytes(t *testing.T) {
	h := newHarness(t)
	onDisk := writePartial(t, h)
	// Without the listing, OnDisk counts what the pull will count at its start (below), so a
	// free-space check made before the pull asks only for the rest.
	if got := OnDisk(h.dir); got != onDisk+900 {
		t.Fatalf("OnDisk = %d, want %d", got, onDisk+900)
	}
	c := h.client()
	var first Progress
	var once sync.Once
	c.Progress = func(p Progress) { once.Do(func() { first = p }) }
	if _, err := h.pull(c); err != nil {
		t.Fatal(err)
	}
	h.checkComplete()
	if want := h.hub.TotalSize() - onDisk; h.hub.Served() != want {
		t.Fatalf("served %d bytes, want only the missing %d", h.hub.Served(), want)
	}
	if first.Start != onDisk+900 { // the stale file counts until its re-hash fails
		t.Fatalf("progress started at %d, want %d", first.Start, onDisk+900)
	}
	var ranges []string
	for _, call := range h.hub.Calls() {
		if call.Server == "cdn" && call.File == shard {
			ranges = append(ranges, call.Range)
		}
	}
	want := []string{"bytes=98304-131071", "bytes=131072-196607", "bytes=262144-299999"}
	if fmt.Sprint(slices.Sorted(slices.Values(ranges))) != fmt.Sprint(slices.Sorted(slices.Values(want))) {
		t.Fatalf("shard ranges %v, want %v", ranges, want)
	}
}

// enospcFile fails every write once budget bytes have been written through any such file.
type enospcFile struct {
	*os.File
	budget *atomic.Int64
}

func (f enospcFile) WriteAt(p []byte, off int64) (int, error) {
	if f.budget.Add(-int64(len(p))) < 0 {
		return 0, &fs.PathError{Op: "write", Path: f.Name(), Err: syscall.ENOSPC}
	}
	return f.File.WriteAt(p, off)
}

func TestPullDiskFull(t *testing.T) {
	t.Run("up-front check", func(t *testing.T) {
		h := newHarness(t)
		c := h.client()
		c.freeSpace = func(string) (uint64, error) { return 1000, nil }
		_, err := h.pull(c)
		if err == nil || !strings.Contains(err.Error(), "not enough disk space") ||
			!strings.Contains(err.Error(), "needs 470.9 kB, only 1.0 kB is free") {
			t.Fatalf("err = %v", err)
		}
		for _, call := range h.hub.Calls() {
			if call.Kind == "file" {
				t.Fatalf("downloaded %s despite too little space", call.File)
			}
		}
	})
	t.Run("ENOSPC while writing, then resume", func(t *testing.T) {
		h := newHarness(t)
		c := h.client()
		const budget = 200_000
		var left, written atomic.Int64
		left.Store(budget)
		c.openPart = func(path string, truncate bool) (partFile, error) {
			f, err := openPartFile(path, truncate)
			if err != nil {
				return nil, err
			}
			return enospcFile{f.(*os.File), &left}, nil
		}
		c.Progress = func(p Progress) { written.Store(p.Done) }
		_, err := h.pull(c)
		if !errors.Is(err, syscall.ENOSPC) || !strings.Contains(err.Error(), "disk full while writing") {
			t.Fatalf("err = %v", err)
		}
		h.checkNoUnverified()
		if _, err := os.Stat(filepath.Join(h.dir, MarkerName)); err == nil {
			t.Fatal("marker written after ENOSPC")
		}
		if w := written.Load(); w <= 0 || w > budget {
			t.Fatalf("%d bytes accounted before the disk filled", w)
		}
		// The rerun gets a fake hub of its own. Requests the first pull sent and then abandoned
		// when the disk filled can still reach the first hub's handlers after that pull has
		// returned, and the bytes those handlers write (to a closed connection) would count as
		// served to the rerun.
		h.hub = hubtest.New(t, repo, rev, testFiles())
		h.hub.Token = "hf_secret"
		r, err := h.client().PullWith(context.Background(), repo, rev, h.dir, VerifyFast)
		if err != nil {
			t.Fatal(err)
		}
		h.checkComplete()
		if want := h.hub.TotalSize() - written.Load(); h.hub.Served() != want || r.Bytes != want {
			t.Fatalf("rerun served %d bytes and transferred %d, want the missing %d", h.hub.Served(), r.Bytes, want)
		}
	})
}

func TestConcurrentPullsIntoOneDirWait(t *testing.T) {
	h := newHarness(t)
	waiting := make(chan struct{})
	var once sync.Once
	// Hold every download until one of the pulls has reported that it waits for the lock.
	h.hub.Fault = func(c hubtest.Call, w http.ResponseWriter, r *http.Request) bool {
		if c.Kind == "file" {
			select {
			case <-waiting:
			case <-time.After(5 * time.Second):
				t.Error("no pull waited for the lock")
			}
		}
		return false
	}
	errs := make(chan error, 2)
	for range 2 {
		c := h.client()
		c.Logf = func(format string, args ...any) {
			if strings.Contains(format, "waiting for it to finish") {
				once.Do(func() { close(waiting) })
			}
		}
		go func() { _, err := h.pull(c); errs <- err }()
	}
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	h.checkComplete()
	if h.hub.Served() != h.hub.TotalSize() {
		t.Fatalf("served %d bytes for %d: both pulls downloaded", h.hub.Served(), h.hub.TotalSize())
	}
}

func TestInterruptedPullRerunCompletes(t *testing.T) {
	h := newHarness(t)
	ctx, cancel := context.WithCancel(context.Background())
	var n atomic.Int32
	h.hub.Fault = func(c hubtest.Call, w http.ResponseWriter, r *http.Request) bool {
		if c.Server == "cdn" && n.Add(1) == 4 {
			cancel() // as if the user pressed Ctrl-C mid-download
			h.hub.Drop(w, r, c.Data, 5000)
			return true
		}
		return false
	}
	c := h.client()
	c.Streams = 2
	if _, err := c.Pull(ctx, repo, rev, h.dir); !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v", err)
	}
	h.checkNoUnverified()
	if _, err := ReadMarker(h.dir); !errors.Is(err, ErrNotPulled) {
		t.Fatalf("marker after an interrupted pull: %v", err)
	}
	first := h.hub.Served()
	h.hub.ResetServed()
	h.hub.Fault = nil
	if _, err := h.pull(h.client()); err != nil {
		t.Fatal(err)
	}
	h.checkComplete()
	if second := h.hub.Served(); second >= h.hub.TotalSize() || first+second < h.hub.TotalSize() {
		t.Fatalf("first run %d + rerun %d bytes for %d: the rerun did not resume", first, second, h.hub.TotalSize())
	}
}

func TestVerifyFastAndFull(t *testing.T) {
	h := newHarness(t)
	if _, err := Verify(context.Background(), h.dir, VerifyFast, nil); !errors.Is(err, ErrNotPulled) {
		t.Fatalf("verify before pull: %v", err)
	}
	if _, err := h.pull(h.client()); err != nil {
		t.Fatal(err)
	}
	var last Progress
	if _, err := Verify(context.Background(), h.dir, VerifyFull, func(p Progress) { last = p }); err != nil {
		t.Fatal(err)
	}
	if last.Done != h.hub.TotalSize() || last.FilesDone != 6 {
		t.Fatalf("full verify progress %+v", last)
	}

	// Damage one byte: sizes still match, hashes do not.
	path := filepath.Join(h.dir, shard)
	data, _ := os.ReadFile(path)
	data[7] ^= 1
	os.WriteFile(path, data, 0o644)
	if _, err := Verify(context.Background(), h.dir, VerifyFast, nil); err != nil {
		t.Fatalf("fast verify reads contents: %v", err)
	}
	_, err := Verify(context.Background(), h.dir, VerifyFull, nil)
	if !errors.Is(err, ErrMismatch) || !strings.Contains(err.Error(), shard) {
		t.Fatalf("full verify of a damaged file: %v", err)
	}
	// The mismatch dropped the marker, so the next pull repairs just that file.
	h.hub.ResetServed()
	if _, err := h.pull(h.client()); err != nil {
		t.Fatal(err)
	}
	h.checkComplete()
	if h.hub.Served() != 300_000 {
		t.Fatalf("repair served %d bytes, want the one shard", h.hub.Served())
	}

	os.Truncate(path, 10)
	if _, err := Verify(context.Background(), h.dir, VerifyFast, nil); !errors.Is(err, ErrMismatch) || !strings.Contains(err.Error(), "size 10, want 300000") {
		t.Fatalf("fast verify of a truncated file: %v", err)
	}
}

// PullWith says how it found the directory complete; VerifyFull re-hashes every file, then
// reports and downloads again just the damaged or missing ones.
func TestPullWithSaysWhatItCheckedAndVerifyFullRepairs(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	pull := func(c *Client, mode VerifyMode) *Result {
		t.Helper()
		h.hub.ResetServed()
		r, err := c.PullWith(ctx, repo, rev, h.dir, mode)
		if err != nil {
			t.Fatal(err)
		}
		if r.Marker == nil || len(r.Marker.Files) != 6 {
			t.Fatalf("marker %+v", r.Marker)
		}
		return r
	}
	if r := pull(h.client(), VerifyFast); r.Check != CheckHashes || r.Downloaded != 6 || r.Hashed != 0 || r.Bytes != h.hub.TotalSize() || r.Replaced != nil {
		t.Fatalf("fresh pull: %+v", r)
	}
	if r := pull(h.client(), VerifyFast); r.Check != CheckMarker || len(h.hub.Calls()) != 0 {
		t.Fatalf("rerun of a commit: %+v after %d requests", r, len(h.hub.Calls()))
	}

	// Same-size damage to one file, another missing.
	data, _ := os.ReadFile(filepath.Join(h.dir, shard))
	data[7] ^= 1
	os.WriteFile(filepath.Join(h.dir, shard), data, 0o644)
	os.Remove(filepath.Join(h.dir, "sub", "extra.json"))
	c := h.client()
	var first, last Progress
	var once sync.Once
	c.Progress = func(p Progress) { once.Do(func() { first = p }); last = p }
	r := pull(c, VerifyFull)
	h.checkComplete()
	if r.Check != CheckHashes || r.Hashed != 4 || r.Downloaded != 2 || r.Bytes != 300_003 || !slices.Equal(r.Replaced, []string{shard}) {
		t.Fatalf("full verification: %+v", r)
	}
	if h.hub.Served() != 300_003 || !h.logged(shard+": sha256 is") || !h.logged("downloading it again") {
		t.Fatalf("served %d; logs %q", h.hub.Served(), h.logs)
	}
	// The re-hash is progress, not bytes already done at the start.
	if first.Start != 0 || last.Done != last.Total || last.FilesDone != 6 {
		t.Fatalf("progress: first %+v, last %+v", first, last)
	}
	if r := pull(h.client(), VerifyFull); r.Hashed != 6 || r.Downloaded != 0 || r.Replaced != nil || h.hub.Served() != 0 {
		t.Fatalf("full verification of an intact directory: %+v, served %d", r, h.hub.Served())
	}

	// A branch name is checked against the Hub's current listing.
	branch := hubtest.New(t, repo, "main", testFiles())
	bc := h.client()
	bc.Endpoint, bc.Token = branch.URL(), ""
	if r, err := bc.PullWith(ctx, repo, "main", h.dir, VerifyFast); err != nil || r.Check != CheckHashes || r.Hashed != 6 {
		t.Fatalf("pull of main over the same files: %+v, %v", r, err)
	}
	if r, err := bc.PullWith(ctx, repo, "main", h.dir, VerifyFast); err != nil || r.Check != CheckListing || branch.Served() != 0 {
		t.Fatalf("rerun of a branch: %+v, %v, served %d", r, err, branch.Served())
	}
}

func TestFormatBytes(t *testing.T) {
	for n, want := range map[int64]string{0: "0 B", 999: "999 B", 1000: "1.0 kB", 19_400_000_000: "19.4 GB", 1_500_000: "1.5 MB"} {
		if got := FormatBytes(n); got != want {
			t.Errorf("FormatBytes(%d) = %q, want %q", n, got, want)
		}
	}
}

// TestRetryReasons: each kind of retryable failure gets the few words a status line shows, and
// the retry loop reports every retry it waits for, with that reason and its wait.
func TestRetryReasons(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want string
	}{
		{&StatusError{Code: http.StatusServiceUnavailable, URL: "u"}, "HTTP 503"},
		{fmt.Errorf("GET u: no data for 1m: %w", errStalled), "no data"},
		{fmt.Errorf("GET u: got 1 of 2 bytes: %w", errShortBody), "connection dropped"},
		{newNetError(&os.SyscallError{Syscall: "connect", Err: syscall.ECONNREFUSED}), "connection refused"},
		{newNetError(&os.SyscallError{Syscall: "read", Err: syscall.ECONNRESET}), "connection reset"},
		{&protocolError{"bad Content-Range"}, "bad answer from the server"},
		{newNetError(errors.New("tls: handshake failure")), "network error"},
	} {
		if got := RetryReason(tc.err); got != tc.want {
			t.Errorf("RetryReason(%v) = %q, want %q", tc.err, got, tc.want)
		}
	}

	c := New()
	c.Attempts = 3
	c.sleep = func(context.Context, time.Duration) error { return nil }
	c.Backoff, c.MaxBackoff = time.Second, time.Second
	var heard []Retry
	c.Retrying = func(r Retry) { heard = append(heard, r) }
	err := c.retry(context.Background(), "f", func() (bool, error) {
		return false, &StatusError{Code: http.StatusBadGateway, URL: "u", RetryAfter: 7 * time.Second}
	})
	if err == nil || len(heard) != 2 {
		t.Fatalf("err %v, heard %d retries; want an error after 2 retries", err, len(heard))
	}
	if r := heard[1]; r.Reason != "HTTP 502" || r.Attempt != 2 || r.Attempts != 2 || r.Wait != 7*time.Second || r.Err == nil {
		t.Fatalf("second retry %+v", r)
	}
}
