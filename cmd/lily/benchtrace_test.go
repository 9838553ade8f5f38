package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/lilyformac/lily/internal/agenttrace"
)

// TestAgentTraceReusesEveryTurn replays an agent conversation against the demo model as lily
// serve runs it: from turn 2 on, each turn prefills only what the previous turn's prompt did not
// hold (the prompt-end snapshot and the checkpoint before the generation prompt serve the rest),
// and the output is the same with the prefix cache on and off, greedy and seeded.
func TestAgentTraceReusesEveryTurn(t *testing.T) {
	t.Setenv("XDG_CACHE_HOME", t.TempDir())
	dir, err := demoDir()
	if err != nil {
		t.Fatal(err)
	}
	tr := agenttrace.Synthetic(agenttrace.Options{RepoFiles: 2, FileLines: 14, Turns: 3})
	zero, warm, seed := 0.0, 0.8, int64(3)
	for _, ro := range []agenttrace.ReplayOptions{{MaxTokens: 6, Temperature: &zero}, {MaxTokens: 6, Temperature: &warm, Seed: &seed}} {
		replay := func(cacheMB int) []agenttrace.TurnResult {
			res, err := replayOne(context.Background(), serveOptions{model: dir, backend: "cpu", cacheMB: cacheMB}, tr, ro)
			if err != nil {
				t.Fatal(err)
			}
			return res
		}
		on, off := replay(64), replay(0)
		for i := range on {
			if on[i].Output != off[i].Output || on[i].PromptTokens != off[i].PromptTokens || off[i].CachedTokens != 0 {
				t.Fatalf("turn %d: cache on %+v %q, off %+v %q", i+1, on[i], on[i].Output, off[i], off[i].Output)
			}
			if i == 0 {
				continue
			}
			if grew := on[i].PromptTokens - on[i-1].PromptTokens; on[i].CachedTokens < on[i-1].PromptTokens-8 || on[i].PrefilledTokens > grew+8 {
				t.Errorf("turn %d: prompt %d (grew %d), cached %d, prefilled %d; turn %d's prompt was %d", i+1, on[i].PromptTokens, grew, on[i].CachedTokens, on[i].PrefilledTokens, i, on[i-1].PromptTokens)
			}
		}
		for _, r := range on {
			t.Logf("temperature %v, turn %d: prompt %d, cached %d, prefilled %d", *ro.Temperature, r.Turn, r.PromptTokens, r.CachedTokens, r.PrefilledTokens)
		}
	}
}

// TestBenchAgentTraceJSON: the command prints one JSON object with a row per turn and totals.
func TestBenchAgentTraceJSON(t *testing.T) {
	t.Setenv("XDG_CACHE_HOME", t.TempDir())
	path := filepath.Join(t.TempDir(), "trace.json")
	raw, _ := json.Marshal(agenttrace.Synthetic(agenttrace.Options{RepoFiles: 1, FileLines: 14, Turns: 2}))
	os.WriteFile(path, raw, 0o644)
	out, err := execute(t, "bench", "--demo", "--backend", "cpu", "--agent-trace", path, "--max-tokens", "3", "--output", "json")
	if err != nil {
		t.Fatal(err)
	}
	var got traceOutput
	if err := json.Unmarshal([]byte(out), &got); err != nil || len(got.Turns) != 2 || got.Turns[1].CachedTokens == 0 ||
		got.Totals["prompt_tokens"] != float64(got.Turns[0].PromptTokens+got.Turns[1].PromptTokens) || got.Turns[0].TTFTSeconds <= 0 {
		t.Fatalf("%v: %s", err, out)
	}
	// The per-turn output digests compare runs: without the cache the outputs are the same.
	out, err = execute(t, "bench", "--demo", "--backend", "cpu", "--agent-trace", path, "--max-tokens", "3", "--output", "json", "--cache-mb", "0")
	var uncached traceOutput
	if err != nil || json.Unmarshal([]byte(out), &uncached) != nil || len(uncached.Turns) != 2 {
		t.Fatalf("uncached: %v: %s", err, out)
	}
	for i, r := range got.Turns {
		if len(r.OutputSHA256) != 64 || r.OutputSHA256 != uncached.Turns[i].OutputSHA256 || uncached.Turns[i].CachedTokens != 0 {
			t.Fatalf("turn %d: output digest %q cached, %q uncached (%d cached tokens)", i+1, r.OutputSHA256, uncached.Turns[i].OutputSHA256, uncached.Turns[i].CachedTokens)
		}
	}
	if _, err := execute(t, "bench", "--demo", "--agent-trace", filepath.Join(t.TempDir(), "missing.json")); err == nil {
		t.Fatal("a missing trace file was accepted")
	}
}

// TestServeRestartKeepsConversation: with the disk tier, an agent's next turn after lily serve
// restarts (a new process: model loaded again, memory cache empty) reuses the previous turn's
// checkpoint from disk, and answers as a server without any cache does.
func TestServeRestartKeepsConversation(t *testing.T) {
	t.Setenv("XDG_CACHE_HOME", t.TempDir())
	dir, err := demoDir()
	if err != nil {
		t.Fatal(err)
	}
	tr := agenttrace.Synthetic(agenttrace.Options{RepoFiles: 1, FileLines: 14, Turns: 2})
	first := &agenttrace.Trace{Tools: tr.Tools, Turns: tr.Turns[:1]}
	second := &agenttrace.Trace{Tools: tr.Tools, Turns: []agenttrace.Turn{{Messages: tr.Messages(1)}}}
	zero := 0.0
	ro := agenttrace.ReplayOptions{MaxTokens: 4, Temperature: &zero}
	o := serveOptions{model: dir, backend: "cpu", cacheMB: 64, diskCacheGB: 1}
	before, err := replayOne(context.Background(), o, first, ro)
	if err != nil {
		t.Fatal(err)
	}
	after, err := replayOne(context.Background(), o, second, ro) // the restart
	if err != nil {
		t.Fatal(err)
	}
	o.cacheMB = 0
	cold, err := replayOne(context.Background(), o, second, ro)
	if err != nil {
		t.Fatal(err)
	}
	if after[0].CachedTokens < before[0].PromptTokens-8 || after[0].Output != cold[0].Output || cold[0].CachedTokens != 0 {
		t.Fatalf("after the restart: cached %d of %d (turn 1's prompt was %d); output %q, without cache %q",
			after[0].CachedTokens, after[0].PromptTokens, before[0].PromptTokens, after[0].Output, cold[0].Output)
	}
	t.Logf("turn 2 after a restart: %d of %d prompt tokens from disk", after[0].CachedTokens, after[0].PromptTokens)
}

// replayOne replays tr once (one agent).
func replayOne(ctx context.Context, o serveOptions, tr *agenttrace.Trace, ro agenttrace.ReplayOptions) ([]agenttrace.TurnResult, error) {
	out, err := replayServed(ctx, o, tr, ro, 1)
	if err != nil {
		return nil, err
	}
	return out[0], nil
}
