package decode

import (
	"fmt"
	"math"

	"github.com/lilyformac/lily/engine/config"
	"github.com/lilyformac/lily/metal/plan"
)

// BatchCost is one decode step over Rows sequences at once, each at Context cached positions, in
// the mode `lily bench --plan` reports (ModeSample): with one row the single-row step, with more
// the multi-row plan (Options.Rows), every kernel reading its weights once for all rows and each
// touched routed expert once for the rows that route to it.
type BatchCost struct {
	Rows, Context        int
	Dispatches, Barriers int
	// Experts is how many routed experts a MoE layer reads for the step under uniform routing
	// (UnionExperts); the single-row step reads K.
	Experts float64
	// Bytes is the step's DRAM traffic, the sum of: Shared, the weights every row uses, read
	// once; Routed, the routed experts' ranges, Experts/K times one row's; PerRow, what the rows
	// move for themselves (KV rows, DeltaNet state and conv window, activations, logits, step
	// entries, embedding rows), all rows together.
	Bytes, Shared, Routed, PerRow int64
	// FLOPs are every row's multiply-adds (×2).
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

// BatchModel models a decode step over rows sequences (1 to MaxRows) at ctx cached positions with
// a kvBits KV cache, from the built plan: its dispatches, barriers, FLOPs, shared weights and
// per-row traffic as declared. Only the routed experts are modelled: the plan's ranges count
// every row's K experts as distinct (an upper bound), the model the UnionExperts of uniform
// routing, Experts/K times the single-row step's routed ranges.
func BatchModel(c *config.Config, rows, ctx, kvBits int) (BatchCost, error) {
	if rows < 1 || rows > MaxRows {
		return BatchCost{}, fmt.Errorf("decode: a batch of %d sequences: want 1 to %d", rows, MaxRows)
	}
	o := Options{MaxCtx: ctx + 1, TrafficCtx: ctx, KVBits: kvBits}
	one, err := Build(c, o)
	if err != nil {
		return BatchCost{}, err
	}
	s, mode := one, ModeSample
	if rows > 1 {
		o.Rows = rows
		if s, err = Build(c, o); err != nil {
			return BatchCost{}, err
		}
	}
	st := s.Plan.Stats(mode)
	out := BatchCost{Rows: rows, Context: ctx, Dispatches: st.Dispatches, Barriers: st.Barriers,
		Experts: UnionExperts(c.NumExperts, c.TopK, rows), FLOPs: st.FLOPs}
	parts := s.parts(mode)
	out.Shared, out.PerRow = parts[sharedPart], parts[rowPart]
	out.Routed = int64(math.Round(float64(one.parts(ModeSample)[routedPart]) * out.Experts / float64(c.TopK)))
	out.Bytes = out.Shared + out.Routed + out.PerRow
	return out, nil
}

// parts is the traffic of the dispatches that run in mode, by part.
func (s *Step) parts(mode string) (out [3]int64) {
	class := s.rowClass()
	for i := range s.Plan.Dispatches {
		if d := &s.Plan.Dispatches[i]; d.RunsIn(mode) {
			p := rowParts(d, class)
			for k := range out {
				out[k] += p[k]
			}
		}
	}
	return out
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
