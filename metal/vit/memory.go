package vit

import (
	"github.com/lilyformac/lily/engine/config"
	"github.com/lilyformac/lily/metal/plan"
)

// Memory is the tower's device memory, in bytes, from its plan at the largest grid it serves.
type Memory struct {
	// Weights are the plan's Weights buffers: the checkpoint's bfloat16 tensors as stored, and
	// the patch embedding folded to float32 (the same bytes as its two bfloat16 halves).
	Weights int64 `json:"weights_bytes"`
	// Activations are the largest grid's: the pixel rows, the residual stream and the blocks'
	// intermediates, the merger's rows and the output. Every grid's executor can bind views of
	// one such set, since the tower runs one image at a time.
	Activations int64 `json:"activations_bytes"`
	// Tables are one executor's host tables (rotary frequencies, position-table taps), at a grid
	// of Patches whose sides sum to more than any image's.
	Tables  int64 `json:"tables_bytes"`
	Patches int   `json:"patches"` // the most patches of an image the Activations hold
}

// Total is the tower's device memory with executors executors sharing one set of activations.
func (m Memory) Total(executors int) int64 {
	return m.Weights + m.Activations + int64(executors)*m.Tables
}

// MaxPatches is the most patches an image becomes when its resized area is capped at maxPixels
// (engine/vision.SmartResize): the resized sides are whole multiples of a merged block's
// Factor() pixels with their product within the cap, so at most maxPixels/Factor()² blocks of
// Merge² patches each (1024-pixel blocks at 16-pixel patches: 2,621,440 pixels are at most 2,560
// blocks, 10,240 patches, which 2048×1280 reaches). 0 where not even one block fits.
func MaxPatches(v *config.Vision, maxPixels int) int {
	f := v.Factor()
	if f <= 0 {
		return 0
	}
	return maxPixels / (f * f) * v.Merge * v.Merge
}

// LargestGrid is a grid of patches patches (a multiple of Merge²): Merge rows of merged blocks
// side by side, whose buffers are those of any image grid of as many patches, and whose tables
// are the longest (its sides sum to the most).
func LargestGrid(v *config.Vision, patches int) (gh, gw int) { return v.Merge, patches / v.Merge }

// MemoryOf builds tower v's plan for images of up to maxPixels resized pixels (MaxPatches, at
// LargestGrid) and sums its buffers by kind.
func MemoryOf(v *config.Vision, maxPixels int) (Memory, error) {
	n := MaxPatches(v, maxPixels)
	gh, gw := LargestGrid(v, n)
	t, err := Build(v, gh, gw, plan.Simdgroup) // both routes' plans hold the same buffers
	if err != nil {
		return Memory{}, err
	}
	m := Memory{Patches: n}
	for _, b := range t.Plan.Buffers {
		switch b.Kind {
		case plan.Weights:
			m.Weights += b.Size
		case plan.Activations:
			m.Activations += b.Size
		default:
			m.Tables += b.Size
		}
	}
	return m, nil
}
