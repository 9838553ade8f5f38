// Package vision turns images into the language model's input: decoding and Qwen's
// preprocessing into patch rows, the vision tower's float32 reference forward pass, and the
// multimodal rotary positions of a prompt that holds images.
package vision

// Pixels is one image ready for the tower: its grid of patches and one row per patch.
type Pixels struct {
	// GridH and GridW count patches (each a multiple of the merge size).
	GridH, GridW int
	// Merge is the side of a merged block of patches (2).
	Merge int
	// Rows holds GridH·GridW rows of 3·P·P values, [channel][y][x] (a still image's one frame:
	// the reference's two temporal copies are folded into the patch weight), in block-major
	// order: the Merge×Merge blocks row-major, the patches of a block row-major inside it.
	Rows [][]float32
}

// Tokens is the number of prompt tokens the image becomes: one per merged block.
func (p *Pixels) Tokens() int { return p.GridH * p.GridW / (p.Merge * p.Merge) }

// MergedH and MergedW are the grid of merged blocks (the image's token grid).
func (p *Pixels) MergedH() int { return p.GridH / p.Merge }
func (p *Pixels) MergedW() int { return p.GridW / p.Merge }
