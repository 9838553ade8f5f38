package server

import (
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lilyformac/lily/engine/chat"
	"github.com/lilyformac/lily/engine/grammar"
	"github.com/lilyformac/lily/engine/runner"
)

// oneAtATime is a scripted backend whose memory holds one sequence at a time (Fits).
type oneAtATime struct{ *scripted }

func (oneAtATime) Fits(positions []int) bool { return len(positions) < 2 }

// TestRunningCountsTheEngineLoop (issue 32, defect 6b): with two places in the queue but memory
// for one sequence, the second request waits in the engine loop, and /status and /metrics say
// one running and one waiting, not the two queue places taken.
func TestRunningCountsTheEngineLoop(t *testing.T) {
	b := newScripted(t, "x y z")
	b.gate = make(chan struct{})
	tok := testTokenizer(t)
	end, _ := tok.TokenID("<|im_end|>")
	s := New(Config{})
	s.SetModel(&Model{
		ID:        "test-model",
		Runner:    runner.New(oneAtATime{b}, runner.Options{Parallel: 2, Context: b.cfg.MaxPositions}),
		Tokenizer: TokenizerOf(tok),
		Template:  TemplateOf(chat.Builtin()),
		StopIDs:   []int{end},
		Context:   b.cfg.MaxPositions,
		Vocab:     sync.OnceValues(func() (*grammar.Vocab, error) { return grammar.VocabFromTokenizer(tok, b.cfg.VocabSize, []int{end}) }),
	})
	ts := startHTTP(t, s)
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() {
			if resp, body := post(t, ts.URL+"/v1/chat/completions", `{"messages":`+userHi+`,"max_tokens":2}`); resp.StatusCode != 200 {
				t.Errorf("request: %d %s", resp.StatusCode, body)
			}
		})
	}
	defer wg.Wait()
	defer close(b.gate)
	var st struct{ Running, Waiting, Parallel int }
	for deadline := time.Now().Add(10 * time.Second); st.Running+st.Waiting < 2 && time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		_, body := do(t, http.MethodGet, ts.URL+"/status", "", "")
		if err := json.Unmarshal(body, &st); err != nil {
			t.Fatalf("/status: %v: %s", err, body)
		}
	}
	if st.Running != 1 || st.Waiting != 1 || st.Parallel != 2 {
		t.Fatalf("/status running %d, waiting %d, parallel %d: want 1, 1, 2 (the second request waits for memory)", st.Running, st.Waiting, st.Parallel)
	}
	_, body := do(t, http.MethodGet, ts.URL+"/metrics", "", "")
	for _, m := range []string{"\nlily_running_sequences 1\n", "\nlily_waiting_sequences 1\n"} {
		if !strings.Contains(string(body), m) {
			t.Errorf("/metrics lacks %q", strings.TrimSpace(m))
		}
	}
}
