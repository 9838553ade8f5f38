package decode

import (
	"strings"

	"github.com/lilyformac/lily/engine/config"
	"github.com/lilyformac/lily/metal/plan"
)

// PrefillCost is a chunk of m prompt tokens after n cached positions through the chunk mode on a
// route, modelled from the plan and the kernels' shapes.
type PrefillCost struct {
	Chunk, Context       int
	Route                plan.Route
	Dispatches, Barriers int
	// FLOPs are the multiply-adds (×2) the kernels execute, padding included (edge tiles of the
	// GEMM tiles, the 8×8 tiles of causal attention, the grouped GEMMs' blocks under uniform
	// routing, each expert's pairs a binomial count); IdealFLOPs count only the useful ones. The
	// weights' dequantisation is ALU work outside both.
	FLOPs, IdealFLOPs float64
	// TensorFLOPs are the part of FLOPs the route runs on tensor ops (plan.Dispatch.Tensor): none
	// on the simdgroup route, and none on the tensor route until kernels have tensor-op forms.
	TensorFLOPs float64
	// Bytes is the DRAM traffic as the decode model counts it (distinct ranges per dispatch);
	// IdealBytes each weight the chunk uses read once, the KV cache read once and the chunk's
	// rows written, the recurrent state read and written once.
	Bytes, IdealBytes int64
	// Fallbacks are the chunk's dispatches that keep their simdgroup form on the tensor route, by
	// kernel and why (plan.Plan.Fallbacks): shapes their tensor forms cannot run.
	Fallbacks []string
}

// PrefillModel models a chunk of m tokens after n cached positions for configuration c with a
// kvBits KV cache, on the simdgroup route (every chip's).
func PrefillModel(c *config.Config, m, n, kvBits int) (PrefillCost, error) {
	return PrefillRouteModel(c, m, n, kvBits, plan.Simdgroup)
}

// PrefillRouteModel is PrefillModel on route: the plan built with Options.PrefillRoute.
func PrefillRouteModel(c *config.Config, m, n, kvBits int, route plan.Route) (PrefillCost, error) {
	tctx := n
	if n == 0 {
		tctx = -1 // none cached (Options.TrafficCtx)
	}
	s, err := Build(c, Options{MaxCtx: n + m + 1, TrafficCtx: tctx, Chunks: []int{m}, KVBits: kvBits, PrefillRoute: route})
	if err != nil {
		return PrefillCost{}, err
	}
	st := s.Plan.Stats(ChunkModes(m).Run)
	out := PrefillCost{Chunk: m, Context: n, Route: route, Dispatches: st.Dispatches, Barriers: st.Barriers, Bytes: st.Bytes,
		FLOPs: st.FLOPs, IdealFLOPs: st.IdealFLOPs, TensorFLOPs: st.TensorFLOPs, // the dispatches' own FLOPs (flops.go), summed
		Fallbacks: s.Plan.Fallbacks(ChunkModes(m).Run)}
	out.IdealBytes = s.idealChunkBytes(ChunkModes(m).Run)
	return out, nil
}

// Work is the chunk's traffic and FLOPs, for plan.Chip.Time.
func (p PrefillCost) Work() plan.Work {
	return plan.Work{Bytes: p.Bytes, FLOPs: p.FLOPs, TensorFLOPs: p.TensorFLOPs}
}

// TokS is the chunk's modelled tokens per second on chip (plan.Chip.Time): an error where the
// route put FLOPs on tensor ops the chip does not have.
func (p PrefillCost) TokS(chip plan.Chip) (float64, error) {
	t, err := chip.Time(p.Work())
	if err != nil {
		return 0, err
	}
	return float64(p.Chunk) / t, nil
}

// idealChunkBytes is the chunk mode's weights read once (the union of the weight ranges its
// dispatches read), its KV ranges (the attention dispatches' reads and writes, once) and its
// recurrent state read and written once.
func (s *Step) idealChunkBytes(mode string) int64 {
	weights := map[int][]plan.Range{}
	var kv, state int64
	for _, d := range s.Plan.Dispatches {
		if !d.RunsIn(mode) || len(d.Modes) == 0 {
			continue
		}
		for _, r := range d.Reads {
			switch s.Plan.Buffers[r.Buffer].Kind {
			case plan.Weights:
				weights[r.Buffer] = append(weights[r.Buffer], r)
			case plan.KVCache:
				if strings.HasPrefix(d.Kernel, "attn_prefill") { // either route's form
					kv += r.Len
				}
			}
		}
		for _, r := range d.Writes {
			switch s.Plan.Buffers[r.Buffer].Kind {
			case plan.KVCache:
				kv += r.Len
			case plan.State:
				state += 2 * r.Len // read and written
			}
		}
	}
	var w int64
	for _, rs := range weights {
		w += plan.Distinct(rs)
	}
	return w + kv + state
}
