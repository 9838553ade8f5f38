package images_test

import (
	"bytes"
	"context"
	"errors"
	"image"
	"image/png"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lilyformac/lily/engine/images"
	"github.com/lilyformac/lily/engine/vision"
)

func TestEncodeCaches(t *testing.T) {
	b, proc := tiny(t)
	e := images.NewEncoder(b, proc, images.Options{})
	ctx := context.Background()
	data := readImage(t, "landscape.png")
	first, err := e.Encode(ctx, dataURL(data))
	if err != nil {
		t.Fatal(err)
	}
	// Another spelling of the same bytes is the same image.
	again, err := e.Encode(ctx, "data:;base64,"+strings.TrimRight(strings.TrimPrefix(dataURL(data), "data:image/png;base64,"), "="))
	if err != nil {
		t.Fatal(err)
	}
	if n := b.runs.Load(); n != 1 {
		t.Errorf("two encodes of one image ran the tower %d times, want 1", n)
	}
	if again.ID != first.ID || !sameRows(again.Rows, first.Rows) {
		t.Errorf("the cached image differs: ID %x vs %x", again.ID, first.ID)
	}
	if enc, hits := e.Stats(); enc != 1 || hits != 1 {
		t.Errorf("Stats: %d encodes, %d hits; want 1, 1", enc, hits)
	}
	// The source size and grid agree with the file and the processor.
	px, err := proc.FromBytes(data)
	if err != nil {
		t.Fatal(err)
	}
	if first.Width != 128 || first.Height != 64 || first.H != px.MergedH() || first.W != px.MergedW() || len(first.Rows) != first.H*first.W {
		t.Errorf("encoded %d×%d source, %d×%d grid, %d rows; want 128×64, %d×%d, H·W", first.Width, first.Height, first.H, first.W, len(first.Rows), px.MergedH(), px.MergedW())
	}

	other, err := e.Encode(ctx, dataURL(altered(t, data)))
	if err != nil {
		t.Fatal(err)
	}
	if other.ID == first.ID || b.runs.Load() != 2 || sameRows(other.Rows, first.Rows) {
		t.Errorf("a changed pixel: ID %x vs %x, %d tower runs (want 2), rows equal %v", other.ID, first.ID, b.runs.Load(), sameRows(other.Rows, first.Rows))
	}
	if other.H != first.H || other.W != first.W {
		t.Errorf("the altered image's grid %d×%d differs from %d×%d", other.H, other.W, first.H, first.W)
	}
}

// rowBytes is what the cache charges per token: learnt from one encode (the hidden size).
func rowBytes(t *testing.T, e *images.Encoder, data []byte) int64 {
	enc, err := e.Encode(context.Background(), dataURL(data))
	if err != nil {
		t.Fatal(err)
	}
	return 4 * int64(len(enc.Rows[0]))
}

func TestLRUEviction(t *testing.T) {
	b, proc := tiny(t)
	ctx := context.Background()
	land, port, alpha := readImage(t, "landscape.png"), readImage(t, "portrait.png"), readImage(t, "small-alpha.png")
	row := rowBytes(t, images.NewEncoder(b, proc, images.Options{}), land)
	tokens := func(data []byte) int64 {
		n, err := images.NewEncoder(b, proc, images.Options{}).Tokens(dataURL(data))
		if err != nil {
			t.Fatal(err)
		}
		return int64(n)
	}
	if tokens(alpha) > tokens(port) {
		t.Fatal("the test needs small-alpha no larger than portrait")
	}
	// Room for landscape and portrait, not for a third image.
	e := images.NewEncoder(b, proc, images.Options{CacheBytes: row * (tokens(land) + tokens(port))})
	b.runs.Store(0)
	step := func(data []byte, wantRuns int64) {
		t.Helper()
		if _, err := e.Encode(ctx, dataURL(data)); err != nil {
			t.Fatal(err)
		}
		if n := b.runs.Load(); n != wantRuns {
			t.Fatalf("after this encode %d tower runs, want %d", n, wantRuns)
		}
	}
	step(land, 1)
	step(port, 2)
	step(land, 2)  // a hit, and landscape is now the most recently used
	step(alpha, 3) // portrait, the least recently used, makes room
	if e.Len() != 2 {
		t.Errorf("the cache holds %d images, want 2", e.Len())
	}
	step(land, 3)
	step(port, 4)

	// An image over the whole budget is returned, not kept, and evicts nothing.
	big := encodePNG(t, image.NewNRGBA(image.Rect(0, 0, 256, 128)))
	if tokens(big) <= tokens(land) {
		t.Fatal("the big image is not bigger than landscape")
	}
	e = images.NewEncoder(b, proc, images.Options{CacheBytes: row * tokens(land)})
	b.runs.Store(0)
	step(port, 1)
	step(big, 2)
	step(port, 2)
	if e.Len() != 1 {
		t.Errorf("the cache holds %d images, want portrait alone", e.Len())
	}
	b.runs.Store(4)
	tinyCache := images.NewEncoder(b, proc, images.Options{CacheBytes: 1})
	for range 2 {
		if enc, err := tinyCache.Encode(ctx, dataURL(land)); err != nil || len(enc.Rows) == 0 {
			t.Fatalf("an image over the cache: %v", err)
		}
	}
	if n := b.runs.Load(); n != 6 || tinyCache.Len() != 0 {
		t.Errorf("an image over the cache: %d runs (want 6), %d kept (want 0)", n, tinyCache.Len())
	}
}

func TestConcurrentEncodeRunsOnce(t *testing.T) {
	b, proc := tiny(t)
	b.delay = 100 * time.Millisecond // every goroutine asks while the first run lasts
	e := images.NewEncoder(b, proc, images.Options{})
	ref := dataURL(readImage(t, "portrait.png"))
	const n = 8
	var wg sync.WaitGroup
	start := make(chan struct{})
	got := make([]*images.Encoded, n)
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() {
			<-start
			got[i], errs[i] = e.Encode(context.Background(), ref)
		})
	}
	close(start)
	wg.Wait()
	for i := range n {
		if errs[i] != nil || got[i] == nil || got[i].ID != got[0].ID || !sameRows(got[i].Rows, got[0].Rows) {
			t.Fatalf("goroutine %d: %v", i, errs[i])
		}
	}
	if r := b.runs.Load(); r != 1 {
		t.Errorf("%d concurrent encodes of one image ran the tower %d times, want 1", n, r)
	}
}

func TestTokensMatchesEncode(t *testing.T) {
	b, proc := tiny(t)
	e := images.NewEncoder(b, proc, images.Options{})
	for _, name := range imageNames {
		ref := dataURL(readImage(t, name))
		n, err := e.Tokens(ref)
		if err != nil {
			t.Fatal(err)
		}
		if b.runs.Load() != 0 {
			t.Fatalf("%s: Tokens ran the tower", name)
		}
		enc, err := e.Encode(context.Background(), ref)
		if err != nil {
			t.Fatal(err)
		}
		b.runs.Store(0)
		if n != len(enc.Rows) {
			t.Errorf("%s: Tokens %d, Encode gave %d rows", name, n, len(enc.Rows))
		}
	}
	// A lower pixel cap gives fewer tokens, in Tokens and Encode alike.
	capped := images.NewEncoder(b, proc, images.Options{MaxPixels: 64 * 64})
	ref := dataURL(readImage(t, "landscape.png"))
	n, err := capped.Tokens(ref)
	enc, err2 := capped.Encode(context.Background(), ref)
	if err != nil || err2 != nil || n != len(enc.Rows) || n > 4 {
		t.Errorf("capped at 64×64 pixels: Tokens %d (%v), Encode %v; want equal and at most 4", n, err, err2)
	}
}

func TestEncodeErrors(t *testing.T) {
	b, proc := tiny(t)
	e := images.NewEncoder(b, proc, images.Options{})
	ctx := context.Background()
	data := readImage(t, "landscape.png")
	heic := []byte("\x00\x00\x00\x18ftypheic\x00\x00\x00\x00mif1heic")
	cases := []struct {
		name string
		data []byte
		is   error
		says string
	}{
		{"truncated png", data[:len(data)/2], nil, "png"},
		{"not an image", []byte("hello, world, not an image"), vision.ErrUnsupportedFormat, ""},
		{"heic", heic, vision.ErrUnsupportedFormat, "HEIC"},
		{"empty", nil, vision.ErrUnsupportedFormat, ""},
	}
	for _, c := range cases {
		_, err := e.Encode(ctx, dataURL(c.data))
		if err == nil || (c.is != nil && !errors.Is(err, c.is)) || !strings.Contains(err.Error(), c.says) {
			t.Errorf("%s: %v, want an error (%v, saying %q)", c.name, err, c.is, c.says)
		}
	}
	for _, c := range cases[1:] { // a truncated body may keep a whole header: Tokens can't tell
		if _, err := e.Tokens(dataURL(c.data)); !errors.Is(err, c.is) {
			t.Errorf("Tokens of %s: %v, want %v", c.name, err, c.is)
		}
	}
	if n := b.runs.Load(); n != 0 {
		t.Errorf("bad images ran the tower %d times", n)
	}

	b.off = "the checkpoint has no vision tower (test)"
	_, err := e.Encode(ctx, dataURL(data))
	if !errors.Is(err, images.ErrVisionOff) || !strings.Contains(err.Error(), b.off) {
		t.Errorf("vision off: %v, want ErrVisionOff naming why", err)
	}
}

func encodePNG(t *testing.T, img image.Image) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := png.Encode(&b, img); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}
