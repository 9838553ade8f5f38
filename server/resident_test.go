package server

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

	"github.com/lilyformac/lily/engine/chat"
	"github.com/lilyformac/lily/engine/cpu"
	"github.com/lilyformac/lily/engine/demo"
	"github.com/lilyformac/lily/engine/model"
	"github.com/lilyformac/lily/engine/runner"
	"github.com/lilyformac/lily/resources"
)

// demoLoader loads the demo checkpoint on the CPU backend as lily serve would, counting loads and
// unloads; fail makes the next load fail.
type demoLoader struct {
	t       *testing.T
	dir     string
	s       *Server
	mu      sync.Mutex
	close   func()
	loads   atomic.Int32
	unloads atomic.Int32
	fail    atomic.Bool
	slow    atomic.Bool   // the next unload takes 300 ms, after telling unloading
	started chan struct{} // told when a slow unload begins
}

func newDemoLoader(t *testing.T) *demoLoader {
	raw, err := resources.DemoTokenizerJSON()
	if err != nil {
		t.Fatal(err)
	}
	tok := testTokenizer(t)
	var eos []int
	for _, s := range []string{"<|im_end|>", "<|endoftext|>"} {
		id, _ := tok.TokenID(s)
		eos = append(eos, id)
	}
	dir, err := demo.Ensure(t.TempDir(), demo.Files{TokenizerJSON: raw, ChatTemplate: []byte(chat.BuiltinSource()), VocabSize: tok.VocabSize(), EOSTokenIDs: eos})
	if err != nil {
		t.Fatal(err)
	}
	return &demoLoader{t: t, dir: dir, started: make(chan struct{}, 1)}
}

// model opens the checkpoint: weights, CPU backend, runner; its memory is the mapped weights
// plus the prefix cache's snapshots.
func (l *demoLoader) model() (*Model, func(), error) {
	w, err := model.Load(l.dir)
	if err != nil {
		return nil, nil, err
	}
	fi, _ := os.Stat(filepath.Join(l.dir, "model.safetensors"))
	r := runner.New(cpu.New(w), runner.Options{CacheBytes: 16 << 20, Parallel: 2})
	tok := testTokenizer(l.t)
	end, _ := tok.TokenID("<|im_end|>")
	m := &Model{ID: "lily-demo", Runner: r, Tokenizer: TokenizerOf(tok), Template: TemplateOf(chat.Builtin()), StopIDs: []int{end},
		Context: r.Context(), Memory: func() int64 { return fi.Size() + r.Cache().Stats().Bytes }}
	return m, func() { w.Close() }, nil
}

func (l *demoLoader) Load(ctx context.Context) error {
	if l.fail.Swap(false) {
		return errors.New("the weights are gone")
	}
	m, closeFn, err := l.model()
	if err != nil {
		return err
	}
	l.mu.Lock()
	l.close = closeFn
	l.mu.Unlock()
	l.loads.Add(1)
	l.s.SetModel(m)
	return nil
}

func (l *demoLoader) Unload() {
	if l.slow.Swap(false) {
		l.started <- struct{}{}
		time.Sleep(300 * time.Millisecond)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.close()
	l.close = nil
	l.unloads.Add(1)
}

type statusReply struct {
	Phase, Detail, Error string
	FailedPhase          string `json:"failed_phase"`
	MemoryBytes          int64  `json:"memory_bytes"`
}

func getStatus(t *testing.T, base string) statusReply {
	t.Helper()
	resp, body := do(t, http.MethodGet, base+"/status", "", "")
	var st statusReply
	if resp.StatusCode != http.StatusOK || json.Unmarshal(body, &st) != nil {
		t.Fatalf("/status: %d %s", resp.StatusCode, body)
	}
	return st
}

// waitPhase polls /status until it reports phase (at most 250 reads, 10 s).
func waitPhase(t *testing.T, base, phase string) statusReply {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for i := 0; i < 250 && time.Now().Before(deadline); i++ {
		if st := getStatus(t, base); st.Phase == phase {
			return st
		}
		time.Sleep(40 * time.Millisecond)
	}
	t.Fatalf("/status never reported phase %s: %+v", phase, getStatus(t, base))
	return statusReply{}
}

// ask sends one greedy chat request and returns its answer.
func ask(t *testing.T, base string) (int, string) {
	resp, body := post(t, base+"/v1/chat/completions", `{"messages":[{"role":"user","content":"Hi"}],"max_tokens":6,"temperature":0}`)
	var cr chatResp
	json.Unmarshal(body, &cr)
	if resp.StatusCode != http.StatusOK || len(cr.Choices) == 0 {
		return resp.StatusCode, string(body)
	}
	msg := cr.Choices[0].Message
	if msg.Content != nil {
		return resp.StatusCode, msg.ReasoningContent + "|" + *msg.Content
	}
	return resp.StatusCode, msg.ReasoningContent + "|" + cr.Choices[0].FinishReason
}

// askTwice sends two requests at once; both must get want.
func askTwice(t *testing.T, base, want, when string) {
	t.Helper()
	var wg sync.WaitGroup
	answers, codes := make([]string, 2), make([]int, 2)
	for i := range answers {
		wg.Go(func() { codes[i], answers[i] = ask(t, base) })
	}
	wg.Wait()
	for i := range answers {
		if codes[i] != http.StatusOK || answers[i] != want {
			t.Errorf("request %d %s: %d %q, want %q", i, when, codes[i], answers[i], want)
		}
	}
}

// TestIdleUnloadAndReload: the demo model on the CPU backend is unloaded after 200 ms without
// requests (/status says so and its memory drops to 0), two requests at once load it again once
// and get the answer it gave before, two that arrive while it is being unloaded wait for the
// unload and share one load, POST /status/load loads it from the menu, and a failed load is each
// waiter's error and /status's until the next request loads it.
func TestIdleUnloadAndReload(t *testing.T) {
	l := newDemoLoader(t)
	s := New(Config{IdleUnload: 200 * time.Millisecond, Load: l.Load, Unload: l.Unload})
	l.s = s
	if err := l.Load(context.Background()); err != nil {
		t.Fatal(err)
	}
	base := newHTTPTest(t, s)
	if st := getStatus(t, base); st.Phase == "ready" && st.MemoryBytes <= 0 {
		t.Fatalf("ready with memory_bytes %d", st.MemoryBytes)
	}
	code, want := ask(t, base)
	if code != http.StatusOK {
		t.Fatalf("first answer: %d %s", code, want)
	}

	// /status says unloaded from the moment the unload begins (the model is out of reach), so the
	// loader's Unload may still be running: wait for it, bounded.
	st := waitPhase(t, base, "unloaded")
	for i := 0; i < 250 && l.unloads.Load() == 0; i++ {
		time.Sleep(20 * time.Millisecond)
	}
	if st.MemoryBytes != 0 || !strings.Contains(st.Detail, "unloaded") || l.unloads.Load() != 1 {
		t.Fatalf("unloaded status %+v after %d unloads", st, l.unloads.Load())
	}
	if resp, body := do(t, http.MethodGet, base+"/health", "", ""); resp.StatusCode != http.StatusOK {
		t.Fatalf("/health while unloaded: %d %s", resp.StatusCode, body)
	}

	askTwice(t, base, want, "after the unload")
	if n := l.loads.Load(); n != 2 {
		t.Fatalf("%d loads: the two waiting requests should share one", n)
	}

	l.slow.Store(true)
	select {
	case <-l.started:
	case <-time.After(10 * time.Second):
		t.Fatal("the model was not unloaded again")
	}
	askTwice(t, base, want, "during the unload")
	if n, u := l.loads.Load(), l.unloads.Load(); n != 3 || u != 2 {
		t.Fatalf("%d loads, %d unloads: requests during an unload wait for it, then share one load", n, u)
	}

	waitPhase(t, base, "unloaded")
	if resp, body := post(t, base+"/status/load", ""); resp.StatusCode != http.StatusAccepted {
		t.Fatalf("POST /status/load: %d %s", resp.StatusCode, body)
	}
	if st := waitPhase(t, base, "ready"); st.MemoryBytes <= 0 {
		t.Fatalf("reloaded with memory_bytes %d", st.MemoryBytes)
	}

	waitPhase(t, base, "unloaded")
	l.fail.Store(true)
	if code, body := ask(t, base); code != http.StatusServiceUnavailable || !strings.Contains(body, "the weights are gone") {
		t.Fatalf("request during a failed load: %d %s", code, body)
	}
	if st := getStatus(t, base); st.Phase != "error" || st.FailedPhase != "load" || !strings.Contains(st.Error, "the weights are gone") {
		t.Fatalf("status after a failed load: %+v", st)
	}
	if code, got := ask(t, base); code != http.StatusOK || got != want {
		t.Fatalf("request after a failed load: %d %q", code, got)
	}
}
