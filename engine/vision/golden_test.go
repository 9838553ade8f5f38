package vision_test

import (
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/lilyformac/lily/engine/backend"
	"github.com/lilyformac/lily/engine/model"
	"github.com/lilyformac/lily/engine/vision"
	"github.com/lilyformac/lily/internal/goldens"
)

const goldenDir = "../../testdata/vision/tiny-v"

// TestPixelsMatchTransformers: the processor's rows equal transformers' exactly for an image
// needing no resize, and within 2/255 for resized ones (its resampling is torchvision's, Lily's
// PIL's), with the same grid.
func TestPixelsMatchTransformers(t *testing.T) {
	g := goldens.MustLoadVision(t, goldenDir)
	w, err := model.Load(goldenDir)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	proc, err := vision.LoadProcessor(goldenDir, w.Config.Vision)
	if err != nil {
		t.Fatal(err)
	}
	for file, im := range g.Images {
		t.Run(file, func(t *testing.T) {
			data, err := os.ReadFile(filepath.Join(goldenDir, "images", file))
			if err != nil {
				t.Fatal(err)
			}
			px, err := proc.FromBytes(data)
			if err != nil {
				t.Fatal(err)
			}
			if px.GridH != im.Grid[1] || px.GridW != im.Grid[2] {
				t.Fatalf("grid %d×%d, transformers %d×%d", px.GridH, px.GridW, im.Grid[1], im.Grid[2])
			}
			for name, ref := range im.Pixels {
				width := len(ref) / len(px.Rows)
				var worst float64
				for i, row := range px.Rows {
					want, err := goldens.FoldRow(ref[i*width:(i+1)*width], 16)
					if err != nil {
						t.Fatal(err)
					}
					worst = max(worst, goldens.MaxAbsDiff(row, want))
				}
				resized := im.Grid[1]*16 != imageHeight(t, data) || im.Grid[2]*16 != imageWidth(t, data)
				limit := 0.0
				if resized {
					limit = 2 / 127.5 // 2/255 of the pixel range, in normalised units
				}
				t.Logf("%s: max |row − %s| = %.3g (%.2f/255), resized %v", file, name, worst, worst*127.5, resized)
				if name == "default" && worst > limit {
					t.Errorf("%s: max |row − transformers| = %.3g > %.3g", file, worst, limit)
				}
			}
		})
	}
}

func imageWidth(t *testing.T, data []byte) int {
	img, _, _ := vision.Decode(data)
	return img.Bounds().Dx()
}
func imageHeight(t *testing.T, data []byte) int {
	img, _, _ := vision.Decode(data)
	return img.Bounds().Dy()
}

// TestTowerMatchesTransformers: the float32 tower on transformers' pixel rows gives
// transformers' image embeddings, for every image of every prompt.
func TestTowerMatchesTransformers(t *testing.T) {
	g := goldens.MustLoadVision(t, goldenDir)
	w, err := model.Load(goldenDir)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	tower := vision.NewTower(w.Config.Vision, w.Vision)
	H := g.HiddenSize
	for name, p := range g.Prompts {
		at := 0
		for _, file := range p.Images {
			got := tower.Encode(goldens.MustReferencePixels(t, g.Images[file]))
			var worst, scale float64
			for i, row := range got {
				want := p.Embeds[(at+i)*H : (at+i+1)*H]
				worst = max(worst, goldens.MaxAbsDiff(row, want))
				for _, v := range want {
					scale = max(scale, math.Abs(float64(v)))
				}
			}
			at += len(got)
			t.Logf("%s/%s: max |embedding − transformers| = %.3g (largest value %.3g)", name, file, worst, scale)
			if worst > 1e-4*scale {
				t.Errorf("%s/%s: max |embedding − transformers| = %.3g > 1e-4 × %.3g", name, file, worst, scale)
			}
		}
		if at*H != len(p.Embeds) {
			t.Errorf("%s: %d image rows, transformers %d", name, at, len(p.Embeds)/H)
		}
	}
}

// TestPositionsMatchTransformers: backend.Positions over each whole prompt gives transformers'
// three rotary rows and rope delta (landscape, portrait and two-image prompts).
func TestPositionsMatchTransformers(t *testing.T) {
	g := goldens.MustLoadVision(t, goldenDir)
	for name, p := range g.Prompts {
		var images []backend.Image
		k := 0
		for i := 0; i < len(p.IDs); i++ {
			if p.IDs[i] != 1000 || (i > 0 && p.IDs[i-1] == 1000) {
				continue
			}
			im := g.Images[p.Images[k]]
			k++
			images = append(images, backend.Image{At: i, H: im.Grid[1] / 2, W: im.Grid[2] / 2})
		}
		pos, delta, err := backend.Positions(0, 0, len(p.IDs), images)
		if err != nil {
			t.Fatal(err)
		}
		if delta != p.RopeDelta {
			t.Errorf("%s: delta %d, transformers %d", name, delta, p.RopeDelta)
		}
		for a := range 3 {
			for i := range p.IDs {
				if pos[a][i] != p.Positions[a][i] {
					t.Errorf("%s: axis %d token %d: position %d, transformers %d", name, a, i, pos[a][i], p.Positions[a][i])
					break
				}
			}
		}
	}
}
