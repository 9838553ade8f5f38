package vision

import (
	"errors"
	"image"
	"testing"

	"github.com/lilyformac/lily/engine/config"
)

// TestGridMatchesPixels checks that the header-only grid is the grid the full preprocessing
// cuts, for sizes that are kept, rounded, upscaled past the minimum and capped by the maximum.
func TestGridMatchesPixels(t *testing.T) {
	p := NewProcessor(&config.Vision{PatchSize: 16, Merge: 2}).WithMaxPixels(64 * 64 * 4)
	p.MinPixels = 64 * 64
	for _, s := range [][2]int{{64, 64}, {100, 50}, {45, 33}, {20, 300}, {400, 130}, {33, 33}} {
		img := image.NewNRGBA(image.Rect(0, 0, s[0], s[1]))
		px, err := p.FromBytes(encodePNG(t, img))
		if err != nil {
			t.Fatal(err)
		}
		gh, gw, err := p.Grid(s[0], s[1])
		if err != nil {
			t.Fatal(err)
		}
		if gh != px.GridH || gw != px.GridW {
			t.Errorf("%d×%d: Grid %d×%d, preprocessing %d×%d", s[0], s[1], gh, gw, px.GridH, px.GridW)
		}
		if n, err := p.Tokens(s[0], s[1]); err != nil || n != px.Tokens() {
			t.Errorf("%d×%d: Tokens %d (%v), preprocessing %d", s[0], s[1], n, err, px.Tokens())
		}
	}
	if _, _, err := p.Grid(1000, 2); err == nil {
		t.Error("an aspect ratio of 500 was sized")
	}
}

func TestDecodeConfigLimit(t *testing.T) {
	data := encodePNG(t, image.NewGray(image.Rect(0, 0, 30, 20)))
	cfg, format, err := DecodeConfigLimit(data, 600)
	if err != nil || format != "png" || cfg.Width != 30 || cfg.Height != 20 {
		t.Fatalf("got %v %q %v, want a 30×20 png", cfg, format, err)
	}
	if _, _, err := DecodeConfigLimit(data, 599); !errors.Is(err, ErrTooLarge) {
		t.Errorf("600 pixels under a 599 limit: %v, want ErrTooLarge", err)
	}
	if _, _, err := DecodeConfigLimit([]byte("\x00\x00\x00\x18ftypheic\x00\x00\x00\x00"), 600); !errors.Is(err, ErrUnsupportedFormat) {
		t.Errorf("a HEIC header: %v, want ErrUnsupportedFormat", err)
	}
}
