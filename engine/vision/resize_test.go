package vision

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"
)

func TestSmartResizeFacts(t *testing.T) {
	const lo, hi = 65_536, 16_777_216
	cases := []struct {
		name         string
		h, w, max    int
		wantH, wantW int
		wantTokens   int // (h·w)/1024, 0: not checked
	}{
		{"1024×768 stays", 768, 1024, hi, 768, 1024, 768},
		{"Claude Code paste", 1027, 1999, hi, 1024, 1984, 1984},
		{"1080p", 1080, 1920, hi, 1088, 1920, 2040},
		{"raw Retina, 94.5 rounds to 94", 1964, 3024, hi, 1952, 3008, 5734},
		{"2.5 rounds to 2", 80, 1024, hi, 64, 1024, 0},
		{"1.5 rounds to 2", 48, 2048, hi, 64, 2048, 0},
		{"3.5 rounds to 4", 112, 1024, hi, 128, 1024, 0},
		{"min-pixel upscale", 100, 100, hi, 256, 256, 64},
		{"min-pixel upscale, non-square", 200, 150, hi, 320, 224, 0},
		{"thin strip upscaled", 37, 500, hi, 96, 960, 0},
		{"24 MP photo down", 4032, 6048, hi, 3328, 4992, 0},
		{"wide photo down", 3000, 9000, hi, 2336, 7072, 0},
		{"server cap of 1 MP", 1964, 3024, 1 << 20, 800, 1248, 0},
		{"a 1×1 image is upscaled, not refused", 1, 1, hi, 256, 256, 0},
	}
	for _, c := range cases {
		h, w, err := SmartResize(c.h, c.w, 32, lo, c.max)
		if err != nil || h != c.wantH || w != c.wantW {
			t.Errorf("%s: SmartResize(%d, %d) = %d, %d, %v; want %d, %d", c.name, c.h, c.w, h, w, err, c.wantH, c.wantW)
		}
		if c.wantTokens != 0 && h*w/1024 != c.wantTokens {
			t.Errorf("%s: %d tokens, want %d", c.name, h*w/1024, c.wantTokens)
		}
	}
}

func TestSmartResizeSmallSidesAndAspect(t *testing.T) {
	// With no minimum area, a side under half a block would round to 0: it is raised to one block.
	h, w, err := SmartResize(5, 900, 32, 0, 16_777_216)
	if err != nil || h != 32 || w != 896 {
		t.Errorf("5×900 with no minimum: %d, %d, %v; want 32, 896", h, w, err)
	}
	if _, _, err := SmartResize(10, 2000, 32, 65_536, 16_777_216); err != nil {
		t.Errorf("aspect exactly 200 must pass: %v", err)
	}
	for _, hw := range [][2]int{{10, 2001}, {3000, 14}, {0, 10}, {10, -1}} {
		if _, _, err := SmartResize(hw[0], hw[1], 32, 65_536, 16_777_216); err == nil {
			t.Errorf("SmartResize(%d, %d) accepted", hw[0], hw[1])
		} else if hw[0] > 0 && hw[1] > 0 && !strings.Contains(err.Error(), "aspect") {
			t.Errorf("SmartResize(%d, %d): %v does not name the aspect ratio", hw[0], hw[1], err)
		}
	}
}

// refResize is PIL's antialiased bicubic written plainly in float64, straight from its
// definition: each output pixel a normalised weighted sum over its window, the horizontal pass
// rounded and clipped to bytes, then the vertical pass over it.
func refResize(src *RGB8, w, h int) *RGB8 {
	tmp := make([]uint8, 3*w*src.H)
	for y := 0; y < src.H; y++ {
		for x := 0; x < w; x++ {
			for c := 0; c < 3; c++ {
				tmp[(y*w+x)*3+c] = refSample(src.W, w, x, func(i int) float64 { return float64(src.Pix[(y*src.W+i)*3+c]) })
			}
		}
	}
	out := NewRGB8(w, h)
	for y := 0; y < h; y++ {
		for x := 0; x < w; x++ {
			for c := 0; c < 3; c++ {
				out.Pix[(y*w+x)*3+c] = refSample(src.H, h, y, func(i int) float64 { return float64(tmp[(i*w+x)*3+c]) })
			}
		}
	}
	return out
}

func refSample(in, out, i int, at func(int) float64) uint8 {
	scale := float64(in) / float64(out)
	fs := math.Max(scale, 1)
	center := (float64(i) + 0.5) * scale
	lo := math.Max(math.Trunc(center-2*fs+0.5), 0)
	hi := math.Min(math.Trunc(center+2*fs+0.5), float64(in))
	var sum, wsum float64
	for x := lo; x < hi; x++ {
		d := math.Abs((x - center + 0.5) / fs)
		var k float64
		if d < 1 {
			k = 1.5*d*d*d - 2.5*d*d + 1
		} else if d < 2 {
			k = -0.5*d*d*d + 2.5*d*d - 4*d + 2
		}
		sum += k * at(int(x))
		wsum += k
	}
	return uint8(math.Min(math.Max(math.Round(sum/wsum), 0), 255))
}

func randomRGB(r *rand.Rand, w, h int) *RGB8 {
	img := NewRGB8(w, h)
	for i := range img.Pix {
		img.Pix[i] = uint8(r.IntN(256))
	}
	return img
}

func TestResizeMatchesFloatReference(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	sizes := [][4]int{ // in w, h → out w, h
		{37, 23, 20, 50}, {64, 48, 16, 12}, {10, 10, 33, 7}, {50, 40, 96, 40}, {50, 40, 50, 13},
		{200, 3, 31, 9}, {7, 300, 64, 32},
	}
	for _, s := range sizes {
		src := randomRGB(r, s[0], s[1])
		got, want := Resize(src, s[2], s[3]), refResize(src, s[2], s[3])
		if got.W != s[2] || got.H != s[3] || len(got.Pix) != len(want.Pix) {
			t.Fatalf("%v: got %d×%d with %d bytes", s, got.W, got.H, len(got.Pix))
		}
		worst := 0
		for i := range got.Pix {
			worst = max(worst, int(math.Abs(float64(got.Pix[i])-float64(want.Pix[i]))))
		}
		if worst > 1 {
			t.Errorf("%d×%d → %d×%d: differs from the float64 reference by up to %d", s[0], s[1], s[2], s[3], worst)
		}
	}
}

func TestResizeIdentityAndConstant(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	src := randomRGB(r, 32, 64)
	same := Resize(src, 32, 64)
	for i := range src.Pix {
		if same.Pix[i] != src.Pix[i] {
			t.Fatalf("resize to the same size changed byte %d", i)
		}
	}
	for _, s := range [][4]int{{13, 9, 64, 64}, {300, 200, 17, 23}, {40, 40, 40, 7}} {
		flat := NewRGB8(s[0], s[1])
		for i := range flat.Pix {
			flat.Pix[i] = []uint8{13, 200, 255}[i%3]
		}
		out := Resize(flat, s[2], s[3])
		for i, v := range out.Pix {
			if want := []uint8{13, 200, 255}[i%3]; v != want {
				t.Fatalf("%v: constant image byte %d became %d, want %d", s, i, v, want)
			}
		}
	}
}
