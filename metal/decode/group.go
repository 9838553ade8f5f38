package decode

import (
	"fmt"
	"math"

	"github.com/lilyformac/lily/engine/config"
	"github.com/lilyformac/lily/engine/draft"
	"github.com/lilyformac/lily/metal/plan"
)

// GroupModel prices a decode step whose rows are grouped by sequence (draft.Group): a sequence
// verifying K drafted tokens takes K+1 rows at consecutive positions. Its parts come from the
// built one-row plan, split by how they grow over the step's rows:
//   - Shared: the weights every row uses, read once a step;
//   - Routed: one row's K routed experts' ranges; a step reads UnionExperts over all its rows
//     (uniform routing: a sequence's consecutive tokens share few experts);
//   - Row: what each row moves for itself: activations, logits, its sampler buffers, step
//     entry and block table, its embedding row and its new KV rows;
//   - Seq: a sequence's DeltaNet states and conv windows, read and written once a step however
//     many rows it has (its rows run the recurrence in turn on the state in hand);
//   - KV: the cached K and V a sequence's attention reads, KVBase + KVPos per position, once for
//     all its rows (causal within them): a group of Rows after Ctx reads Ctx+Rows positions.
//
// FLOPs are RowFLOPs a row, but attention's, which are KeyFLOPs per key a row attends to. Step
// is the chip's time model (plan.Chip.Seconds) over the sum. A group of one row is exactly the
// one-row plan's step, and one-row groups are BatchModel's multi-row step.
type GroupModel struct {
	Chip                     plan.Chip
	KVBits                   int // the KV cache format modeled: 16 or 8
	Shared, Routed, Row, Seq int64
	KVBase, KVPos            float64
	RowFLOPs, KeyFLOPs       float64
	experts, topK            int
	union                    [2*MaxRows + 1]float64 // Routed's factor for n rows (UnionExperts/K)
}

var _ draft.Cost = (*GroupModel)(nil)

// NewGroupModel models c's decode step with a maxCtx-position kvBits KV cache on chip, from the
// one-row plan built with the traffic model at its first and its last position (maxCtx ≥ 2):
// the KV reads and attention FLOPs are linear in the positions between.
func NewGroupModel(c *config.Config, maxCtx, kvBits int, chip plan.Chip) (*GroupModel, error) {
	if maxCtx < 2 {
		return nil, fmt.Errorf("decode: a group model of %d positions: want at least 2", maxCtx)
	}
	var steps [2]*Step
	for i, tctx := range []int{-1, maxCtx - 1} { // Options.TrafficCtx: -1 is position 0
		s, err := Build(c, Options{MaxCtx: maxCtx, TrafficCtx: tctx, KVBits: kvBits})
		if err != nil {
			return nil, err
		}
		steps[i] = s
	}
	first, last := steps[0].groupParts(ModeSample), steps[1].groupParts(ModeSample)
	span := float64(maxCtx - 1)
	m := &GroupModel{Chip: chip, KVBits: steps[0].KVBits, Shared: first[gShared], Routed: first[gRouted], Row: first[gRow] + first[gKVWrite],
		Seq: first[gSeq], experts: c.NumExperts, topK: c.TopK}
	m.KVPos = float64(last[gKVRead]-first[gKVRead]) / span
	m.KVBase = float64(first[gKVRead]) - m.KVPos // the first plan reads one position
	f0, f1 := steps[0].Plan.Stats(ModeSample).FLOPs, steps[1].Plan.Stats(ModeSample).FLOPs
	m.KeyFLOPs = (f1 - f0) / span
	m.RowFLOPs = f0 - m.KeyFLOPs
	for n := range m.union {
		m.union[n] = UnionExperts(c.NumExperts, c.TopK, n) / float64(c.TopK)
	}
	return m, nil
}

// Work is the step's DRAM traffic and FLOPs.
func (m *GroupModel) Work(groups []draft.Group) (bytes, flops float64) {
	rows := 0
	for _, g := range groups {
		n, ctx := float64(g.Rows), float64(g.Ctx)
		rows += g.Rows
		bytes += n*float64(m.Row) + float64(m.Seq) + m.KVBase + m.KVPos*(ctx+n)
		// Row j of the group attends to ctx+1+j keys.
		flops += n*m.RowFLOPs + m.KeyFLOPs*(n*(ctx+1)+n*(n-1)/2)
	}
	return bytes + float64(m.Shared) + float64(m.Routed)*m.unionOf(rows), flops
}

// Step is the step's time in seconds on the model's chip.
func (m *GroupModel) Step(groups []draft.Group) float64 {
	bytes, flops := m.Work(groups)
	return m.Chip.Seconds(int64(math.Round(bytes)), flops)
}

// unionOf is the routed experts' factor for rows rows.
func (m *GroupModel) unionOf(rows int) float64 {
	if rows < len(m.union) {
		return m.union[rows]
	}
	return UnionExperts(m.experts, m.topK, rows) / float64(m.topK)
}

// How the one-row step's traffic grows over a group's rows (GroupModel).
const (
	gShared  = iota // weights every row uses
	gRouted         // routed experts: the union of the rows'
	gRow            // each row's own, but its KV
	gSeq            // the sequence's DeltaNet states and conv windows
	gKVRead         // the sequence's cached KV, read
	gKVWrite        // a row's new KV, written
	gParts
)

// groupParts is the traffic of the dispatches that run in mode by group part. It refines
// parts: the per-row part split into state, KV reads and writes and the rest.
func (s *Step) groupParts(mode string) (out [gParts]int64) {
	class := s.groupClass()
	for i := range s.Plan.Dispatches {
		d := &s.Plan.Dispatches[i]
		if !d.RunsIn(mode) {
			continue
		}
		for w, rs := range [][]plan.Range{d.Reads, d.Writes} {
			var split [gParts][]plan.Range
			for _, r := range rs {
				p := class[r.Buffer]
				if p == gKVRead && w == 1 {
					p = gKVWrite
				}
				split[p] = append(split[p], r)
			}
			for p := range out {
				out[p] += plan.Distinct(split[p])
			}
		}
	}
	return out
}

// groupClass classifies the step's buffers by group part (a KV cache as gKVRead: its writes
// are gKVWrite).
func (s *Step) groupClass() []int {
	class := s.rowClass()
	for i, c := range class {
		switch {
		case c == sharedPart:
			class[i] = gShared
		case c == routedPart:
			class[i] = gRouted
		case s.Plan.Buffers[i].Kind == plan.State:
			class[i] = gSeq
		case s.Plan.Buffers[i].Kind == plan.KVCache:
			class[i] = gKVRead
		default:
			class[i] = gRow
		}
	}
	return class
}
