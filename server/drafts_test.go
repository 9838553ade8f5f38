package server

import (
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"testing"

	"github.com/lilyformac/lily/engine/backend"
	"github.com/lilyformac/lily/engine/chat"
	"github.com/lilyformac/lily/engine/cpu"
	"github.com/lilyformac/lily/engine/demo"
	"github.com/lilyformac/lily/engine/grammar"
	"github.com/lilyformac/lily/engine/model"
	"github.com/lilyformac/lily/engine/runner"
	"github.com/lilyformac/lily/resources"
)

// draftServer serves the demo model on the backend newBackend makes of it, four requests at
// once, with drafting in mode.
func draftServer(t *testing.T, mode string, newBackend func(*model.Weights) backend.Backend) string {
	t.Helper()
	tok := testTokenizer(t)
	raw, err := resources.DemoTokenizerJSON()
	if err != nil {
		t.Fatal(err)
	}
	end, _ := tok.TokenID("<|im_end|>")
	dir, err := demo.Ensure(t.TempDir(), demo.Files{TokenizerJSON: raw, ChatTemplate: []byte(chat.BuiltinSource()), VocabSize: tok.VocabSize(), EOSTokenIDs: []int{end}})
	if err != nil {
		t.Fatal(err)
	}
	w, err := model.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	V := w.Config.VocabSize
	s := New(Config{})
	s.SetModel(&Model{ID: "lily-demo", Runner: runner.New(newBackend(w), runner.Options{Parallel: 4, Context: 4096, Drafts: runner.DraftOptions{Mode: mode}}),
		Tokenizer: TokenizerOf(tok), Template: TemplateOf(chat.Builtin()), StopIDs: []int{end}, Context: 4096,
		Vocab: func() (*grammar.Vocab, error) { return grammar.VocabFromTokenizer(tok, V, []int{end}) }})
	return startHTTP(t, s).URL
}

// draftBodies are the four requests: greedy, seeded T 0.8 with top-p, penalties and logprobs, a
// forced tool call (seeded, at the default temperature), and a greedy json_schema answer; the
// free ones biased toward two tokens so their text repeats (the demo's random weights rarely
// repeat text by themselves).
func draftBodies(a, b int, scale float64) []string {
	n := func(most int) int { return int(float64(most) * scale) }
	// The tool call and the schema need 20 tokens to be valid at all.
	m := func(most int) int { return max(n(most), 20) }
	bias := fmt.Sprintf(`"logit_bias":{"%d":30,"%d":30}`, a, b)
	tool := `"tools":[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}}}],` +
		`"tool_choice":{"type":"function","function":{"name":"get_weather"}}`
	schema := `"response_format":{"type":"json_schema","json_schema":{"name":"r","schema":{"type":"object","properties":{"n":{"type":"integer"},"s":{"type":"string"}},"required":["n","s"]}}}`
	msg := `"messages":[{"role":"user","content":"Say something."}]`
	return []string{
		fmt.Sprintf(`{"max_tokens":%d,"temperature":0,`, n(40)) + bias + `,` + msg + `}`,
		fmt.Sprintf(`{"max_tokens":%d,"temperature":0.8,`, n(40)) + `"top_p":0.9,"presence_penalty":0.2,"frequency_penalty":0.1,"seed":5,"logprobs":true,"top_logprobs":2,` + bias + `,` + msg + `}`,
		fmt.Sprintf(`{"max_tokens":%d,"seed":7,`, m(30)) + tool + `,` + msg + `}`,
		fmt.Sprintf(`{"max_tokens":%d,"temperature":0,`, m(30)) + schema + `,` + msg + `}`,
	}
}

// draftAnswer is a chat completion without what is drawn afresh for every response: its id,
// creation time and tool call ids.
func draftAnswer(t *testing.T, body []byte) string {
	var r map[string]any
	if err := json.Unmarshal(body, &r); err != nil {
		t.Fatalf("%v: %s", err, body)
	}
	delete(r, "id")
	delete(r, "created")
	out, _ := json.Marshal(r)
	return callID.ReplaceAllString(string(out), `"id":"call"`)
}

var callID = regexp.MustCompile(`"id":"call_[0-9a-f]+"`)

// TestDraftsServeSameAnswers: on the CPU reference, the four requests at once get byte-identical
// answers (text, tool call, logprobs, finish reasons, usage) with drafts always verified and with
// drafting off, drafts were accepted, and /metrics and /status say so.
func TestDraftsServeSameAnswers(t *testing.T) {
	sameAnswersWithDrafts(t, 1, func(w *model.Weights) backend.Backend { return cpu.New(w) })
}

// sameAnswersWithDrafts is TestDraftsServeSameAnswers on the backend newBackend makes, the
// requests' max_tokens scaled.
func sameAnswersWithDrafts(t *testing.T, scale float64, newBackend func(*model.Weights) backend.Backend) {
	tok := testTokenizer(t)
	a, _ := tok.TokenID("ab")
	b, _ := tok.TokenID("cd")
	run := func(url string) []string {
		bodies := draftBodies(a, b, scale)
		out := make([]string, len(bodies))
		var wg sync.WaitGroup
		for i, body := range bodies {
			wg.Go(func() {
				resp, got := post(t, url+"/v1/chat/completions", body)
				if resp.StatusCode != http.StatusOK {
					t.Errorf("request %d: %d %s", i, resp.StatusCode, got)
				}
				out[i] = draftAnswer(t, got)
			})
		}
		wg.Wait()
		return out
	}
	plain := run(draftServer(t, runner.DraftsOff, newBackend))
	url := draftServer(t, runner.DraftsAlways, newBackend)
	drafted := run(url)
	for i := range plain {
		if plain[i] != drafted[i] {
			t.Errorf("request %d with drafts:\n%s\nwithout:\n%s", i, drafted[i], plain[i])
		}
	}
	m := metricsText(t, url)
	if !strings.Contains(m, `lily_draft_accepted_tokens_total{drafter="suffix"}`) || strings.Contains(m, `lily_draft_accepted_tokens_total{drafter="suffix"} 0`) {
		t.Errorf("no accepted drafts in /metrics:\n%s", grepLines(m, "lily_draft"))
	}
	var st struct {
		Drafts struct {
			Accepted int64 `json:"accepted"`
		} `json:"drafts"`
	}
	resp, err := http.Get(url + "/status")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil || st.Drafts.Accepted == 0 {
		t.Errorf("/status drafts: %+v (%v)", st.Drafts, err)
	}
}
