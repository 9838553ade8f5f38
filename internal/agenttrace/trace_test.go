package agenttrace

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCommittedTraceIsSynthetic: testdata/agent/trace.json is what the generator writes, so it
// can be rebuilt (go run ./tools/agenttrace) and reviewed as code.
func TestCommittedTraceIsSynthetic(t *testing.T) {
	raw, err := os.ReadFile("../../testdata/agent/trace.json")
	if err != nil {
		t.Fatal(err)
	}
	var want bytes.Buffer
	enc := json.NewEncoder(&want)
	enc.SetIndent("", " ")
	enc.Encode(Synthetic(Default))
	if !bytes.Equal(raw, want.Bytes()) {
		t.Fatal("testdata/agent/trace.json differs from Synthetic(Default): run go run ./tools/agenttrace > testdata/agent/trace.json")
	}
	tr, err := Load("../../testdata/agent/trace.json")
	if err != nil {
		t.Fatal(err)
	}
	var tools []any
	json.Unmarshal(tr.Tools, &tools)
	if len(tr.Turns) != 10 || len(tools) != 10 {
		t.Fatalf("%d turns, %d tools", len(tr.Turns), len(tools))
	}
}

// TestMessagesGrowByTurn: turn i sends every earlier turn's messages and reply, then its own.
func TestMessagesGrowByTurn(t *testing.T) {
	tr := Synthetic(Options{RepoFiles: 2, FileLines: 14, Turns: 10})
	roles := func(i int) string {
		var out []string
		for _, m := range tr.Messages(i) {
			var r struct {
				Role      string `json:"role"`
				ToolCalls []any  `json:"tool_calls"`
			}
			json.Unmarshal(m, &r)
			if len(r.ToolCalls) > 0 {
				r.Role += "+call"
			}
			out = append(out, r.Role)
		}
		return strings.Join(out, " ")
	}
	if got := roles(0); got != "system user" {
		t.Fatalf("turn 1: %s", got)
	}
	if got := roles(2); got != "system user assistant+call tool assistant+call tool" {
		t.Fatalf("turn 3: %s", got)
	}
	if got := roles(9); !strings.HasSuffix(got, "tool assistant user") {
		t.Fatalf("turn 10: %s", got)
	}
}

func TestLoadRejects(t *testing.T) {
	dir := t.TempDir()
	for name, body := range map[string]string{
		"no turns":      `{"turns":[]}`,
		"no messages":   `{"turns":[{"messages":[],"reply":{"role":"assistant"}}]}`,
		"not assistant": `{"turns":[{"messages":[{"role":"user","content":"a"}],"reply":{"role":"user"}},{"messages":[{"role":"user","content":"b"}]}]}`,
		"bad json":      `{"turns":`,
	} {
		p := filepath.Join(dir, "t.json")
		os.WriteFile(p, []byte(body), 0o644)
		if _, err := Load(p); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}
