package runner

import (
	"context"
	"hash/fnv"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/lilyformac/lily/engine/backend"
	"github.com/lilyformac/lily/engine/cpu"
	"github.com/lilyformac/lily/engine/model"
	"github.com/lilyformac/lily/internal/goldens"
)

const visionDir = "../../testdata/vision/tiny-v"

// visionCase is the golden's two-image prompt on the CPU backend: its images encoded by the
// backend's tower from transformers' pixel rows, each named by its file (the pixels' stand-in).
type visionCase struct {
	m      *cpu.Model
	p      *goldens.VisionPrompt
	images []Image
}

func twoImages(t *testing.T) visionCase {
	t.Helper()
	g := goldens.MustLoadVision(t, visionDir)
	w, err := model.Load(visionDir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	m := cpu.New(w)
	p := g.Prompts["two-images"]
	pad := w.Config.Vision.ImageToken
	var images []Image
	for i, id := range p.IDs {
		if id != pad || (i > 0 && p.IDs[i-1] == pad) {
			continue
		}
		file := p.Images[len(images)]
		px := goldens.MustReferencePixels(t, g.Images[file])
		embeds, err := m.EncodeImage(px)
		if err != nil {
			t.Fatal(err)
		}
		h := fnv.New64a()
		h.Write([]byte(file))
		images = append(images, Image{Image: backend.Image{At: i, H: px.MergedH(), W: px.MergedW(), Embeds: embeds}, ID: h.Sum64()})
	}
	if len(images) != 2 {
		t.Fatalf("%d images in the two-image prompt", len(images))
	}
	return visionCase{m, p, images}
}

// request is the golden's greedy run of prompt (the golden's ids, or an edit of them).
func (vc visionCase) request(prompt []int, images []Image, checkpoints ...int) Request {
	return Request{Prompt: prompt, Images: images, MaxTokens: len(vc.p.GreedyIDs), Checkpoints: checkpoints}
}

// runLogits generates req on r, keeping every logits row a token was chosen from.
func runLogits(t *testing.T, r *Runner, req Request) ([]int, [][]float32, Result) {
	t.Helper()
	var rows [][]float32
	req.OnLogits = func(_ int, row []float32) error {
		rows = append(rows, slices.Clone(row))
		return nil
	}
	ids, res := collect(t, r, req)
	return ids, rows, res
}

// sameRun fails unless two runs chose the same tokens from logits within tol (a prompt fed in
// other slices rounds differently; a misplaced image or position changes far more).
func sameRun(t *testing.T, what string, ids, wantIDs []int, rows, wantRows [][]float32) {
	t.Helper()
	if !slices.Equal(ids, wantIDs) {
		t.Fatalf("%s: %v, want %v", what, ids, wantIDs)
	}
	const tol = 1e-3
	for step := range rows {
		for j, v := range rows[step] {
			if d := math.Abs(float64(v - wantRows[step][j])); !(d <= tol) {
				t.Fatalf("%s: step %d logit %d differs by %.3g", what, step, j, d)
			}
		}
	}
}

// TestImagesGolden: a two-image prompt gives transformers' greedy tokens, fed whole and in
// slices of 3 that cut through both images.
func TestImagesGolden(t *testing.T) {
	vc := twoImages(t)
	for _, slice := range []int{0, 3} {
		r := New(vc.m, Options{PrefillSlice: slice})
		got, _ := collect(t, r, vc.request(vc.p.IDs, vc.images))
		if !slices.Equal(got, vc.p.GreedyIDs) {
			t.Fatalf("slice %d: %v, transformers %v", slice, got, vc.p.GreedyIDs)
		}
	}
}

// TestImagesCacheHit: the same image prompt again is served whole from the prefix cache and
// gives the same tokens; a follow-up turn reuses the state after the generation.
func TestImagesCacheHit(t *testing.T) {
	vc := twoImages(t)
	r := New(vc.m, Options{CacheBytes: 1 << 30, PrefillSlice: 4})
	req := vc.request(vc.p.IDs, vc.images)
	first, rows, res := runLogits(t, r, req)
	if !slices.Equal(first, vc.p.GreedyIDs) || res.CachedTokens != 0 {
		t.Fatalf("first: %v (cached %d), transformers %v", first, res.CachedTokens, vc.p.GreedyIDs)
	}
	again, rows2, res := runLogits(t, r, req)
	if res.CachedTokens != len(vc.p.IDs) {
		t.Fatalf("repeat: %d tokens cached, want the whole prompt (%d)", res.CachedTokens, len(vc.p.IDs))
	}
	sameRun(t, "repeat", again, first, rows2, rows)

	// A follow-up turn (the conversation so far and new text) resumes after the generation.
	next := append(append(slices.Clone(vc.p.IDs), first[:len(first)-1]...), 11, 12, 13)
	req = vc.request(next, vc.images)
	want, wantRows, _ := runLogits(t, New(vc.m, Options{}), req)
	got, rows, res := runLogits(t, r, req)
	if res.CachedTokens != len(vc.p.IDs)+len(first)-1 {
		t.Fatalf("follow-up: %d tokens cached, want the prompt and generation (%d)", res.CachedTokens, len(vc.p.IDs)+len(first)-1)
	}
	sameRun(t, "follow-up", got, want, rows, wantRows)
}

// otherPixels is image k of images replaced by other pixels at the same place and grid: another
// ID and other embeddings (its rows in reverse order).
func otherPixels(images []Image, k int) []Image {
	out := slices.Clone(images)
	out[k].ID ^= 1
	out[k].Embeds = slices.Clone(out[k].Embeds)
	slices.Reverse(out[k].Embeds)
	return out
}

// TestImagesOtherPixels: the same prompt ids with other pixels in an image reuse the cache only up
// to that image (a checkpoint inside it does not match), and give the tokens of a fresh run.
func TestImagesOtherPixels(t *testing.T) {
	vc := twoImages(t)
	first, second := vc.images[0].At, vc.images[1].At
	r := New(vc.m, Options{CacheBytes: 1 << 30, PrefillSlice: 4})
	// Checkpoints before the first image, inside it and between the two.
	runLogits(t, r, vc.request(vc.p.IDs, vc.images, first, first+3, second-1))
	fresh := New(vc.m, Options{})
	for k, wantCached := range []int{first, second - 1} {
		req := vc.request(vc.p.IDs, otherPixels(vc.images, k))
		want, wantRows, _ := runLogits(t, fresh, req)
		got, rows, res := runLogits(t, r, req)
		if res.CachedTokens != wantCached {
			t.Fatalf("image %d changed: %d tokens cached, want %d (up to the image)", k, res.CachedTokens, wantCached)
		}
		sameRun(t, "other pixels", got, want, rows, wantRows)
	}
}

// edit is prompt with the text token at i changed.
func edit(prompt []int, i int) []int {
	p := slices.Clone(prompt)
	p[i] = (p[i] + 1) % 900
	return p
}

// TestImagesCheckpointInside: checkpoints inside each image; a later prompt that leaves the first
// prompt after one of them resumes from it, inside the image (inside the second, the rotary
// delta of the first is in the snapshot), and equals a fresh run.
func TestImagesCheckpointInside(t *testing.T) {
	vc := twoImages(t)
	in1, in2 := vc.images[0].At+3, vc.images[1].At+2
	r := New(vc.m, Options{CacheBytes: 1 << 30, PrefillSlice: 4})
	runLogits(t, r, vc.request(vc.p.IDs, vc.images, in1, in2))
	fresh := New(vc.m, Options{})
	after1, after2 := vc.images[0].At+8+1, len(vc.p.IDs)-3 // text after each image
	for _, c := range []struct{ edited, cached int }{{after2, in2}, {after1, in1}} {
		req := vc.request(edit(vc.p.IDs, c.edited), vc.images)
		want, wantRows, _ := runLogits(t, fresh, req)
		got, rows, res := runLogits(t, r, req)
		if res.CachedTokens != c.cached {
			t.Fatalf("edit at %d: %d tokens cached, want %d", c.edited, res.CachedTokens, c.cached)
		}
		sameRun(t, "resumed inside an image", got, want, rows, wantRows)
	}
}

// TestImagesDisk: snapshots go to disk with their rotary delta, including those taken after an
// image (delta ≠ 0); after a restart a new runner resumes from the checkpoint between the two
// images (the first image's delta restored from the file) as a fresh run would go, its key's
// negative image values read back.
func TestImagesDisk(t *testing.T) {
	vc := twoImages(t)
	dir := t.TempDir()
	d := openDisk(t, dir, 1<<30, testIdentity)
	r := New(vc.m, Options{CacheBytes: 1 << 30, Disk: d, CheckpointEvery: -1})
	before, inside, between := vc.images[0].At-2, vc.images[0].At+3, vc.images[1].At-1
	got, _ := collect(t, r, vc.request(vc.p.IDs, vc.images, before, inside, between))
	if !slices.Equal(got, vc.p.GreedyIDs) {
		t.Fatalf("%v, transformers %v", got, vc.p.GreedyIDs)
	}
	d.Flush()
	if st := d.Stats(); st.Writes != 4 || st.LastWriteError != "" {
		t.Fatalf("disk %+v: want 4 files (the three checkpoints and the end of the generation)", st)
	}

	restarted := New(twoImages(t).m, Options{CacheBytes: 1 << 30, Disk: openDisk(t, dir, 1<<30, testIdentity), CheckpointEvery: -1})
	req := vc.request(edit(vc.p.IDs, between), vc.images)
	want, wantRows, _ := runLogits(t, New(vc.m, Options{}), req)
	got, rows, res := runLogits(t, restarted, req)
	if res.CachedTokens != between || restarted.disk.Stats().Loads != 1 {
		t.Fatalf("after a restart: %d tokens cached (want %d), disk %+v", res.CachedTokens, between, restarted.disk.Stats())
	}
	sameRun(t, "restored from disk after an image", got, want, rows, wantRows)
}

// TestImagesValidated: misplaced or malformed images are refused before anything runs, and a
// backend without a vision tower refuses images.
func TestImagesValidated(t *testing.T) {
	vc := twoImages(t)
	n := len(vc.p.IDs)
	bad := map[string]func(im []Image){
		"past the end":  func(im []Image) { im[1].At = n - 3 },
		"negative":      func(im []Image) { im[0].At = -1 },
		"overlapping":   func(im []Image) { im[1].At = im[0].At + 2 },
		"out of order":  func(im []Image) { im[0], im[1] = im[1], im[0] },
		"empty grid":    func(im []Image) { im[0].H = 0 },
		"missing row":   func(im []Image) { im[1].Embeds = im[1].Embeds[1:] },
		"short row":     func(im []Image) { im[0].Embeds = slices.Clone(im[0].Embeds); im[0].Embeds[2] = im[0].Embeds[2][1:] },
		"grid mismatch": func(im []Image) { im[0].H, im[0].W = im[0].W+1, im[0].H },
	}
	r := New(vc.m, Options{})
	for name, spoil := range bad {
		images := slices.Clone(vc.images)
		spoil(images)
		_, err := r.Generate(context.Background(), vc.request(vc.p.IDs, images), func(Token) (bool, error) {
			t.Fatalf("%s: a token was generated", name)
			return false, nil
		})
		if err == nil || !strings.HasPrefix(err.Error(), "runner: image") {
			t.Errorf("%s: error %v", name, err)
		}
	}
	text := New(tinyBackend(t), Options{})
	_, err := text.Generate(context.Background(), vc.request(vc.p.IDs, vc.images), nil)
	if err == nil || !strings.Contains(err.Error(), "takes no images") {
		t.Errorf("a text-only backend: error %v", err)
	}
}

// TestCacheKey: a text prompt is its own key; an image's pads are keyed by its ID, distinctly
// per token and per image, negative and within 32 bits; the text around them is kept.
func TestCacheKey(t *testing.T) {
	vc := twoImages(t)
	text := Request{Prompt: vc.p.IDs}
	if k := cacheKey(text); &k[0] != &text.Prompt[0] || len(k) != len(text.Prompt) {
		t.Fatal("a text prompt's key is not the prompt itself")
	}
	req := vc.request(vc.p.IDs, vc.images)
	key := cacheKey(req)
	other := cacheKey(vc.request(vc.p.IDs, otherPixels(vc.images, 0)))
	inImage := map[int]bool{}
	seen := map[int]bool{}
	for _, im := range vc.images {
		for i := im.At; i < im.At+im.H*im.W; i++ {
			inImage[i] = true
			if v := key[i]; v >= 0 || v < math.MinInt32 || seen[v] {
				t.Fatalf("pad %d keyed %d (negative, 32-bit and unique expected)", i, v)
			}
			seen[key[i]] = true
		}
	}
	for i, id := range vc.p.IDs {
		switch {
		case !inImage[i] && (key[i] != id || other[i] != id):
			t.Fatalf("text token %d keyed %d / %d, want %d", i, key[i], other[i], id)
		case inImage[i] && i < vc.images[1].At && other[i] == key[i]:
			t.Fatalf("pad %d has the same key under another image ID", i)
		case i >= vc.images[1].At && other[i] != key[i]:
			t.Fatalf("pad %d of the unchanged image keyed differently", i)
		}
	}
	if !slices.Equal(cacheKey(req), key) || &key[0] == &req.Prompt[0] {
		t.Fatal("the key is not computed afresh and alike")
	}
}
