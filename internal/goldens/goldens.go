// Package goldens reads the committed Hugging Face goldens (testdata/golden/*: prompt, greedy ids
// and logits from transformers) for the tests of every backend.
package goldens

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"testing"
)

// Golden is one checkpoint's reference run.
type Golden struct {
	PromptIDs   []int     `json:"prompt_ids"`
	GreedyIDs   []int     `json:"greedy_ids"` // greedy_ids[0] is chosen from the prompt's last row
	VocabSize   int       `json:"vocab_size"`
	DecodeSteps int       `json:"decode_steps"`
	Prefill     []float32 `json:"-"` // logits at every prompt position, row-major [prompt][vocab]
	Decode      []float32 `json:"-"` // logits of each cached decode step, [steps][vocab]
	// PrefillBF16 is Prefill from the same model run by transformers in bfloat16 (weights and
	// activations): how far bfloat16 alone moves the logits, the yardstick of routes that round
	// activations to bfloat16.
	PrefillBF16 []float32 `json:"-"`
}

// BF16Deviation is max |PrefillBF16 − Prefill| over every prompt position: transformers' own
// bfloat16 error on this checkpoint.
func (g *Golden) BF16Deviation() float64 { return MaxAbsDiff(g.PrefillBF16, g.Prefill) }

// Load reads dir's golden.json and logits files.
func Load(dir string) (*Golden, error) {
	var g Golden
	data, err := os.ReadFile(filepath.Join(dir, "golden.json"))
	if err != nil {
		return nil, err
	}
	if err := json.Unmarshal(data, &g); err != nil {
		return nil, fmt.Errorf("%s: %w", dir, err)
	}
	if g.Prefill, err = ReadF32(filepath.Join(dir, "prefill_logits.f32")); err != nil {
		return nil, err
	}
	if g.Decode, err = ReadF32(filepath.Join(dir, "decode_logits.f32")); err != nil {
		return nil, err
	}
	if g.PrefillBF16, err = ReadF32(filepath.Join(dir, "prefill_logits_bf16.f32")); err != nil {
		return nil, err
	}
	V := g.VocabSize
	if len(g.Prefill) != len(g.PromptIDs)*V || len(g.PrefillBF16) != len(g.Prefill) || len(g.Decode) != g.DecodeSteps*V || len(g.GreedyIDs) != g.DecodeSteps+1 {
		return nil, fmt.Errorf("%s: golden files disagree on sizes: prefill %d, decode %d, ids %d", dir, len(g.Prefill), len(g.Decode), len(g.GreedyIDs))
	}
	return &g, nil
}

// PrefillRow is the logits row of prompt position p.
func (g *Golden) PrefillRow(p int) []float32 { return g.Prefill[p*g.VocabSize : (p+1)*g.VocabSize] }

// DecodeRow is the logits row of decode step s (after feeding greedy_ids[s]).
func (g *Golden) DecodeRow(s int) []float32 { return g.Decode[s*g.VocabSize : (s+1)*g.VocabSize] }

// ReadF32 reads a file of little-endian float32 values.
func ReadF32(path string) ([]float32, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	out := make([]float32, len(raw)/4)
	for i := range out {
		out[i] = math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:]))
	}
	return out, nil
}

// MaxAbsDiff is max |a[i] − b[i]| (infinite if any difference is NaN).
func MaxAbsDiff(a, b []float32) float64 {
	var worst float64
	for i := range a {
		d := math.Abs(float64(a[i]) - float64(b[i]))
		if math.IsNaN(d) {
			return math.Inf(1)
		}
		worst = max(worst, d)
	}
	return worst
}

// MustLoad is Load for tests: a failure ends the test.
func MustLoad(t testing.TB, dir string) *Golden {
	t.Helper()
	g, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// MustReadF32 is ReadF32 for tests: a failure ends the test.
func MustReadF32(t testing.TB, path string) []float32 {
	t.Helper()
	v, err := ReadF32(path)
	if err != nil {
		t.Fatal(err)
	}
	return v
}
