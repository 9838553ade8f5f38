package main

import (
	"bytes"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/lilyformac/lily/internal/goldens"
)

func execute(t *testing.T, args ...string) (string, error) {
	t.Helper()
	cmd := newRootCmd()
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	cmd.SetArgs(args)
	err := cmd.Execute()
	return out.String(), err
}

var readFloats = goldens.MustReadF32

// TestRunContractAgainstHF drives `lily run` exactly as other tools will and compares its ids and
// --logits-out rows with the Hugging Face goldens.
func TestRunContractAgainstHF(t *testing.T) {
	dir := "../../testdata/golden/tiny-a"
	var g struct {
		PromptIDs []int `json:"prompt_ids"`
		GreedyIDs []int `json:"greedy_ids"`
		VocabSize int   `json:"vocab_size"`
	}
	raw, _ := os.ReadFile(filepath.Join(dir, "golden.json"))
	if err := json.Unmarshal(raw, &g); err != nil {
		t.Fatal(err)
	}
	ids := make([]string, len(g.PromptIDs))
	for i, id := range g.PromptIDs {
		ids[i] = strconv.Itoa(id)
	}
	n := 10
	logitsPath := filepath.Join(t.TempDir(), "logits.f32")
	out, err := execute(t, "run", "--model", dir, "--prompt-ids", strings.Join(ids, ","), "--max-tokens", strconv.Itoa(n),
		"--temperature", "0", "--output", "json", "--logits-out", logitsPath, "--ignore-eos")
	if err != nil {
		t.Fatalf("run: %v\n%s", err, out)
	}
	var res runOutput
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("output is not one JSON object: %v\n%s", err, out)
	}
	if len(res.TokenIDs) != n || res.FinishReason != "length" || res.PromptTokens != len(g.PromptIDs) {
		t.Fatalf("unexpected result %+v", res)
	}
	for i, id := range res.TokenIDs {
		if id != g.GreedyIDs[i] {
			t.Fatalf("token %d: got %d, HF %d", i, id, g.GreedyIDs[i])
		}
	}
	rows := readFloats(t, logitsPath)
	if len(rows) != n*g.VocabSize {
		t.Fatalf("logits file has %d floats, want %d rows of %d", len(rows), n, g.VocabSize)
	}
	prefill := readFloats(t, filepath.Join(dir, "prefill_logits.f32"))
	decode := readFloats(t, filepath.Join(dir, "decode_logits.f32"))
	V := g.VocabSize
	want := append(append([]float32{}, prefill[len(prefill)-V:]...), decode[:(n-1)*V]...)
	for i := range rows {
		if d := math.Abs(float64(rows[i] - want[i])); d > 2e-3 {
			t.Fatalf("logits row %d col %d: %g vs HF %g", i/V, i%V, rows[i], want[i])
		}
	}
}

// TestRunStopsAtEOS makes the 4th greedy token of a run the model's eos id (by editing a copy of
// the config) and checks that generation stops right after it with finish_reason "stop".
func TestRunStopsAtEOS(t *testing.T) {
	src := "../../testdata/golden/tiny-b"
	args := []string{"run", "--prompt-ids", "5,6,7", "--max-tokens", "12"}
	out, err := execute(t, append(args, "--model", src, "--ignore-eos")...)
	if err != nil {
		t.Fatal(err)
	}
	var free runOutput
	json.Unmarshal([]byte(out), &free)
	eos := free.TokenIDs[3]
	if slices.Contains(free.TokenIDs[:3], eos) {
		t.Fatalf("token %d repeats early in %v: the test needs another prompt", eos, free.TokenIDs)
	}
	dir := t.TempDir()
	var cfg map[string]any
	raw, _ := os.ReadFile(filepath.Join(src, "config.json"))
	json.Unmarshal(raw, &cfg)
	cfg["eos_token_id"] = eos
	raw, _ = json.Marshal(cfg)
	os.WriteFile(filepath.Join(dir, "config.json"), raw, 0o644)
	abs, _ := filepath.Abs(filepath.Join(src, "model.safetensors"))
	if err := os.Symlink(abs, filepath.Join(dir, "model.safetensors")); err != nil {
		t.Fatal(err)
	}
	out, err = execute(t, append(args, "--model", dir)...)
	if err != nil {
		t.Fatal(err)
	}
	var stopped runOutput
	json.Unmarshal([]byte(out), &stopped)
	if stopped.FinishReason != "stop" || !slices.Equal(stopped.TokenIDs, free.TokenIDs[:4]) {
		t.Fatalf("with eos %d: got %v (%s), want %v (stop)", eos, stopped.TokenIDs, stopped.FinishReason, free.TokenIDs[:4])
	}
}

func TestRunErrors(t *testing.T) {
	dir := "../../testdata/golden/tiny-b"
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"run", "--model", dir, "--prompt-ids", "1,2", "--backend", "metal"}, "backend metal needs macOS"},
		{[]string{"run", "--model", dir, "--prompt-ids", "1,2", "--backend", "gpu"}, `unknown backend "gpu"`},
		{[]string{"run", "--model", dir, "--prompt-ids", "1,2", "--temperature", "0.7", "--top-p", "2"}, "top_p must be between 0 and 1"},
		{[]string{"run", "--model", dir, "--prompt-ids", "1,2", "--temperature", "3"}, "temperature must be between 0 and 2"},
		{[]string{"run", "--model", dir, "--prompt-ids", "1,x"}, `item 2 ("x")`},
		{[]string{"run", "--model", dir, "--prompt-ids", "1,99999"}, "outside the vocabulary"},
		{[]string{"run", "--model", dir}, "--prompt-ids is required"},
		{[]string{"run", "--model", dir, "--prompt", "hi", "--prompt-ids", "1"}, "exactly one"},
		{[]string{"run", "--model", dir, "--prompt", "hi"}, "tokenizer"},
		{[]string{"run", "--prompt-ids", "1"}, "--model DIR is required"},
		{[]string{"run", "--model", t.TempDir(), "--prompt-ids", "1"}, "config.json"},
		{[]string{"run", "--model", dir, "--prompt-ids", "1", "--max-tokens", "0"}, "at least 1"},
		{[]string{"bench", "--model", dir, "--ctx", "0"}, "at least 1"},
	}
	for _, c := range cases {
		out, err := execute(t, c.args...)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: got %v (%s), want an error containing %q", c.args, err, out, c.want)
		}
	}
}

// TestRunSeededSampling: --temperature/--top-k/--seed run the server's sampler; a seed gives the
// same tokens again and on the emulated Metal backend, another seed other tokens.
func TestRunSeededSampling(t *testing.T) {
	args := []string{"run", "--model", "../../testdata/golden/tiny-a", "--prompt-ids", "1,2,3,4,5,6,7,8", "--max-tokens", "12", "--temperature", "0.8", "--top-k", "20", "--output", "json", "--ignore-eos"}
	ids := func(extra ...string) []int {
		out, err := execute(t, append(slices.Clone(args), extra...)...)
		if err != nil {
			t.Fatal(err)
		}
		var r runOutput
		json.Unmarshal([]byte(out), &r)
		if len(r.TokenIDs) != 12 {
			t.Fatalf("%v: %s", extra, out)
		}
		return r.TokenIDs
	}
	a, again, other := ids("--seed", "1"), ids("--seed", "1"), ids("--seed", "2")
	if !slices.Equal(a, again) || slices.Equal(a, other) {
		t.Fatalf("seed 1: %v then %v; seed 2: %v", a, again, other)
	}
	if emu := ids("--seed", "1", "--backend", "emu"); !slices.Equal(emu, a) {
		t.Fatalf("seed 1 on emu: %v, on cpu %v", emu, a)
	}
	if greedy := ids("--temperature", "0"); slices.Equal(greedy, a) {
		t.Fatalf("sampling at temperature 0.8 chose the greedy tokens %v", greedy)
	}
}

func TestBenchJSON(t *testing.T) {
	out, err := execute(t, "bench", "--model", "../../testdata/golden/tiny-b", "--ctx", "70", "--decode-steps", "8", "--output", "json", "--warmup=false")
	if err != nil {
		t.Fatal(err)
	}
	var b benchOutput
	if err := json.Unmarshal([]byte(out), &b); err != nil {
		t.Fatal(err)
	}
	if b.Context != 70 || b.Decode.Tokens != 8 || len(b.TokenIDs) != 8 || b.Prefill.TokS <= 0 || b.Decode.TokS <= 0 {
		t.Fatalf("unexpected bench output %+v", b)
	}
	if got := benchPrompt(3, 1000); got[0] != 0 || got[1] != 2654435761%(1<<32)%1000 || got[2] != (2*2654435761)%(1<<32)%1000 {
		t.Fatalf("bench prompt formula: %v", got)
	}
}

// TestRunTextPrompt: --prompt tokenizes with the checkpoint's tokenizer (same ids as --prompt-ids)
// and reports the generated text; --chat goes through the chat template.
func TestRunTextPrompt(t *testing.T) {
	t.Setenv("XDG_CACHE_HOME", t.TempDir())
	dir, err := demoDir()
	if err != nil {
		t.Fatal(err)
	}
	tok, ids, err := textPrompt(dir, "Hello there", false, 0)
	if err != nil {
		t.Fatal(err)
	}
	strs := make([]string, len(ids))
	for i, id := range ids {
		strs[i] = strconv.Itoa(id)
	}
	var byText, byIDs runOutput
	out, err := execute(t, "run", "--model", dir, "--prompt", "Hello there", "--max-tokens", "5", "--ignore-eos")
	if err != nil {
		t.Fatal(err)
	}
	json.Unmarshal([]byte(out), &byText)
	out, _ = execute(t, "run", "--model", dir, "--prompt-ids", strings.Join(strs, ","), "--max-tokens", "5", "--ignore-eos")
	json.Unmarshal([]byte(out), &byIDs)
	if !slices.Equal(byText.TokenIDs, byIDs.TokenIDs) || byText.Text == nil || *byText.Text != tok.Decode(byText.TokenIDs) || byIDs.Text != nil {
		t.Fatalf("--prompt %+v vs --prompt-ids %+v", byText, byIDs)
	}
	_, chatIDs, err := textPrompt(dir, "Hello there", true, 0)
	if err != nil || len(chatIDs) <= len(ids) || !strings.HasSuffix(tok.Decode(chatIDs), "<|im_start|>assistant\n<think>\n") {
		t.Fatalf("chat prompt: %q %v", tok.Decode(chatIDs), err)
	}
}

// TestRunImagesAgainstHF: run --image with one <|image_pad|> per image in --prompt-ids expands
// the pads, generates transformers' greedy tokens for the vision golden's landscape prompt, and
// writes a prompt logits row per expanded position: on the CPU reference each within 2e-3 of
// transformers', on the emulated GPU (the tower and the chunk modes, bfloat activations) within
// the bfloat16 yardstick.
func TestRunImagesAgainstHF(t *testing.T) {
	dir := "../../testdata/vision/tiny-v"
	g := goldens.MustLoadVision(t, dir)
	p := g.Prompts["landscape"]
	var ids []string
	for i, id := range p.IDs {
		if id == 1000 && i > 0 && p.IDs[i-1] == 1000 {
			continue // the image's pads collapse to the one the template writes
		}
		ids = append(ids, strconv.Itoa(id))
	}
	n := 4
	for _, backend := range []string{"cpu", "emu"} {
		logitsPath := filepath.Join(t.TempDir(), "prompt.f32")
		out, err := execute(t, "run", "--model", dir, "--backend", backend, "--prompt-ids", strings.Join(ids, ","), "--image", filepath.Join(dir, "images", p.Images[0]),
			"--max-tokens", strconv.Itoa(n), "--ignore-eos", "--prompt-logits-out", logitsPath)
		if err != nil {
			t.Fatalf("run --backend %s: %v\n%s", backend, err, out)
		}
		var res runOutput
		if err := json.Unmarshal([]byte(out), &res); err != nil {
			t.Fatal(err)
		}
		if res.PromptTokens != len(p.IDs) || !slices.Equal(res.TokenIDs, p.GreedyIDs[:n]) {
			t.Fatalf("%s: prompt %d tokens (want %d), tokens %v (HF %v)", backend, res.PromptTokens, len(p.IDs), res.TokenIDs, p.GreedyIDs[:n])
		}
		rows := readFloats(t, logitsPath)
		if len(rows) != len(p.Prefill) {
			t.Fatalf("%s: %d prompt logits, want %d", backend, len(rows), len(p.Prefill))
		}
		if backend == "emu" {
			_, _, errs := g.BF16Check(p, rows)
			for _, err := range errs {
				t.Errorf("emu: %v", err)
			}
		} else if d := goldens.MaxAbsDiff(rows, p.Prefill); d > 2e-3 {
			t.Fatalf("prompt logits: max |logit − HF| = %.3g", d)
		}
	}
	if _, err := execute(t, "run", "--model", dir, "--backend", "cpu", "--prompt-ids", "1,2,3", "--image", filepath.Join(dir, "images", p.Images[0])); err == nil || !strings.Contains(err.Error(), "image_pad") {
		t.Errorf("an image without a pad token: %v", err)
	}
}
