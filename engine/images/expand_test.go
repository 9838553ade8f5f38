package images_test

import (
	"slices"
	"testing"

	"github.com/lilyformac/lily/engine/images"
)

func fakeImage(id uint64, h, w int) *images.Encoded {
	rows := make([][]float32, h*w)
	for i := range rows {
		rows[i] = []float32{float32(id), float32(i)}
	}
	return &images.Encoded{ID: id, H: h, W: w, Rows: rows}
}

func TestExpand(t *testing.T) {
	const pad = 9
	a, b := fakeImage(1, 2, 4), fakeImage(2, 3, 2)
	got, spans, err := images.Expand([]int{5, pad, 6, 7, pad, 8}, pad, []*images.Encoded{a, b})
	if err != nil {
		t.Fatal(err)
	}
	want := []int{5, pad, pad, pad, pad, pad, pad, pad, pad, 6, 7, pad, pad, pad, pad, pad, pad, 8}
	if !slices.Equal(got, want) {
		t.Fatalf("expanded %v, want %v", got, want)
	}
	if len(spans) != 2 {
		t.Fatalf("%d images placed, want 2", len(spans))
	}
	for i, c := range []struct {
		at int
		im *images.Encoded
	}{{1, a}, {11, b}} {
		s := spans[i]
		if s.At != c.at || s.H != c.im.H || s.W != c.im.W || s.ID != c.im.ID || &s.Embeds[0] != &c.im.Rows[0] {
			t.Errorf("image %d: At %d %d×%d ID %d, want At %d %d×%d ID %d with its rows", i, s.At, s.H, s.W, s.ID, c.at, c.im.H, c.im.W, c.im.ID)
		}
	}
	for _, c := range []struct {
		prompt []int
		images []*images.Encoded
	}{
		{[]int{5, pad, 6}, []*images.Encoded{a, b}},
		{[]int{pad, pad, 6}, []*images.Encoded{a}},
		{[]int{5, 6}, []*images.Encoded{a}},
	} {
		if _, _, err := images.Expand(c.prompt, pad, c.images); err == nil {
			t.Errorf("%v with %d images: no error", c.prompt, len(c.images))
		}
	}
	if out, spans, err := images.Expand([]int{1, 2}, pad, nil); err != nil || !slices.Equal(out, []int{1, 2}) || len(spans) != 0 {
		t.Errorf("no images: %v %v %v", out, spans, err)
	}
}
