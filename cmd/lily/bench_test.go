package main

import (
	"encoding/json"
	"math"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/lilyformac/lily/metal/decode"
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

// TestBenchPlanMemory: --plan reports the production memory figures, the vision tower's among
// them, and the context each Mac size would serve: none on 24 GB (the weights alone exceed its
// working set), part of it on 32 GB, all of it from 36 GB on; the tower is kept (--vision auto)
// everywhere but on 24 GB.
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
	// KV: 10 attention layers × K and V × 2 KV heads × 256 dims × 2 bytes. State: the DeltaNet
	// states and conv windows, and the rotary offsets images leave (3 × uint32).
	if m.KVPerPosition != 10*2*2*256*2 || m.Weights < 18<<30 || m.Weights > 19<<30 || m.State != 65863680+12 || m.Scratch <= 0 {
		t.Fatalf("memory %+v", m.Memory)
	}
	if m.Snapshot != m.State+262144*m.KVPerPosition {
		t.Fatalf("snapshot at 262,144 positions: %d", m.Snapshot)
	}
	v := m.Vision
	if v.Patches != 10240 || v.Weights < 850e6 || v.Weights > 950e6 || v.Activations <= 0 || m.VisionBytes != v.Weights+v.Activations+2*v.Tables {
		t.Fatalf("vision tower %+v, %d bytes", v, m.VisionBytes)
	}
	c := p.ContextByMacGB
	if len(c) != 6 || c["24"] != 0 || c["32"] < 32768 || c["32"] >= 262144 || c["36"] != 262144 || c["128"] != 262144 {
		t.Fatalf("context by Mac: %v", c)
	}
	for _, gb := range macSizes {
		if on := p.VisionByMacGB[strconv.Itoa(gb)]; on != (gb != 24) {
			t.Errorf("vision by Mac: %v", p.VisionByMacGB)
		}
	}
	// Sequences at once: none where the weights do not fit, at least one where a context does,
	// never fewer on a larger Mac, at most the batched step's rows; on 24 GB none (the weights
	// exceed macOS's default GPU limit) and three once the limit is raised (the context making
	// room, decode.Memory.RoomForParallel), 32 GB one (the vision tower's memory leaves none);
	// 36 GB and up the most.
	par, prev := p.ParallelByMacGB, 0
	for _, gb := range macSizes {
		k := strconv.Itoa(gb)
		if n := par[k]; n < prev || n > decode.MaxParallel || (n == 0) != (c[k] == 0) {
			t.Fatalf("parallel by Mac: %v (context %v)", par, c)
		}
		prev = par[k]
	}
	if len(par) != len(macSizes) || par["24"] != 0 || p.ParallelByMacGBRaised["24"] != 3 || par["32"] != 1 || par["36"] != decode.MaxParallel {
		t.Fatalf("parallel by Mac: %v, raised %v", par, p.ParallelByMacGBRaised)
	}
}

// TestBenchPlanBatch: `bench --plan --batch B` models one decode step over B sequences: one is
// the plan's own step, more move more bytes a step and fewer a token, and each chip's aggregate
// rate is its single-stream rate times the speedup; --batch needs --plan and 1 to 8 sequences.
func TestBenchPlanBatch(t *testing.T) {
	run := func(b string) map[string]any {
		t.Helper()
		out, err := execute(t, "bench", "--plan", "--batch", b, "--ctx", "256", "--output", "json")
		if err != nil {
			t.Fatal(err, out)
		}
		var p struct {
			Batch map[string]any `json:"batch"`
		}
		if err := json.Unmarshal([]byte(out), &p); err != nil || p.Batch == nil {
			t.Fatal(err, out)
		}
		return p.Batch
	}
	out, err := execute(t, "bench", "--plan", "--ctx", "256", "--output", "json")
	var single planOutput
	if err != nil || json.Unmarshal([]byte(out), &single) != nil {
		t.Fatal(err, out)
	}
	one, four, eight := run("1"), run("4"), run("8")
	if one["dispatches"].(float64) != float64(single.Dispatches) || one["bytes_per_step"].(float64) != float64(single.Bytes) {
		t.Fatalf("--batch 1 %v against --plan's %d dispatches, %d bytes", one, single.Dispatches, single.Bytes)
	}
	for _, b := range []map[string]any{one, four, eight} {
		n := b["sequences"].(float64)
		// Above one sequence, the multi-row plan: the single-row step's dispatches in rows form.
		if b["bytes_per_token"].(float64) != math.Floor(b["bytes_per_step"].(float64)/n) || b["dispatches"].(float64) != one["dispatches"].(float64) {
			t.Fatalf("batch %v", b)
		}
		tps, single, speedup := b["modeled_tok_s"].(map[string]any), b["single_stream_tok_s"].(map[string]any), b["speedup"].(map[string]any)
		for _, chip := range prefillChips {
			a, s, x := tps[chip.Name].(float64), single[chip.Name].(float64), speedup[chip.Name].(float64)
			if s <= 0 || math.Abs(a/s-x) > 0.01 || x < 1 || x > n {
				t.Fatalf("%s: %g tok/s aggregate, %g single, speedup %g in %v", chip.Name, a, s, x, b)
			}
		}
	}
	if !(four["bytes_per_step"].(float64) < 4*one["bytes_per_step"].(float64) && eight["bytes_per_token"].(float64) < four["bytes_per_token"].(float64)) {
		t.Fatalf("bytes: one %v, four %v, eight %v", one, four, eight)
	}
	if text, err := execute(t, "bench", "--plan", "--batch", "2"); err != nil || !strings.Contains(text, "2 sequences") || !strings.Contains(text, "M4 Max") {
		t.Fatalf("text output %q (%v)", text, err)
	}
	for _, args := range [][]string{
		{"bench", "--batch", "4"}, {"bench", "--plan", "--batch", "0"}, {"bench", "--plan", "--batch", "9"},
		{"bench", "--plan", "--batch", "4", "--prefill", "512"},
	} {
		if _, err := execute(t, args...); err == nil || !strings.Contains(err.Error(), "--batch") {
			t.Errorf("%v: %v", args, err)
		}
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
		for _, chip := range []string{"M1 Max", "M4 Max", "M5 Pro", "M5 Max"} {
			if v, ok := tps[chip].(float64); !ok || v <= 0 {
				t.Fatalf("modeled tok/s %v: no %s", tps, chip)
			}
		}
		checkPrefillRoutes(t, p)
	}
	if text, err := execute(t, "bench", "--plan", "--prefill", "512"); err != nil || !strings.Contains(text, "M5 Pro") || !strings.Contains(text, "(simdgroup, 17.2)") || !strings.Contains(text, "(tensor, 71.7)") {
		t.Fatalf("text output %q (%v)", text, err)
	}
	if r := b["ideal_flops"].(float64) / a["ideal_flops"].(float64); r < 8 || r > 9 {
		t.Fatalf("ideal FLOPs 4096 vs 512 tokens: %.2f×, want a little over 8×", r)
	}
	if c["ideal_flops"].(float64) <= b["ideal_flops"].(float64) {
		t.Fatalf("28k cached positions add no attention FLOPs: %v vs %v", c, b)
	}
}

// checkPrefillRoutes: every chip of prefillChips has a route and that route's peak beside its
// modeled tok/s: tensor only on a chip with neural accelerators where the build has tensor-op
// kernels (none yet), its peak then the neural accelerators'; on the simdgroup route the
// modeled rate is the chunk over max(bytes / bandwidth, FLOPs / that peak).
func checkPrefillRoutes(t *testing.T, p map[string]any) {
	t.Helper()
	tps, routes, peaks := p["modeled_tok_s"].(map[string]any), p["route"].(map[string]any), p["peak_tflops"].(map[string]any)
	if len(routes) != len(prefillChips) || len(peaks) != len(prefillChips) || len(tps) != len(prefillChips) {
		t.Fatalf("%d chips: routes %v, peaks %v, tok/s %v", len(prefillChips), routes, peaks, tps)
	}
	chunk, bytes, flops := p["chunk"].(float64), p["bytes"].(float64), p["flops"].(float64)
	for _, chip := range prefillChips {
		route, peak, v := routes[chip.Name], peaks[chip.Name].(float64), tps[chip.Name].(float64)
		tensor := chip.HasTensorOps() && len(decode.TensorKernels()) > 0
		switch {
		case tensor && (route != "tensor" || peak != math.Round(chip.TensorFLOPs/1e11)/10):
			t.Errorf("%s: route %v at %g TFLOP/s, want tensor", chip.Name, route, peak)
		case !tensor && (route != "simdgroup" || peak != math.Round(chip.FLOPs/1e11)/10):
			t.Errorf("%s: route %v at %g TFLOP/s, want simdgroup at its ALUs' peak", chip.Name, route, peak)
		case !tensor && math.Abs(v-chunk/max(bytes/chip.Bandwidth, flops/chip.FLOPs)) > 0.05:
			t.Errorf("%s: %g tok/s on the simdgroup route at %g TFLOP/s", chip.Name, v, peak)
		}
	}
}

// TestBenchImage: bench --image reports the image's grid and tokens as the processor makes them,
// and times each phase of its way to the first token.
func TestBenchImage(t *testing.T) {
	dir := "../../testdata/vision/tiny-v"
	out, err := execute(t, "bench", "--model", dir, "--backend", "cpu", "--image", filepath.Join(dir, "images", "portrait.png"), "--output", "json")
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	var r benchImageOutput
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatal(err)
	}
	im := r.Image
	// 70×100 rounds to 64×96: 4×6 patches, 2×3 tokens; the prompt adds start, end and 16 tokens.
	if im.Source != [2]int{70, 100} || im.Resized != [2]int{64, 96} || im.Patches != 24 || im.Tokens != 6 || im.PrefillTokens != 6+2+16 {
		t.Errorf("unexpected image figures %+v", im)
	}
	if !(im.EncodeS > 0 && im.PrefillS > 0 && im.TTFTS >= im.PreprocessS+im.EncodeS+im.PrefillS-1e-9) {
		t.Errorf("phase times %+v", im)
	}
}
