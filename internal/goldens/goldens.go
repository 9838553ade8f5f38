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

// The bfloat16 yardstick: a batched prefill stores its activations as bfloat (metal/decode), so
// its prompt logits sit at bfloat16's distance from transformers' float32 ones. Over the prompt's
// positions the mean of max |logit − HF| is at most BF16MeanFactor times transformers' own
// bfloat16 run's, and every position's at most BF16MaxFactor times that run's worst. The wider
// second bound is for router flips: these random checkpoints keep router top-k gaps of 2e-4 (a
// float32 margin), which bfloat16's rounding crosses, so an expert flips at a few positions, in
// transformers' run as in ours but not at the same ones, and moves those logits by units.
const (
	BF16MeanFactor = 1.25
	BF16MaxFactor  = 4
)

// BF16Check checks prompt logits rows ([prompt][vocab], a prefix of the prompt's) against
// Prefill with the bfloat16 yardstick; it returns their mean and worst per-position error and
// the positions or the mean that exceed it.
func (g *Golden) BF16Check(rows []float32) (mean, worst float64, errs []error) {
	V := g.VocabSize
	n := len(rows) / V
	hfWorst := g.BF16Deviation()
	var hfMean float64
	for p := range n {
		d := MaxAbsDiff(rows[p*V:(p+1)*V], g.PrefillRow(p))
		mean, worst, hfMean = mean+d, max(worst, d), hfMean+g.bf16Row(p)
		if !(d <= BF16MaxFactor*hfWorst) {
			errs = append(errs, fmt.Errorf("prompt position %d: max |logit − HF| = %.3g > %g × transformers' bfloat16 worst %.3g", p, d, float64(BF16MaxFactor), hfWorst))
		}
	}
	mean, hfMean = mean/float64(n), hfMean/float64(n)
	if !(mean <= BF16MeanFactor*hfMean) {
		errs = append(errs, fmt.Errorf("mean max |logit − HF| over %d positions %.3g > %g × transformers' bfloat16 mean %.3g", n, mean, BF16MeanFactor, hfMean))
	}
	return mean, worst, errs
}

// BF16Mean is transformers' own bfloat16 run's mean over the prompt's positions of max |logit −
// float32 logit|.
func (g *Golden) BF16Mean() float64 {
	var m float64
	for p := range g.PromptIDs {
		m += g.bf16Row(p)
	}
	return m / float64(len(g.PromptIDs))
}

// bf16Row is transformers' bfloat16 error at prompt position p: max |logit − float32 logit|.
func (g *Golden) bf16Row(p int) float64 {
	V := g.VocabSize
	return MaxAbsDiff(g.PrefillBF16[p*V:(p+1)*V], g.PrefillRow(p))
}

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
