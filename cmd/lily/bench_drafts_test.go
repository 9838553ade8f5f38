package main

import (
	"encoding/json"
	"strings"
	"testing"
)

func benchDrafts(t *testing.T, args ...string) draftsOutput {
	t.Helper()
	out, err := execute(t, append([]string{"bench", "--drafts", "--output", "json"}, args...)...)
	var got draftsOutput
	if err != nil || json.Unmarshal([]byte(out), &got) != nil {
		t.Fatalf("%v: %s", err, out)
	}
	return got
}

// TestBenchDraftsNeverMuchSlower: on the committed agent trace, whose replies are short tool
// calls with little to quote, drafting does not slow the trace down on any chip, and no turn by
// more than a cold probe costs: a one-token draft rejected before the estimates have evidence
// is a 2-row step, about 1.3 one-row steps, on replies of 35 or more tokens, so a turn or two of
// them stay within 2 %.
func TestBenchDraftsNeverMuchSlower(t *testing.T) {
	d := benchDrafts(t, "--agent-trace", "../../testdata/agent/trace.json").Drafts
	if len(d.Turns) != 10 || len(d.ModeledSpeedup) != len(prefillChips) {
		t.Fatalf("%d turns, %d chips", len(d.Turns), len(d.ModeledSpeedup))
	}
	for _, c := range prefillChips {
		if s := d.ModeledSpeedup[c.Name]; s < 1 {
			t.Errorf("%s: the trace %.3f× plain decoding", c.Name, s)
		}
		for _, turn := range d.Turns {
			if s := turn.ModeledSpeedup[c.Name]; s < 0.98 {
				t.Errorf("%s turn %d: %.3f× (%d drafted, %d accepted)", c.Name, turn.Turn, s, turn.Drafted[c.Name], turn.Accepted[c.Name])
			}
			if turn.Steps[c.Name]+turn.Accepted[c.Name] != turn.Tokens {
				t.Errorf("%s turn %d: %d steps, %d accepted, %d tokens", c.Name, turn.Turn, turn.Steps[c.Name], turn.Accepted[c.Name], turn.Tokens)
			}
		}
	}
}

// TestBenchDraftsQuotedFile: where the agent writes back a file it read with a small edit, the
// reply quotes its prompt and drafting at least doubles the trace's modeled speed on some chip.
func TestBenchDraftsQuotedFile(t *testing.T) {
	d := benchDrafts(t, "--agent-trace", "../../testdata/agent/rewrite.json", "--chip", "M1 Max,M4 Max,M5 Pro,M5 Max").Drafts
	best := 0.0
	for chip, s := range d.ModeledSpeedup {
		best = max(best, s)
		t.Logf("%s: %.3f× plain decoding, %.2f tokens a step", chip, s, d.TokensPerStep[chip])
	}
	if len(d.ModeledSpeedup) != 4 || best < 2 {
		t.Fatalf("speed-ups %v", d.ModeledSpeedup)
	}
}

// TestBenchDraftsText: the text form has a row per turn and the totals; the flags it cannot run
// without or beside are refused.
func TestBenchDraftsText(t *testing.T) {
	out, err := execute(t, "bench", "--drafts", "--agent-trace", "../../testdata/agent/rewrite.json", "--chip", "M4 Max")
	if err != nil || !strings.Contains(out, "\ntotal ") || !strings.Contains(out, "\nM4 Max ") {
		t.Fatalf("%v: %s", err, out)
	}
	for _, row := range []string{"\n   1    ", "\n   2    ", "\n   3    ", "\n   4    "} {
		if !strings.Contains(out, row) {
			t.Fatalf("no row %q: %s", row[1:], out)
		}
	}
	for _, args := range [][]string{{"--drafts", "--agent-trace", "x.json", "--plan"}, {"--drafts=sometimes"},
		{"--drafts", "--agent-trace", "../../testdata/agent/rewrite.json", "--chip", "M9"}} {
		if out, err := execute(t, append([]string{"bench"}, args...)...); err == nil {
			t.Errorf("%v accepted: %s", args, out)
		}
	}
}

// TestBenchDraftsModelDir: with --model the checkpoint's tokenizer and template are used (no
// weights read); the demo checkpoint holds the built-in ones, so the figures are the same.
func TestBenchDraftsModelDir(t *testing.T) {
	t.Setenv("XDG_CACHE_HOME", t.TempDir())
	dir, err := demoDir()
	if err != nil {
		t.Fatal(err)
	}
	args := []string{"--agent-trace", "../../testdata/agent/rewrite.json", "--chip", "M4 Max", "--kv-bits", "8"}
	built, model := benchDrafts(t, args...).Drafts, benchDrafts(t, append(args, "--model", dir)...).Drafts
	if model.Tokenizer != dir || built.KVBits != 8 {
		t.Fatalf("tokenizer %q, %d-bit KV", model.Tokenizer, built.KVBits)
	}
	model.Tokenizer = built.Tokenizer
	a, _ := json.Marshal(built)
	b, _ := json.Marshal(model)
	if string(a) != string(b) {
		t.Fatalf("built-in: %s\n--model: %s", a, b)
	}
}
