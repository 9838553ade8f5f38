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
	"slices"
	"testing"
)

// Golden is one checkpoint's reference run.
type Golden struct {
	PromptIDs   []int     `json:"prompt_ids"`
	Stats       Stats     `json:"stats"`
	GreedyIDs   []int     `json:"greedy_ids"` // greedy_ids[0] is chosen from the prompt's last row
	VocabSize   int       `json:"vocab_size"`
	DecodeSteps int       `json:"decode_steps"`
	Prefill     []float32 `json:"-"` // logits at every prompt position, row-major [prompt][vocab]
	Decode      []float32 `json:"-"` // logits of each cached decode step, [steps][vocab]
	// PrefillF64 is Prefill from the same model run by transformers in float64: the reference of
	// routes that round activations to bfloat16.
	PrefillF64 []float64 `json:"-"`
	// PrefillBF16 is Prefill from the same model run by transformers in bfloat16 (weights and
	// activations): how far bfloat16 alone moves the logits, the yardstick of those routes.
	PrefillBF16 []float32 `json:"-"`
}

// BF16Deviation is max |PrefillBF16 − PrefillF64| over every prompt position: transformers' own
// bfloat16 error on this checkpoint.
func (g *Golden) BF16Deviation() float64 { return slices.Max(g.bf16Errors()) }

// The bfloat16 yardstick: a batched prefill stores its activations as bfloat (metal/decode), so
// its prompt logits sit at bfloat16's distance from the exact ones. It is held to transformers'
// own bfloat16 run, both measured against transformers' float64 run: every position's max
// |logit − float64| at most BF16MaxFactor times the worst of transformers' positions, and their
// mean at most BF16MeanFactor times transformers' mean. This is fair only where bfloat16 cannot
// change which experts run (a flip moves a position's logits by units): tools/golden makes the
// goldens' routing safe by construction and records that it is (SafeRouting).
const (
	BF16MeanFactor = 1.0
	BF16MaxFactor  = 1.0
	// RouteSafety is the least ratio of a golden's smallest router top-k gap to the largest
	// shift transformers' bfloat16 run gave a router logit.
	RouteSafety = 6
)

// Stats are what tools/golden measured of a golden's reference runs.
type Stats struct {
	MinRouterTopKGap   float64         `json:"min_router_topk_gap"`
	MaxRouterBF16Shift float64         `json:"max_router_bf16_shift"`
	RoutingAgrees      map[string]bool `json:"routing_agrees"`
}

// SafeRouting says why the golden's routing is not safe from bfloat16's rounding (nil if it is):
// its float32 and bfloat16 runs chose float64's experts everywhere, with top-k gaps at least
// RouteSafety times the bfloat16 run's largest router logit shift.
func (g *Golden) SafeRouting() error {
	s := g.Stats
	if !s.RoutingAgrees["f32"] || !s.RoutingAgrees["bf16"] || !(s.MinRouterTopKGap >= RouteSafety*s.MaxRouterBF16Shift) {
		return fmt.Errorf("routing not safe from bfloat16 (agrees %v, smallest top-k gap %.3g, bfloat16 shift %.3g): regenerate it with tools/golden/gen.py", s.RoutingAgrees, s.MinRouterTopKGap, s.MaxRouterBF16Shift)
	}
	return nil
}

// BF16Check checks prompt logits rows ([prompt][vocab], a prefix of the prompt's) with the
// bfloat16 yardstick; it returns their mean and worst per-position error against the float64
// run and the positions or the mean that exceed it.
func (g *Golden) BF16Check(rows []float32) (mean, worst float64, errs []error) {
	if err := g.SafeRouting(); err != nil {
		return 0, 0, []error{err}
	}
	return bf16Check(rows, g.VocabSize, g.bf16Errors(), g.f64Row)
}

// bf16Check is the bfloat16 yardstick of rows ([positions][V]) against transformers' bfloat16
// error at each prompt position (hf) and its float64 rows.
func bf16Check(rows []float32, V int, hf []float64, f64Row func(p int) []float64) (mean, worst float64, errs []error) {
	n := len(rows) / V
	hfWorst := slices.Max(hf)
	var hfMean float64
	for p := range n {
		d := MaxAbsDiff(rows[p*V:(p+1)*V], f64Row(p))
		mean, worst, hfMean = mean+d, max(worst, d), hfMean+hf[p]
		if !(d <= BF16MaxFactor*hfWorst) {
			errs = append(errs, fmt.Errorf("prompt position %d: max |logit − float64| = %.3g > %g × transformers' bfloat16 worst %.3g", p, d, float64(BF16MaxFactor), hfWorst))
		}
	}
	mean, hfMean = mean/float64(n), hfMean/float64(n)
	if !(mean <= BF16MeanFactor*hfMean) {
		errs = append(errs, fmt.Errorf("mean max |logit − float64| over %d positions %.3g > %g × transformers' bfloat16 mean %.3g", n, mean, float64(BF16MeanFactor), hfMean))
	}
	return mean, worst, errs
}

// BF16Mean is transformers' own bfloat16 run's mean over the prompt's positions of max |logit −
// float64 logit|.
func (g *Golden) BF16Mean() float64 {
	var m float64
	for _, d := range g.bf16Errors() {
		m += d
	}
	return m / float64(len(g.PromptIDs))
}

// bf16Errors is transformers' bfloat16 error at each prompt position: max |logit − float64 logit|.
func (g *Golden) bf16Errors() []float64 {
	V := g.VocabSize
	errs := make([]float64, len(g.PromptIDs))
	for p := range errs {
		errs[p] = MaxAbsDiff(g.PrefillBF16[p*V:(p+1)*V], g.f64Row(p))
	}
	return errs
}

// f64Row is the float64 run's logits row of prompt position p.
func (g *Golden) f64Row(p int) []float64 { return g.PrefillF64[p*g.VocabSize : (p+1)*g.VocabSize] }

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
	if g.PrefillF64, err = ReadF64(filepath.Join(dir, "prefill_logits_f64.f64")); err != nil {
		return nil, err
	}
	V := g.VocabSize
	if len(g.Prefill) != len(g.PromptIDs)*V || len(g.PrefillBF16) != len(g.Prefill) || len(g.PrefillF64) != len(g.Prefill) || len(g.Decode) != g.DecodeSteps*V || len(g.GreedyIDs) != g.DecodeSteps+1 {
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
	return readFloats(path, 4, func(b []byte) float32 { return math.Float32frombits(binary.LittleEndian.Uint32(b)) })
}

// ReadF64 reads a file of little-endian float64 values.
func ReadF64(path string) ([]float64, error) {
	return readFloats(path, 8, func(b []byte) float64 { return math.Float64frombits(binary.LittleEndian.Uint64(b)) })
}

// readFloats decodes path as values of size bytes each.
func readFloats[T any](path string, size int, decode func([]byte) T) ([]T, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	out := make([]T, len(raw)/size)
	for i := range out {
		out[i] = decode(raw[size*i:])
	}
	return out, nil
}

// MaxAbsDiff is max |a[i] − b[i]| (infinite if any difference is NaN).
func MaxAbsDiff[T float32 | float64](a []float32, b []T) float64 {
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
