package cpu_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/lilyformac/lily/engine/backend"
	"github.com/lilyformac/lily/engine/cpu"
	"github.com/lilyformac/lily/engine/model"
	"github.com/lilyformac/lily/engine/vision"
	"github.com/lilyformac/lily/internal/goldens"
)

const visionDir = "../../testdata/vision/tiny-v"

// promptImages encodes a golden prompt's images with the float32 tower, from transformers' pixel
// rows (pixels) or from the image files through Lily's own preprocessing (files), and places them
// at their pad runs.
func promptImages(t *testing.T, g *goldens.Vision, w *model.Weights, p *goldens.VisionPrompt, files bool) []backend.Image {
	t.Helper()
	v := w.Config.Vision
	tower := vision.NewTower(v, w.Vision)
	proc, err := vision.LoadProcessor(visionDir, v)
	if err != nil {
		t.Fatal(err)
	}
	var out []backend.Image
	k := 0
	for i, id := range p.IDs {
		if id != v.ImageToken || (i > 0 && p.IDs[i-1] == v.ImageToken) {
			continue
		}
		file := p.Images[k]
		k++
		var px *vision.Pixels
		if files {
			data, err := os.ReadFile(filepath.Join(visionDir, "images", file))
			if err != nil {
				t.Fatal(err)
			}
			if px, err = proc.FromBytes(data); err != nil {
				t.Fatal(err)
			}
		} else {
			px = goldens.MustReferencePixels(t, g.Images[file])
		}
		out = append(out, backend.Image{At: i, H: px.MergedH(), W: px.MergedW(), Embeds: tower.Encode(px)})
	}
	return out
}

// TestVisionGoldenHF: image prompts (landscape, portrait, two images) on the CPU reference give
// transformers' logits at every prompt position, and greedy decode after them (text at the
// positions the images shifted) gives its tokens and logits.
func TestVisionGoldenHF(t *testing.T) {
	g := goldens.MustLoadVision(t, visionDir)
	w, err := model.Load(visionDir)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	m := cpu.New(w)
	V := g.VocabSize
	for name, p := range g.Prompts {
		t.Run(name, func(t *testing.T) {
			st := m.NewState()
			logits, err := m.ForwardImages(st, p.IDs, promptImages(t, g, w, p, false), true)
			if err != nil {
				t.Fatal(err)
			}
			var worst float64
			for i, row := range logits {
				d := maxAbsDiff(row, p.Prefill[i*V:(i+1)*V])
				if d > tolerance {
					t.Errorf("prompt position %d: max |logit − HF| = %.3g > %g", i, d, tolerance)
				}
				worst = max(worst, d)
			}
			if st.Delta != p.RopeDelta {
				t.Errorf("rotary delta %d, HF %d", st.Delta, p.RopeDelta)
			}
			next := argmax(logits[len(logits)-1])
			for step := range p.DecodeSteps {
				if next != p.GreedyIDs[step] {
					t.Fatalf("greedy step %d: %d, HF %d", step, next, p.GreedyIDs[step])
				}
				out, err := m.Forward(st, []int{next}, false)
				if err != nil {
					t.Fatal(err)
				}
				d := maxAbsDiff(out[0], p.Decode[step*V:(step+1)*V])
				if d > tolerance {
					t.Errorf("decode step %d: max |logit − HF| = %.3g > %g", step, d, tolerance)
				}
				worst = max(worst, d)
				next = argmax(out[0])
			}
			t.Logf("max |logit − HF| %.3g over %d positions and %d decode steps", worst, len(logits), p.DecodeSteps)
		})
	}
}

// TestVisionFromFiles: the landscape image needs no resize, so Lily's own decoding and
// preprocessing of its PNG give transformers' prompt logits too.
func TestVisionFromFiles(t *testing.T) {
	g := goldens.MustLoadVision(t, visionDir)
	w, err := model.Load(visionDir)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	p := g.Prompts["landscape"]
	m := cpu.New(w)
	logits, err := m.ForwardImages(m.NewState(), p.IDs, promptImages(t, g, w, p, true), false)
	if err != nil {
		t.Fatal(err)
	}
	n, V := len(p.IDs), g.VocabSize
	if d := maxAbsDiff(logits[0], p.Prefill[(n-1)*V:n*V]); d > tolerance {
		t.Errorf("last position: max |logit − HF| = %.3g > %g", d, tolerance)
	}
}

// TestVisionChunks: a two-image prompt fed in pieces that cut through both images (their rows
// and positions split across calls) gives the logits of feeding it whole.
func TestVisionChunks(t *testing.T) {
	g := goldens.MustLoadVision(t, visionDir)
	w, err := model.Load(visionDir)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	p := g.Prompts["two-images"]
	m := cpu.New(w)
	images := promptImages(t, g, w, p, false)
	whole, err := m.ForwardImages(m.NewState(), p.IDs, images, false)
	if err != nil {
		t.Fatal(err)
	}
	st := m.NewState()
	var last [][]float32
	for lo := 0; lo < len(p.IDs); lo += 5 {
		hi := min(lo+5, len(p.IDs))
		var piece []backend.Image
		for _, im := range images {
			if im.At < hi && im.At+im.H*im.W > lo {
				im.At -= lo
				piece = append(piece, im)
			}
		}
		if last, err = m.ForwardImages(st, p.IDs[lo:hi], piece, false); err != nil {
			t.Fatal(err)
		}
	}
	if d := maxAbsDiff(whole[0], last[0]); d > 1e-4 {
		t.Errorf("chunked prompt differs from whole by %.3g", d)
	}
	if st.Delta != p.RopeDelta {
		t.Errorf("rotary delta %d after the pieces, HF %d", st.Delta, p.RopeDelta)
	}
}
