package runner

import (
	"fmt"

	"github.com/lilyformac/lily/engine/backend"
)

// checkImages validates a request's images against its prompt: each a non-empty grid with one
// embedding row of the model's width per token, inside the prompt, in order and apart. The
// runner does not know the pad id, so it checks places, not the tokens there.
func (r *Runner) checkImages(req Request) error {
	if len(req.Images) == 0 {
		return nil
	}
	if d := r.b.Describe(); !d.Vision {
		return fmt.Errorf("runner: the %s backend takes no images: %s", d.Name, d.VisionWhy)
	}
	hidden, next := r.b.Config().HiddenSize, 0
	for k, im := range req.Images {
		n := im.H * im.W
		switch {
		case im.H <= 0 || im.W <= 0:
			return fmt.Errorf("runner: image %d has a %d×%d grid", k, im.H, im.W)
		case im.At < next:
			return fmt.Errorf("runner: image %d at token %d overlaps or precedes the one before it (which ends at %d)", k, im.At, next)
		case im.At+n > len(req.Prompt):
			return fmt.Errorf("runner: image %d's %d tokens at %d pass the prompt's end (%d tokens)", k, n, im.At, len(req.Prompt))
		case len(im.Embeds) != n:
			return fmt.Errorf("runner: image %d has %d embedding rows for its %d×%d grid", k, len(im.Embeds), im.H, im.W)
		}
		for _, row := range im.Embeds {
			if len(row) != hidden {
				return fmt.Errorf("runner: image %d has a row of %d values, the model's width is %d", k, len(row), hidden)
			}
		}
		next = im.At + n
	}
	return nil
}

// cacheKey is the sequence the prefix cache knows a prompt by: the prompt itself, with each
// image's pad tokens (one id for every image) replaced by values drawn from the image's ID, its
// grid and the token's place in it. Two prompts with the same ids but other pixels then share a
// cached prefix only up to the first image that differs. The values are negative, so they never
// equal a token id, and fit 32 bits signed (the disk tier stores 32 bits a token). A prompt
// without images is its own key.
func cacheKey(req Request) []int {
	if len(req.Images) == 0 {
		return req.Prompt
	}
	key := append([]int(nil), req.Prompt...)
	for _, im := range req.Images {
		base := mix(im.ID ^ uint64(im.H)<<48 ^ uint64(im.W)<<32)
		for i := range im.H * im.W {
			key[im.At+i] = -1 - int(mix(base+uint64(i))&0x7fffffff)
		}
	}
	return key
}

// mix is SplitMix64's finaliser: nearby inputs (consecutive token indices) give unrelated values.
func mix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ x>>30) * 0xbf58476d1ce4e5b9
	x = (x ^ x>>27) * 0x94d049bb133111eb
	return x ^ x>>31
}

// sliceImages are the images that overlap the prompt tokens [lo, hi), placed relative to lo: a
// slice may begin or end inside an image (At < 0, or past the slice's end), and the backend
// places its part (backend.Positions). Nil for a slice of text.
func sliceImages(images []Image, lo, hi int) []backend.Image {
	var out []backend.Image
	for _, im := range images {
		if im.At < hi && im.At+im.H*im.W > lo {
			bi := im.Image
			bi.At -= lo
			out = append(out, bi)
		}
	}
	return out
}
