package cpu_test

import (
	"path/filepath"
	"testing"

	"github.com/lilyformac/lily/engine/cpu"
	"github.com/lilyformac/lily/engine/model"
	"github.com/lilyformac/lily/internal/goldens"
)

func readGolden(t *testing.T, dir string) (*goldens.Golden, []float32, []float32) {
	g := goldens.MustLoad(t, dir)
	return g, g.Prefill, g.Decode
}

var (
	readF32    = goldens.MustReadF32
	maxAbsDiff = goldens.MaxAbsDiff[float32]
)

// tolerance is the acceptance bound of |logit − HF| at every position and step.
const tolerance = 2e-3

func goldenDirs(t *testing.T) []string {
	dirs, err := filepath.Glob("../../testdata/golden/*")
	if err != nil || len(dirs) < 2 {
		t.Fatalf("expected at least two golden checkpoints, found %v (%v)", dirs, err)
	}
	return dirs
}

func argmax(x []float32) int {
	best := 0
	for i, v := range x {
		if v > x[best] {
			best = i
		}
	}
	return best
}

// TestGoldenHF checks prefill logits at every position and every cached decode step against
// Hugging Face transformers, and that greedy choices agree at every step.
func TestGoldenHF(t *testing.T) {
	for _, dir := range goldenDirs(t) {
		t.Run(filepath.Base(dir), func(t *testing.T) {
			g, prefill, decode := readGolden(t, dir)
			w, err := model.Load(dir)
			if err != nil {
				t.Fatal(err)
			}
			defer w.Close()
			m := cpu.New(w)
			V := g.VocabSize
			if len(prefill) != len(g.PromptIDs)*V || len(decode) != g.DecodeSteps*V || len(g.GreedyIDs) != g.DecodeSteps+1 {
				t.Fatalf("golden files disagree on sizes: prefill %d, decode %d, ids %d", len(prefill), len(decode), len(g.GreedyIDs))
			}
			st := m.NewState()
			logits, err := m.Forward(st, g.PromptIDs, true)
			if err != nil {
				t.Fatal(err)
			}
			var worstPrefill float64
			for p, row := range logits {
				d := maxAbsDiff(row, prefill[p*V:(p+1)*V])
				if d > tolerance {
					t.Errorf("prefill position %d: max |logit − HF| = %.3g > %g", p, d, tolerance)
				}
				worstPrefill = max(worstPrefill, d)
			}
			if got := argmax(logits[len(logits)-1]); got != g.GreedyIDs[0] {
				t.Errorf("greedy token after prefill: got %d, HF %d", got, g.GreedyIDs[0])
			}
			var worstDecode float64
			for step := range g.DecodeSteps {
				out, err := m.Forward(st, []int{g.GreedyIDs[step]}, false)
				if err != nil {
					t.Fatal(err)
				}
				d := maxAbsDiff(out[0], decode[step*V:(step+1)*V])
				if d > tolerance {
					t.Errorf("decode step %d: max |logit − HF| = %.3g > %g", step, d, tolerance)
				}
				worstDecode = max(worstDecode, d)
				if got := argmax(out[0]); got != g.GreedyIDs[step+1] {
					t.Errorf("decode step %d: greedy %d, HF %d", step, got, g.GreedyIDs[step+1])
				}
			}
			t.Logf("max |logit − HF|: prefill %.3g over %d positions, decode %.3g over %d steps", worstPrefill, len(logits), worstDecode, g.DecodeSteps)
		})
	}
}

// TestPrefillSplitMatchesWhole checks that the cache carries state exactly: a prompt fed in two
// chunks gives the same final logits as in one go (the server's prefix cache depends on it).
func TestPrefillSplitMatchesWhole(t *testing.T) {
	dir := goldenDirs(t)[0]
	g, _, _ := readGolden(t, dir)
	w, err := model.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	m := cpu.New(w)
	whole, err := m.Forward(m.NewState(), g.PromptIDs, false)
	if err != nil {
		t.Fatal(err)
	}
	st := m.NewState()
	cut := len(g.PromptIDs) / 3
	if _, err := m.Forward(st, g.PromptIDs[:cut], false); err != nil {
		t.Fatal(err)
	}
	split, err := m.Forward(st, g.PromptIDs[cut:], false)
	if err != nil {
		t.Fatal(err)
	}
	if d := maxAbsDiff(whole[0], split[0]); d > 1e-4 {
		t.Fatalf("split prefill differs from whole prefill by %.3g", d)
	}
	if st.Pos != len(g.PromptIDs) {
		t.Fatalf("state position %d, want %d", st.Pos, len(g.PromptIDs))
	}
}

func TestForwardRejectsBadTokens(t *testing.T) {
	dir := goldenDirs(t)[0]
	w, err := model.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	m := cpu.New(w)
	for _, ids := range [][]int{{}, {-1}, {w.Config.VocabSize}} {
		if _, err := m.Forward(m.NewState(), ids, false); err == nil {
			t.Errorf("Forward(%v) succeeded, want an error", ids)
		}
	}
}

// TestGoldenIsSensitive shows the golden comparison can fail: small changes to routing, the shared
// expert's gate or the GDN decay push the logits far outside the tolerance.
func TestGoldenIsSensitive(t *testing.T) {
	dir := goldenDirs(t)[0]
	g, prefill, _ := readGolden(t, dir)
	V := g.VocabSize
	last := prefill[len(prefill)-V:]
	perturbations := []struct {
		name  string
		apply func(w *model.Weights) func()
	}{
		{"top-k minus one", func(w *model.Weights) func() {
			w.Config.TopK--
			return func() { w.Config.TopK++ }
		}},
		{"shared expert gate held at one half", func(w *model.Weights) func() {
			// The weights are mapped read-only: swap in a zeroed copy (sigmoid(0) = 0.5).
			m := w.Layers[0].MoE.SharedExpertGate
			zero := *m
			zero.Scales, zero.Biases = make([]uint16, len(m.Scales)), make([]uint16, len(m.Biases))
			w.Layers[0].MoE.SharedExpertGate = &zero
			return func() { w.Layers[0].MoE.SharedExpertGate = m }
		}},
		{"GDN decay of one layer", func(w *model.Weights) func() {
			a := w.Layers[1].GDN.ALog
			saved := append([]float32(nil), a...)
			for i := range a {
				a[i] -= 0.5
			}
			return func() { copy(a, saved) }
		}},
	}
	for _, p := range perturbations {
		t.Run(p.name, func(t *testing.T) {
			w, err := model.Load(dir)
			if err != nil {
				t.Fatal(err)
			}
			defer w.Close()
			restore := p.apply(w)
			defer restore()
			m := cpu.New(w)
			out, err := m.Forward(m.NewState(), g.PromptIDs, false)
			if err != nil {
				t.Fatal(err)
			}
			if d := maxAbsDiff(out[0], last); d < 50*tolerance {
				t.Fatalf("perturbed model still within %.3g of HF (tolerance %g): the comparison would not notice", d, tolerance)
			}
		})
	}
}
