//go:build linux

package gpu

import (
	"context"
	"slices"
	"testing"

	"github.com/lilyformac/lily/engine/backend"
	"github.com/lilyformac/lily/engine/model"
	"github.com/lilyformac/lily/engine/sample"
	"github.com/lilyformac/lily/internal/goldens"
)

// gpuImages encodes a golden prompt's images on the backend (EncodeImage, from transformers'
// pixel rows) and places them at their pad runs.
func gpuImages(t *testing.T, e *GPU, g *goldens.Vision, p *goldens.VisionPrompt) []backend.Image {
	t.Helper()
	pad := e.w.Config.Vision.ImageToken
	var out []backend.Image
	for i, id := range p.IDs {
		if id != pad || (i > 0 && p.IDs[i-1] == pad) {
			continue
		}
		px := goldens.MustReferencePixels(t, g.Images[p.Images[len(out)]])
		rows, err := e.EncodeImage(px)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, backend.Image{At: i, H: px.MergedH(), W: px.MergedW(), Embeds: rows})
	}
	if len(out) != len(p.Images) {
		t.Fatalf("%d pad runs for %d images", len(out), len(p.Images))
	}
	return out
}

// visionEmu is tiny-v's weights and an emulated backend on them.
func visionEmu(t *testing.T, o GPUOptions) (*goldens.Vision, *GPU) {
	t.Helper()
	g := goldens.MustLoadVision(t, visionDir)
	w, err := model.Load(visionDir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	e := newEmu(t, w, EmuOptions{GPUOptions: o})
	t.Cleanup(e.Close)
	if d := e.Describe(); !d.Vision {
		t.Fatalf("the backend takes no images: %s", d.VisionWhy)
	}
	return g, e
}

// TestImagesGoldenDecodeStep: image prompts (landscape, portrait, two images) fed token by token
// through the decode step give transformers' float32 logits at every prompt position within
// the decode path's tolerance and leave its rotary delta; then the landscape and portrait
// sequences (deltas −4 and −3) decode side by side through the two-row step and the
// two-image one through the GPU-resident loop (ContinueRows), each giving transformers' greedy
// tokens (and, in the rows, its logits).
func TestImagesGoldenDecodeStep(t *testing.T) {
	g, e := visionEmu(t, GPUOptions{MaxCtx: 64, Parallel: 2})
	V := g.VocabSize
	sessions := map[string]*Session{}
	for _, name := range []string{"landscape", "portrait", "two-images"} {
		p := g.Prompts[name]
		s := e.NewSession().(*Session)
		t.Cleanup(s.Close)
		rows, err := s.ForwardImages(p.IDs, gpuImages(t, e, g, p), true)
		if err != nil {
			t.Fatal(err)
		}
		var worst float64
		for i, row := range rows {
			worst = max(worst, maxAbsDiff(row, p.Prefill[i*V:(i+1)*V]))
		}
		t.Logf("%s: max |logit − HF| %.3g over %d prompt positions", name, worst, len(rows))
		if worst > tolerance {
			t.Errorf("%s: max |logit − HF| %.3g > %g", name, worst, tolerance)
		}
		if s.delta() != p.RopeDelta || s.NextToken() != p.GreedyIDs[0] {
			t.Errorf("%s: delta %d, next %d; HF %d, %d", name, s.delta(), s.NextToken(), p.RopeDelta, p.GreedyIDs[0])
		}
		sessions[name] = s
	}
	decodeRows(t, e, g, sessions["landscape"], sessions["portrait"])
	p := g.Prompts["two-images"]
	toks, err := greedy(sessions["two-images"], context.Background(), p.DecodeSteps+1, nil)
	if err != nil || !slices.Equal(toks, p.GreedyIDs) {
		t.Errorf("two-images on the device: %v (%v), HF %v", toks, err, p.GreedyIDs)
	}
}

// decodeRows steps a and b (landscape, portrait) together through the multi-row step for their
// prompts' decode steps, checking each row against transformers.
func decodeRows(t *testing.T, e *GPU, g *goldens.Vision, a, b *Session) {
	t.Helper()
	pa, pb := g.Prompts["landscape"], g.Prompts["portrait"]
	V := g.VocabSize
	steps0, _ := e.Batched()
	var worst float64
	for step := range min(pa.DecodeSteps, pb.DecodeSteps) {
		res := e.StepRows([]backend.Row{{Session: a, Tokens: []int{pa.GreedyIDs[step]}}, {Session: b, Tokens: []int{pb.GreedyIDs[step]}}})
		for i, p := range []*goldens.VisionPrompt{pa, pb} {
			if res[i].Err != nil {
				t.Fatal(res[i].Err)
			}
			worst = max(worst, maxAbsDiff(res[i].Logits, p.Decode[step*V:(step+1)*V]))
			if got := argmax(res[i].Logits); got != p.GreedyIDs[step+1] {
				t.Fatalf("row %d, decode step %d: greedy %d, HF %d", i, step, got, p.GreedyIDs[step+1])
			}
		}
	}
	t.Logf("two-row decode after images: max |logit − HF| %.3g", worst)
	if worst > tolerance {
		t.Errorf("two-row decode after images: max |logit − HF| %.3g > %g", worst, tolerance)
	}
	if steps1, _ := e.Batched(); steps1 == steps0 {
		t.Error("no multi-row step ran")
	}
}

// TestImagesGoldenChunks: through the chunk modes (chunks of 16 and 8 with every row's logits,
// the rest by the decode step) the image prompts hold the bfloat16 yardstick at every position;
// fed in pieces of 10 that cut through the images (each piece a chunk of 8 and two tokens) the
// two-image prompt ends at the whole prompt's last logits within the decode path's tolerance,
// with transformers' delta, and a snapshot restored from its disk encoding carries the delta.
func TestImagesGoldenChunks(t *testing.T) {
	g, e := visionEmu(t, GPUOptions{MaxCtx: 64, Chunks: []int{16, 8}, ChunkLogits: true})
	for _, name := range []string{"landscape", "two-images"} {
		p := g.Prompts[name]
		s := e.NewSession().(*Session)
		rows, err := s.ForwardImages(p.IDs, gpuImages(t, e, g, p), true)
		s.Close()
		if err != nil {
			t.Fatal(err)
		}
		mean, worst, errs := g.BF16Check(p, slices.Concat(rows...))
		for _, err := range errs {
			t.Errorf("%s: %v", name, err)
		}
		t.Logf("%s: max |logit − float64| mean %.3g, worst %.3g over %d positions", name, mean, worst, len(rows))
	}
	p := g.Prompts["two-images"]
	images := gpuImages(t, e, g, p)
	s := e.NewSession().(*Session)
	defer s.Close()
	var last [][]float32
	for lo := 0; lo < len(p.IDs); lo += 10 {
		hi := min(lo+10, len(p.IDs))
		var err error
		if last, err = s.ForwardImages(p.IDs[lo:hi], piecesOf(images, lo, hi), false); err != nil {
			t.Fatal(err)
		}
	}
	V, n := g.VocabSize, len(p.IDs)
	if d := maxAbsDiff(last[0], p.Prefill[(n-1)*V:n*V]); d > tolerance || s.delta() != p.RopeDelta {
		t.Errorf("in pieces: last position max |logit − HF| %.3g (tolerance %g), delta %d (HF %d)", d, tolerance, s.delta(), p.RopeDelta)
	}
	checkDeltaSurvivesDisk(t, e, s, p)
}

// piecesOf is images as a piece [lo, hi) of the prompt names them (At relative to lo).
func piecesOf(images []backend.Image, lo, hi int) []backend.Image {
	var out []backend.Image
	for _, im := range images {
		if im.At < hi && im.At+im.H*im.W > lo {
			im.At -= lo
			out = append(out, im)
		}
	}
	return out
}

// checkDeltaSurvivesDisk saves s, encodes and decodes the snapshot as the disk cache does, and
// requires the restored session to have s's delta and to choose transformers' first greedy
// decode token through the GPU-resident loop.
func checkDeltaSurvivesDisk(t *testing.T, e *GPU, s *Session, p *goldens.VisionPrompt) {
	t.Helper()
	sn, err := s.Save()
	if err != nil {
		t.Fatal(err)
	}
	data, err := e.EncodeSnapshot(sn)
	sn.Close()
	if err != nil {
		t.Fatal(err)
	}
	back, err := e.DecodeSnapshot(data, s.Pos())
	if err != nil {
		t.Fatal(err)
	}
	defer back.Close()
	r, err := back.Restore()
	if err != nil {
		t.Fatal(err)
	}
	rs := r.(*Session)
	defer rs.Close()
	seed := uint64(0)
	var got []int
	_, err = e.ContinueRows(context.Background(), []backend.GenRow{{Session: rs, Params: sample.Params{Seed: &seed}, Generated: []int{p.GreedyIDs[0]}, Max: 1,
		OnToken: func(c sample.Choice) (bool, error) { got = append(got, c.ID); return false, nil }}})
	if err != nil || rs.delta() != p.RopeDelta || !slices.Equal(got, p.GreedyIDs[1:2]) {
		t.Errorf("restored from disk: delta %d (HF %d), next %v (HF %d), %v", rs.delta(), p.RopeDelta, got, p.GreedyIDs[1], err)
	}
}
