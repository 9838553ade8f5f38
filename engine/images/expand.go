package images

import (
	"fmt"

	"github.com/lilyformac/lily/engine/backend"
	"github.com/lilyformac/lily/engine/runner"
)

// Expand grows each pad token of a rendered prompt (one per image, in order) into the image's
// H·W pad tokens and places the image there: At is the index of its first pad in the expanded
// prompt, Embeds its rows, ID its hash.
func Expand(prompt []int, pad int, images []*Encoded) ([]int, []runner.Image, error) {
	if n := countOf(prompt, pad); n != len(images) {
		return nil, nil, fmt.Errorf("images: the prompt holds %d image pads for %d images", n, len(images))
	}
	size := len(prompt)
	for _, im := range images {
		if len(im.Rows) != im.H*im.W || im.H <= 0 || im.W <= 0 {
			return nil, nil, fmt.Errorf("images: image %016x has %d rows for a %d×%d grid", im.ID, len(im.Rows), im.H, im.W)
		}
		size += im.H*im.W - 1
	}
	out := make([]int, 0, size)
	spans := make([]runner.Image, 0, len(images))
	k := 0
	for _, tok := range prompt {
		if tok != pad {
			out = append(out, tok)
			continue
		}
		im := images[k]
		k++
		spans = append(spans, runner.Image{
			Image: backend.Image{At: len(out), H: im.H, W: im.W, Embeds: im.Rows},
			ID:    im.ID,
		})
		for range im.H * im.W {
			out = append(out, pad)
		}
	}
	return out, spans, nil
}

func countOf(s []int, v int) int {
	n := 0
	for _, x := range s {
		if x == v {
			n++
		}
	}
	return n
}
