package main

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestBenchPlan: `lily bench --plan` needs no model and reports the production decode plan.
func TestBenchPlan(t *testing.T) {
	out, err := execute(t, "bench", "--plan", "--ctx", "4096", "--output", "json")
	if err != nil {
		t.Fatal(err, out)
	}
	var p map[string]any
	if err := json.Unmarshal([]byte(out), &p); err != nil {
		t.Fatal(err, out)
	}
	for _, k := range []string{"dispatches_per_token", "barriers_per_token", "bytes_per_token", "ideal_bytes_per_token", "bytes_ratio_to_ideal"} {
		if v, ok := p[k].(float64); !ok || v <= 0 {
			t.Fatalf("%s missing or not positive in %s", k, out)
		}
	}
	if r := p["bytes_ratio_to_ideal"].(float64); r < 1 || r > 1.05 {
		t.Fatalf("traffic ratio %g", r)
	}
	// A prompt token skips the LM head: fewer dispatches, less traffic, by at least the head's
	// 248,320 × 2,048 4-bit weights.
	pt, _ := p["prompt_token"].(map[string]any)
	if pt == nil || pt["dispatches"].(float64) >= p["dispatches_per_token"].(float64) || p["bytes_per_token"].(float64)-pt["bytes"].(float64) < 248320*2048/2 {
		t.Fatalf("prompt_token %v against %s", pt, out)
	}
	if p["barriers_per_token"].(float64) > p["dispatches_per_token"].(float64) {
		t.Fatalf("more barriers than dispatches: %s", out)
	}
	// Longer context, more KV traffic.
	out2, err := execute(t, "bench", "--plan", "--ctx", "32768", "--output", "json")
	if err != nil {
		t.Fatal(err)
	}
	var p2 map[string]any
	if err := json.Unmarshal([]byte(out2), &p2); err != nil {
		t.Fatal(err)
	}
	if p2["bytes_per_token"].(float64) <= p["bytes_per_token"].(float64) {
		t.Fatalf("ctx 32768 moves no more than ctx 4096: %s vs %s", out2, out)
	}
	text, err := execute(t, "bench", "--plan", "--ctx", "16")
	if err != nil || !strings.Contains(text, "dispatches") {
		t.Fatalf("text output %q (%v)", text, err)
	}
	if _, err := execute(t, "bench", "--plan", "--model", "x"); err == nil {
		t.Fatal("--plan with --model accepted")
	}
}

// TestBenchPlanMemory: --plan reports the production memory figures and the context each Mac
// size would serve: none on 24 GB (the weights alone exceed its working set), part of it on
// 32 GB, all of it from 36 GB on.
func TestBenchPlanMemory(t *testing.T) {
	out, err := execute(t, "bench", "--plan", "--ctx", "262144", "--output", "json")
	if err != nil {
		t.Fatal(err)
	}
	var p planOutput
	if err := json.Unmarshal([]byte(out), &p); err != nil {
		t.Fatal(err)
	}
	m := p.Memory
	// KV: 10 attention layers × K and V × 2 KV heads × 256 dims × 2 bytes.
	if m.KVPerPosition != 10*2*2*256*2 || m.Weights < 18<<30 || m.Weights > 19<<30 || m.State != 65863680 || m.Scratch <= 0 {
		t.Fatalf("memory %+v", m.Memory)
	}
	if m.Snapshot != m.State+262144*m.KVPerPosition {
		t.Fatalf("snapshot at 262,144 positions: %d", m.Snapshot)
	}
	c := p.ContextByMacGB
	if len(c) != 6 || c["24"] != 0 || c["32"] < 100000 || c["32"] >= 262144 || c["36"] != 262144 || c["128"] != 262144 {
		t.Fatalf("context by Mac: %v", c)
	}
}

// TestBenchPlanPrefill: `bench --plan --prefill M` models a chunk: executed FLOPs and bytes at
// least the ideal ones, ideal FLOPs growing with the chunk (linearly, plus attention's quadratic
// part) and with the cached context, a modeled tok/s per chip.
func TestBenchPlanPrefill(t *testing.T) {
	run := func(m, ctx string) map[string]any {
		t.Helper()
		out, err := execute(t, "bench", "--plan", "--prefill", m, "--ctx", ctx, "--output", "json")
		if err != nil {
			t.Fatal(err, out)
		}
		var p struct {
			Prefill map[string]any `json:"prefill"`
		}
		if err := json.Unmarshal([]byte(out), &p); err != nil || p.Prefill == nil {
			t.Fatal(err, out)
		}
		return p.Prefill
	}
	a, b, c := run("512", "0"), run("4096", "0"), run("4096", "28672")
	for _, p := range []map[string]any{a, b, c} {
		if p["flops"].(float64) < p["ideal_flops"].(float64) || p["bytes"].(float64) < p["ideal_bytes"].(float64) || p["dispatches"].(float64) <= 0 {
			t.Fatalf("executed below ideal: %v", p)
		}
		tps := p["modeled_tok_s"].(map[string]any)
		for _, chip := range []string{"M1 Max", "M4 Max", "M5 Max"} {
			if v, ok := tps[chip].(float64); !ok || v <= 0 {
				t.Fatalf("modeled tok/s %v: no %s", tps, chip)
			}
		}
	}
	if r := b["ideal_flops"].(float64) / a["ideal_flops"].(float64); r < 8 || r > 9 {
		t.Fatalf("ideal FLOPs 4096 vs 512 tokens: %.2f×, want a little over 8×", r)
	}
	if c["ideal_flops"].(float64) <= b["ideal_flops"].(float64) {
		t.Fatalf("28k cached positions add no attention FLOPs: %v vs %v", c, b)
	}
}
