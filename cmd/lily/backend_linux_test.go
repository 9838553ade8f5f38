//go:build linux

package main

import (
	"context"
	"encoding/json"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/lilyformac/lily/internal/agenttrace"
	"github.com/lilyformac/lily/internal/goldens"
)

// TestRunEmuMatchesCPU: `lily run --backend emu` keeps the cpu contract and chooses the same ids.
func TestRunEmuMatchesCPU(t *testing.T) {
	dir := "../../testdata/golden/tiny-a"
	prompt := "679,445,39,500,378,112,631,651"
	var outs []runOutput
	for _, b := range []string{"cpu", "emu"} {
		out, err := execute(t, "run", "--backend", b, "--model", dir, "--prompt-ids", prompt, "--max-tokens", "6", "--output", "json", "--ignore-eos")
		if err != nil {
			t.Fatal(b, err, out)
		}
		var r runOutput
		if err := json.Unmarshal([]byte(out), &r); err != nil {
			t.Fatal(err, out)
		}
		outs = append(outs, r)
	}
	if !slices.Equal(outs[0].TokenIDs, outs[1].TokenIDs) || outs[1].Backend != "emu" || outs[1].PromptTokens != 8 || outs[1].CompletionTokens != 6 {
		t.Fatalf("cpu %+v, emu %+v", outs[0], outs[1])
	}
}

func TestUnknownBackendListsEmu(t *testing.T) {
	_, err := execute(t, "run", "--backend", "nope", "--model", "../../testdata/golden/tiny-a", "--prompt-ids", "1")
	if err == nil || !strings.Contains(err.Error(), "emu") {
		t.Fatalf("error %v", err)
	}
}

func TestDefaultBackendOffMacOS(t *testing.T) {
	if got := defaultBackend(); got != "cpu" {
		t.Fatalf("default backend on linux is %q, want cpu", got)
	}
}

// TestRunPromptLogitsOut: `lily run --prompt-logits-out` writes a row of vocab_size float32 logits
// per prompt position: the CPU backend's are HF's within the golden tolerance; on the emulator
// with 32-token prefill chunks, on either route, within the goldens' bfloat16 yardstick.
func TestRunPromptLogitsOut(t *testing.T) {
	dir := "../../testdata/golden/tiny-a"
	g := goldens.MustLoad(t, dir)
	var ids []string
	for _, id := range g.PromptIDs {
		ids = append(ids, strconv.Itoa(id))
	}
	V := g.VocabSize
	promptLogits := func(args ...string) []float32 {
		t.Helper()
		path := filepath.Join(t.TempDir(), "prompt.f32")
		args = append([]string{"run", "--prefill-chunk", "32", "--model", dir, "--prompt-ids", strings.Join(ids, ","), "--max-tokens", "1", "--prompt-logits-out", path}, args...)
		if out, err := execute(t, args...); err != nil {
			t.Fatal(args, err, out)
		}
		rows := goldens.MustReadF32(t, path)
		if len(rows) != len(g.PromptIDs)*V {
			t.Fatalf("%v: %d floats, want %d rows of %d", args, len(rows), len(g.PromptIDs), V)
		}
		return rows
	}
	if d := goldens.MaxAbsDiff(promptLogits("--backend", "cpu"), g.Prefill); d > 3e-2 {
		t.Fatalf("cpu: prompt logits differ from HF's by %.3g", d)
	}
	// The emulator's batched prefill stores its activations as bfloat on either route: within
	// the goldens' bfloat16 yardstick (goldens.Golden.BF16Check), the routes' rows not the same.
	routes := map[string][]float32{}
	for _, route := range []string{"simdgroup", "tensor"} {
		routes[route] = promptLogits("--backend", "emu", "--prefill-route", route)
		if _, _, errs := g.BF16Check(routes[route]); errs != nil {
			t.Fatalf("%s route: %v", route, errs)
		}
	}
	if d := goldens.MaxAbsDiff(routes["simdgroup"], routes["tensor"]); d == 0 {
		t.Fatal("the tensor route's prompt logits equal the simdgroup route's bit for bit: was it taken?")
	}
	if _, err := execute(t, "run", "--backend", "cpu", "--prefill-route", "tensor", "--model", dir, "--prompt-ids", "1"); err == nil || !strings.Contains(err.Error(), "GPU backends") {
		t.Fatalf("--prefill-route tensor on cpu: %v", err)
	}
}

// TestServedChunkedPrefill: an agent conversation served on the emulator with 32-token prefill
// chunks (the runner's pieces, checkpoints, the prefix cache's hits and snapshots over the chunk
// modes) answers every turn as the CPU backend does, greedy, with the same cache use. (The full
// 10-turn trace past 16k positions gave the same digests on emu and cpu token by token.)
func TestServedChunkedPrefill(t *testing.T) {
	t.Setenv("XDG_CACHE_HOME", t.TempDir())
	dir, err := demoDir()
	if err != nil {
		t.Fatal(err)
	}
	tr := agenttrace.Synthetic(agenttrace.Options{RepoFiles: 1, FileLines: 14, Turns: 2})
	zero := 0.0
	replay := func(backend string, chunk int) []agenttrace.TurnResult {
		res, err := replayOne(context.Background(), serveOptions{model: dir, backend: backend, cacheMB: 64, kvBits: 16, prefillChunk: chunk}, tr, agenttrace.ReplayOptions{MaxTokens: 3, Temperature: &zero})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	chunked, cpu := replay("emu", 32), replay("cpu", 0)
	for i := range chunked {
		c, w := chunked[i], cpu[i]
		if c.Output != w.Output || c.PromptTokens != w.PromptTokens || c.CachedTokens != w.CachedTokens {
			t.Fatalf("turn %d: emu, chunked %+v %q; cpu %+v %q", i+1, c, c.Output, w, w.Output)
		}
		t.Logf("turn %d: prompt %d, cached %d, prefilled %d", i+1, c.PromptTokens, c.CachedTokens, c.PrefilledTokens)
	}
}

// TestBenchThroughPrefillChunks: lily bench on the emulated GPU prefills through the chunk plan
// (its output names the chunk sizes), 40 tokens as chunks of 16, 16 and 8 (the 8-row tiles; the
// last chunk's last row gives the first token), and its greedy tokens are the CPU backend's.
func TestBenchThroughPrefillChunks(t *testing.T) {
	var runs [2]benchOutput
	for i, backend := range []string{"cpu", "emu"} {
		out, err := execute(t, "bench", "--demo", "--backend", backend, "--prefill-chunk", "16", "--ctx", "40", "--decode-steps", "3", "--output", "json")
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal([]byte(out), &runs[i]); err != nil {
			t.Fatalf("%s: %v: %s", backend, err, out)
		}
	}
	cpu, emu := runs[0], runs[1]
	if len(cpu.PrefillChunks) != 0 || !slices.Equal(emu.PrefillChunks, []int{16, 8}) {
		t.Fatalf("prefill chunks: cpu %v, emu %v", cpu.PrefillChunks, emu.PrefillChunks)
	}
	if !slices.Equal(cpu.TokenIDs, emu.TokenIDs) || cpu.Digest != emu.Digest {
		t.Fatalf("greedy tokens: cpu %v, emu %v", cpu.TokenIDs, emu.TokenIDs)
	}
}
