package main

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/spf13/cobra"

	"github.com/lilyformac/lily/engine/lifecycle"
	"github.com/lilyformac/lily/engine/model"
	"github.com/lilyformac/lily/metal/decode"
	"github.com/lilyformac/lily/metal/gpu"
	"github.com/lilyformac/lily/metal/plan"
	"github.com/lilyformac/lily/server"
)

// TestServeStartupFailsThenRetries: a checkpoint without a tokenizer fails in the load phase with
// a clear error; once the file is there, a retry walks verify → checks → load → warm → ready and
// publishes the model.
func TestServeStartupFailsThenRetries(t *testing.T) {
	t.Setenv("XDG_CACHE_HOME", t.TempDir())
	demo, err := demoDir()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for _, f := range []string{"config.json", "model.safetensors", "chat_template.jinja"} {
		if err := os.Symlink(filepath.Join(demo, f), filepath.Join(dir, f)); err != nil {
			t.Fatal(err)
		}
	}
	var published *server.Model
	var closers int
	publish := func(m *server.Model, closeFn func()) {
		if m != nil {
			published = m
		}
		if closeFn != nil {
			closers++
		}
	}
	state := lifecycle.NewState(io.Discard)
	r := &lifecycle.Runner{State: state, Steps: startupSteps(serveOptions{model: dir, backend: "cpu", cacheMB: 16}, publish)}
	if err := r.Run(context.Background()); err == nil {
		t.Fatal("startup succeeded without tokenizer.json")
	}
	st := state.Status()
	if st.Phase != lifecycle.PhaseError || st.FailedPhase != lifecycle.PhaseLoad || !strings.Contains(st.Error, "tokenizer.json") {
		t.Fatalf("status after failure: %+v", st)
	}
	if published != nil {
		t.Fatal("a model was published although loading failed")
	}
	if err := os.Symlink(filepath.Join(demo, "tokenizer.json"), filepath.Join(dir, "tokenizer.json")); err != nil {
		t.Fatal(err)
	}
	if err := r.Retry(context.Background()); err != nil {
		t.Fatalf("retry: %v", err)
	}
	if st := state.Status(); st.Phase != lifecycle.PhaseReady {
		t.Fatalf("status after retry: %+v", st)
	}
	if published == nil || published.ID != filepath.Base(dir) || published.Context != 32768 || closers != 1 {
		t.Fatalf("published %+v, closers %d", published, closers)
	}
}

func TestServeOptionsChecked(t *testing.T) {
	ok := serveOptions{host: "127.0.0.1", port: 8000, queue: 16, cacheMB: 4096, maxBodyMB: 16, timeout: time.Minute, stallTimeout: time.Second, kvBits: 16, backend: "emu"}
	if err := ok.check(); err != nil {
		t.Fatal(err)
	}
	zeroQueue := ok
	zeroQueue.queue = 0 // documented: nothing may wait
	if err := zeroQueue.check(); err != nil {
		t.Fatalf("--queue 0: %v", err)
	}
	tensor := gpu.RouteChoice{Route: plan.Tensor, Forced: true}
	for flag, mutate := range map[string]func(*serveOptions){
		"--queue -1":                   func(o *serveOptions) { o.queue = -1 },
		"--max-body-mb 0":              func(o *serveOptions) { o.maxBodyMB = 0 },
		"--cache-mb -1":                func(o *serveOptions) { o.cacheMB = -1 },
		"--ctx -5":                     func(o *serveOptions) { o.ctx = -5 },
		"--request-timeout":            func(o *serveOptions) { o.timeout = 0 },
		"--stall-timeout -1":           func(o *serveOptions) { o.stallTimeout = -time.Second },
		"--port 70000":                 func(o *serveOptions) { o.port = 70000 },
		"--ollama-port -1":             func(o *serveOptions) { o.ollamaPort = -1 },
		"--ollama-port 8000":           func(o *serveOptions) { o.ollamaPort = 8000 }, // --port's
		"--kv-bits 4":                  func(o *serveOptions) { o.kvBits = 4 },
		"--kv-bits 8 (cpu)":            func(o *serveOptions) { o.kvBits, o.backend = 8, "cpu" },
		"--prefill-chunk -2":           func(o *serveOptions) { o.prefillChunk = -2 },
		"--idle-unload -1s":            func(o *serveOptions) { o.idleUnload = -time.Second },
		"--prefill-route tensor (cpu)": func(o *serveOptions) { o.prefillRoute, o.backend = tensor, "cpu" },
		"--vision maybe":               func(o *serveOptions) { o.images.vision = "maybe" },
		"--image-max-pixels 100":       func(o *serveOptions) { o.images.maxPixels = 100 },
		"--image-cache-mb -1":          func(o *serveOptions) { o.images.cacheMB = -1 },
	} {
		o := ok
		mutate(&o)
		err := o.check()
		if err == nil || !strings.Contains(err.Error(), strings.Fields(flag)[0]) {
			t.Errorf("%s: %v", flag, err)
		}
	}
	// --prefill-route is parsed where the flag is read (gpu.RouteChoice), on every command with it.
	for _, cmd := range []*cobra.Command{newServeCmd(), newRunCmd(), newBenchCmd()} {
		if err := cmd.Flags().Set("prefill-route", "ane"); err == nil || !strings.Contains(err.Error(), "expected tensor, simdgroup or auto") {
			t.Errorf("%s --prefill-route ane: %v", cmd.Name(), err)
		}
		if err := cmd.Flags().Set("prefill-route", "tensor"); err != nil || cmd.Flags().Lookup("prefill-route").Value.String() != "tensor" {
			t.Errorf("%s --prefill-route tensor: %v", cmd.Name(), err)
		}
	}
}

// TestServeHelpHidesKey: the key in $LILY_API_KEY is not the flag's printed default.
func TestServeHelpHidesKey(t *testing.T) {
	t.Setenv("LILY_API_KEY", "topsecret-123")
	root := newRootCmd()
	var out strings.Builder
	root.SetOut(&out)
	root.SetErr(&out)
	root.SetArgs([]string{"serve", "--help"})
	if err := root.Execute(); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(out.String(), "topsecret") || !strings.Contains(out.String(), "$LILY_API_KEY") {
		t.Fatalf("serve --help:\n%s", out.String())
	}
}

// syncBuffer is a goroutine-safe log sink.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestServeShutdownEndsStreams: a stop signal (the command's context ending, as SIGTERM ends
// it) with two streams open, one generating and one queued, ends each with an error event and
// [DONE], and serve returns without an error within the grace period.
func TestServeShutdownEndsStreams(t *testing.T) {
	t.Setenv("XDG_CACHE_HOME", t.TempDir())
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var log syncBuffer
	root := newRootCmd()
	root.SetOut(&log)
	root.SetErr(&log)
	root.SetArgs([]string{"serve", "--demo", "--backend", "cpu", "--port", "0", "--api-key", ""})
	served := make(chan error, 1)
	go func() { served <- root.ExecuteContext(ctx) }()
	base := ""
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if m := regexp.MustCompile(`ready at (http://\S+)/v1`).FindStringSubmatch(log.String()); m != nil {
			base = m[1]
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("serve did not become ready:\n%s", log.String())
		}
	}
	// No end-of-turn token can be chosen: each stream runs until it is stopped.
	body := `{"messages":[{"role":"user","content":"count"}],"stream":true,"max_tokens":20000,"logit_bias":{"151643":-100,"151645":-100}}`
	streams := make(chan []string, 2)
	for range 2 {
		resp, err := http.Post(base+"/v1/chat/completions", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		br := bufio.NewReader(resp.Body)
		if _, err := br.ReadString('\n'); err != nil {
			t.Fatal(err)
		}
		go func() {
			defer resp.Body.Close()
			var data []string
			for {
				line, err := br.ReadString('\n')
				if strings.HasPrefix(line, "data: ") {
					data = append(data, strings.TrimSpace(strings.TrimPrefix(line, "data: ")))
				}
				if err != nil {
					streams <- data
					return
				}
			}
		}()
	}
	time.Sleep(100 * time.Millisecond)
	start := time.Now()
	cancel()
	select {
	case err := <-served:
		if err != nil {
			t.Fatalf("serve after the stop signal: %v", err)
		}
	case <-time.After(shutdownGrace + 2*time.Second):
		t.Fatalf("serve still running %v after the stop signal", time.Since(start))
	}
	for range 2 {
		data := <-streams
		if len(data) < 2 || data[len(data)-1] != "[DONE]" || !strings.Contains(data[len(data)-2], "shutting_down") {
			t.Fatalf("stream end: %q", data[max(0, len(data)-2):])
		}
	}
	t.Logf("serve stopped %v after the signal", time.Since(start))
}

// TestServeContextFromGPUMemory: on a GPU backend the context served is what its working set
// holds beside the weights (the emulator stands in for Metal's recommendedMaxWorkingSetSize),
// and /v1/models, /status and the startup detail say so and why; a --ctx that does not fit
// fails the load with a clear error.
func TestServeContextFromGPUMemory(t *testing.T) {
	dir := "../../testdata/golden/tiny-a"
	w, err := model.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	mem, _ := decode.MemoryOf(w.Config, 16)
	w.Close()
	// room for 5 pages of 256 positions: 4 for a session, one spare (decode.Memory.Fit)
	ws := mem.Weights + mem.State + mem.Scratch + 512<<20 + 5*256*mem.KVPerPosition
	b, cfg, closeFn, err := openBackend("emu", dir, backendOptions{emuMemory: ws})
	if err != nil {
		t.Fatal(err)
	}
	d := b.Describe()
	n, why := d.Context, d.ContextWhy
	closeFn()
	if n != 1024 || cfg.MaxPositions != 4096 || !strings.Contains(why, "1024 of the model's 4096 positions") {
		t.Fatalf("context %d (%q)", n, why)
	}
	if _, _, _, err := openBackend("emu", dir, backendOptions{ctx: 2000, emuMemory: ws}); err == nil || !strings.Contains(err.Error(), "--ctx 2000") {
		t.Fatalf("--ctx 2000 in room for 1024: %v", err)
	}
	if err := (serveOptions{host: "127.0.0.1", backend: "cpu", maxBodyMB: 1, timeout: time.Second, stallTimeout: time.Second, emuMemoryMB: 5}).check(); err == nil {
		t.Fatal("--emu-gpu-memory-mb accepted with the cpu backend")
	}

	// Served: the demo model on the emulator with a working set a few MiB above its weights and
	// its vision tower's memory (its weights and the largest image's activations), which the
	// context does not get.
	t.Setenv("XDG_CACHE_HOME", t.TempDir())
	demo, err := demoDir()
	if err != nil {
		t.Fatal(err)
	}
	dw, err := model.Load(demo)
	if err != nil {
		t.Fatal(err)
	}
	dm, _ := decode.MemoryOf(dw.Config, 16)
	tower, err := gpu.Size(dw.Config, gpu.GPUOptions{}, gpu.Device{})
	dw.Close()
	if err != nil || tower.VisionBytes() == 0 {
		t.Fatalf("the demo's tower: %d bytes, %v", tower.VisionBytes(), err)
	}
	mb := int((dm.Weights+dm.State+dm.Scratch+512<<20+tower.VisionBytes())>>20) + 4
	want := dm.Fit(int64(mb)<<20 - tower.VisionBytes())
	m, closeModel, err := loadServedModel(serveOptions{demo: true, backend: "emu", emuMemoryMB: mb, cacheMB: 16})
	if err != nil {
		t.Fatal(err)
	}
	defer closeModel()
	srv := server.New(server.Config{})
	srv.SetModel(m)
	ts := httptest.NewServer(srv)
	defer ts.Close()
	var models struct {
		Data []struct {
			ContextLength int `json:"context_length"`
		} `json:"data"`
	}
	getJSON(t, ts.URL+"/v1/models", &models)
	var status struct {
		ContextLength int    `json:"context_length"`
		ContextNote   string `json:"context_note"`
		PrefillRoute  string `json:"prefill_route"`
	}
	getJSON(t, ts.URL+"/status", &status)
	if m.Context != want || len(models.Data) != 1 || models.Data[0].ContextLength != want || status.ContextLength != want || !strings.Contains(status.ContextNote, "working set") ||
		status.PrefillRoute != "simdgroup: the emulator runs either route: simdgroup unless --prefill-route tensor" {
		t.Fatalf("served context %d (want %d): /v1/models %+v, /status %+v", m.Context, want, models, status)
	}
}

func getJSON(t *testing.T, url string, v any) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		t.Fatal(err)
	}
}

// TestServeOllamaPort: --ollama-port serves the same API on a second loopback port, shut down
// with the first; a port already taken (Ollama itself running) is a clear error.
func TestServeOllamaPort(t *testing.T) {
	t.Setenv("XDG_CACHE_HOME", t.TempDir())
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := strconv.Itoa(busy.Addr().(*net.TCPAddr).Port)
	serve := func(ctx context.Context, log io.Writer) error {
		root := newRootCmd()
		root.SetOut(log)
		root.SetErr(log)
		root.SetArgs([]string{"serve", "--demo", "--backend", "cpu", "--port", "0", "--ollama-port", port, "--api-key", ""})
		return root.ExecuteContext(ctx)
	}
	if err := serve(context.Background(), io.Discard); err == nil || !strings.Contains(err.Error(), "port "+port+" is already in use") || !strings.Contains(err.Error(), "Ollama") {
		t.Fatalf("--ollama-port on a busy port: %v", err)
	}
	busy.Close()

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var log syncBuffer
	served := make(chan error, 1)
	go func() { served <- serve(ctx, &log) }()
	for deadline := time.Now().Add(60 * time.Second); !strings.Contains(log.String(), "ready at"); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("serve did not become ready:\n%s", log.String())
		}
	}
	ollama := "http://127.0.0.1:" + port
	if !strings.Contains(log.String(), "Ollama API also at "+ollama) {
		t.Fatalf("log:\n%s", log.String())
	}
	resp, err := http.Post(ollama+"/api/chat", "application/json", strings.NewReader(`{"model":"m","messages":[{"role":"user","content":"Hi"}],"stream":false,"options":{"num_predict":3}}`))
	if err != nil {
		t.Fatal(err)
	}
	var r struct {
		Done      bool `json:"done"`
		EvalCount int  `json:"eval_count"`
	}
	json.NewDecoder(resp.Body).Decode(&r)
	resp.Body.Close()
	if resp.StatusCode != 200 || !r.Done || r.EvalCount != 3 {
		t.Fatalf("chat on the Ollama port: %d %+v", resp.StatusCode, r)
	}
	cancel()
	select {
	case err := <-served:
		if err != nil {
			t.Fatalf("serve after the stop signal: %v", err)
		}
	case <-time.After(shutdownGrace + 2*time.Second):
		t.Fatal("serve still running after the stop signal")
	}
	if c, err := net.Dial("tcp", "127.0.0.1:"+port); err == nil {
		c.Close()
		t.Fatal("the Ollama port still accepts connections after shutdown")
	}
}
