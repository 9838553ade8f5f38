package decode

import (
	"fmt"
	"math"

	"github.com/lilyformac/lily/engine/config"
	"github.com/lilyformac/lily/metal/plan"
)

// MaxBatch is the most sequences one multi-row decode step takes (continuous batching).
const MaxBatch = 8

// BatchCost is one decode step over Rows sequences at once, each at Context cached positions,
// modelled from the single-row step (the mode `lily bench --plan` reports, ModeSample) run with a
// row count: every kernel's grid covers the rows and loads its weights once, and each MoE layer
// first groups the rows by expert so that every touched expert runs once over its rows.
type BatchCost struct {
	Rows, Context        int
	Dispatches, Barriers int
	// Experts is how many routed experts a MoE layer reads for the step under uniform routing
	// (UnionExperts); the single-row step reads K.
	Experts float64
	// Bytes is the step's DRAM traffic, the sum of: Shared, the weights every row uses, read
	// once; Routed, the routed experts' ranges, Experts/K times one row's; PerRow, what each row
	// moves for itself (its KV rows, DeltaNet state and conv window, activations, logits, sampler
	// state, its embedding row), times Rows; Grouping, the grouping dispatches' own traffic.
	Bytes, Shared, Routed, PerRow, Grouping int64
	// FLOPs are every row's multiply-adds (×2): the single-row step's, times Rows.
	FLOPs float64
}

// BytesPerToken is the step's traffic over the tokens it produces, one per row.
func (b BatchCost) BytesPerToken() int64 { return b.Bytes / int64(b.Rows) }

// TokS is the aggregate tokens per second over the rows on chip, by the chip table's time model
// (plan.Chip.Seconds).
func (b BatchCost) TokS(chip plan.Chip) float64 {
	return float64(b.Rows) / chip.Seconds(b.Bytes, b.FLOPs)
}

// UnionExperts is how many distinct experts rows tokens touch in a layer of e experts when each
// picks k uniformly and independently: e·(1 − (1 − k/e)^rows), unrounded (a step's expected
// traffic; kernels.MoEShape.ExpectedExperts rounds it up to whole experts for a chunk's ranges).
func UnionExperts(e, k, rows int) float64 {
	return float64(e) * (1 - math.Pow(1-float64(k)/float64(e), float64(rows)))
}

// groupKernel is the dispatch that groups a MoE layer's rows by expert: the prefill chunk's
// moe_sort (its routing pairs sorted by expert, with a block map for the grouped GEMMs).
const groupKernel = "moe_sort"

// BatchModel models a decode step over rows sequences (1 to MaxBatch) at ctx cached positions
// with a kvBits KV cache. One row is exactly the single-row step: its dispatches, barriers, bytes
// and FLOPs. Above one row each MoE layer adds one grouping dispatch (and its barrier: it reads
// the router's ids and the gate/up GEMV reads its map), taken to be the prefill chunk's moe_sort
// over the rows' pairs with its traffic; the single-row kernels' dispatch count is otherwise
// unchanged, their grids covering the rows.
func BatchModel(c *config.Config, rows, ctx, kvBits int) (BatchCost, error) {
	if rows < 1 || rows > MaxBatch {
		return BatchCost{}, fmt.Errorf("decode: a batch of %d sequences: want 1 to %d", rows, MaxBatch)
	}
	s, err := Build(c, Options{MaxCtx: ctx + 1, TrafficCtx: ctx, KVBits: kvBits})
	if err != nil {
		return BatchCost{}, err
	}
	st := s.Plan.Stats(ModeSample)
	out := BatchCost{Rows: rows, Context: ctx, Dispatches: st.Dispatches, Barriers: st.Barriers,
		Experts: UnionExperts(c.NumExperts, c.TopK, rows), FLOPs: st.FLOPs * float64(rows)}
	var routedOne, perRowOne int64
	class := s.rowClass()
	for i := range s.Plan.Dispatches {
		if d := &s.Plan.Dispatches[i]; d.RunsIn(ModeSample) {
			parts := rowParts(d, class)
			out.Shared += parts[sharedPart]
			routedOne += parts[routedPart]
			perRowOne += parts[rowPart]
		}
	}
	out.Routed = int64(math.Round(float64(routedOne) * out.Experts / float64(c.TopK)))
	out.PerRow = perRowOne * int64(rows)
	if rows > 1 {
		n, bytes, err := grouping(c, rows, kvBits)
		if err != nil {
			return BatchCost{}, err
		}
		out.Dispatches += n
		out.Barriers += n
		out.Grouping = bytes
	}
	out.Bytes = out.Shared + out.Routed + out.PerRow + out.Grouping
	return out, nil
}

// How a range's traffic grows with a step's rows.
const (
	sharedPart = iota // a weight every row uses: read once
	routedPart        // a routed expert's weights: read once for the rows that route to it
	rowPart           // each row's own: KV, state, activations, control, its embedding row
)

// rowClass classifies the step's buffers by part (sharedPart, routedPart, rowPart).
func (s *Step) rowClass() []int {
	class := make([]int, len(s.Plan.Buffers))
	for i, b := range s.Plan.Buffers {
		if b.Kind != plan.Weights {
			class[i] = rowPart
		}
	}
	for _, b := range s.routed {
		class[b] = routedPart
	}
	for _, b := range s.embed {
		class[b] = rowPart
	}
	return class
}

// rowParts splits a dispatch's traffic (plan.Dispatch.Bytes: distinct reads plus distinct
// writes) into its parts by buffer class. Ranges of different buffers never overlap, so the
// parts sum to Bytes.
func rowParts(d *plan.Dispatch, class []int) (parts [3]int64) {
	for _, rs := range [][]plan.Range{d.Reads, d.Writes} {
		var split [3][]plan.Range
		for _, r := range rs {
			split[class[r.Buffer]] = append(split[class[r.Buffer]], r)
		}
		for p := range parts {
			parts[p] += plan.Distinct(split[p])
		}
	}
	return parts
}

// grouping is the grouping dispatches a step over rows adds, one per MoE layer, and their
// traffic: the moe_sort dispatches of a prefill chunk of rows tokens.
func grouping(c *config.Config, rows, kvBits int) (n int, bytes int64, err error) {
	s, err := Build(c, Options{MaxCtx: rows + 1, TrafficCtx: -1, KVBits: kvBits, Chunks: []int{rows}})
	if err != nil {
		return 0, 0, err
	}
	mode := ChunkModes(rows).Run
	for i := range s.Plan.Dispatches {
		if d := &s.Plan.Dispatches[i]; d.Kernel == groupKernel && d.RunsIn(mode) {
			n++
			bytes += d.Bytes()
		}
	}
	return n, bytes, nil
}
