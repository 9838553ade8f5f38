package agenttrace

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCommittedTracesAreSynthetic: testdata/agent/trace.json and rewrite.json are what the
// generator writes, so they can be rebuilt (go run ./tools/agenttrace [-rewrite]) and reviewed
// as code.
func TestCommittedTracesAreSynthetic(t *testing.T) {
	for _, c := range []struct {
		file         string
		o            Options
		turns, tools int
	}{{"trace.json", Default, 10, 10}, {"rewrite.json", Rewriting, 4, 10}} {
		path := "../../testdata/agent/" + c.file
		raw, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		var want bytes.Buffer
		enc := json.NewEncoder(&want)
		enc.SetIndent("", " ")
		enc.Encode(Synthetic(c.o))
		if !bytes.Equal(raw, want.Bytes()) {
			t.Fatalf("%s differs from its generator: run go run ./tools/agenttrace (-rewrite for rewrite.json)", path)
		}
		tr, err := Load(path)
		if err != nil {
			t.Fatal(err)
		}
		var tools []any
		json.Unmarshal(tr.Tools, &tools)
		if len(tr.Turns) != c.turns || len(tools) != c.tools {
			t.Fatalf("%s: %d turns, %d tools", c.file, len(tr.Turns), len(tools))
		}
	}
}

// TestRewriteRepeatsTheFile: the rewriting trace's write_file call carries the file its
// read_file call returned, with the two edited lines only.
func TestRewriteRepeatsTheFile(t *testing.T) {
	tr := Synthetic(Options{RepoFiles: 2, FileLines: 28, Turns: 4, Rewrite: true})
	var result struct{ Content string }
	json.Unmarshal(tr.Turns[1].Messages[0], &result)
	var reply struct {
		ToolCalls []struct {
			Function struct{ Name, Arguments string }
		} `json:"tool_calls"`
	}
	json.Unmarshal(tr.Turns[1].Reply, &reply)
	var args struct{ Path, Content string }
	if len(reply.ToolCalls) != 1 || reply.ToolCalls[0].Function.Name != "write_file" || json.Unmarshal([]byte(reply.ToolCalls[0].Function.Arguments), &args) != nil {
		t.Fatalf("turn 2's reply: %s", tr.Turns[1].Reply)
	}
	read, written := strings.Split(result.Content, "\n"), strings.Split(args.Content, "\n")
	if len(read) < 28 || len(written) != len(read)+1 {
		t.Fatalf("read %d lines, wrote %d", len(read), len(written))
	}
	differ := 0
	for i, j := 0, 0; i < len(read); i, j = i+1, j+1 {
		if written[j] == "\t\"fmt\"" {
			j++
		}
		if read[i] != written[j] {
			differ++
		}
	}
	if differ != 1 || !strings.Contains(args.Content, "fmt.Errorf(") {
		t.Fatalf("%d lines changed besides the import:\n%s", differ, args.Content)
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
