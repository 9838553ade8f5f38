package decode

import (
	"github.com/lilyformac/lily/engine/config"
	"github.com/lilyformac/lily/metal/kernels"
	"github.com/lilyformac/lily/metal/plan"
)

// PrefillCost is a chunk of m prompt tokens after n cached positions through the chunk mode,
// modelled from the plan and the kernels' shapes.
type PrefillCost struct {
	Chunk, Context       int
	Dispatches, Barriers int
	// FLOPs are the multiply-adds (×2) the kernels execute, padding included (edge tiles of the
	// GEMM tiles, the 8×8 tiles of causal attention, the grouped GEMMs' blocks under uniform
	// routing, each expert's pairs a binomial count); IdealFLOPs count only the useful ones. The
	// weights' dequantisation is ALU work outside both.
	FLOPs, IdealFLOPs float64
	// Bytes is the DRAM traffic as the decode model counts it (distinct ranges per dispatch);
	// IdealBytes each weight the chunk uses read once, the KV cache read once and the chunk's
	// rows written, the recurrent state read and written once.
	Bytes, IdealBytes int64
}

// PrefillModel models a chunk of m tokens after n cached positions for configuration c with a
// kvBits KV cache.
func PrefillModel(c *config.Config, m, n, kvBits int) (PrefillCost, error) {
	s, err := Build(c, Options{MaxCtx: n + m + 1, TrafficCtx: n, Chunks: []int{m}, KVBits: kvBits})
	if err != nil {
		return PrefillCost{}, err
	}
	st := s.Plan.Stats(ChunkModes(m).Run)
	out := PrefillCost{Chunk: m, Context: n, Dispatches: st.Dispatches, Barriers: st.Barriers, Bytes: st.Bytes}
	out.FLOPs, out.IdealFLOPs = prefillFLOPs(c, m, n)
	out.IdealBytes = s.idealChunkBytes(ChunkModes(m).Run)
	return out, nil
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
				if d.Kernel == "attn_prefill" {
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

// prefillFLOPs counts the chunk's multiply-adds ×2, executed and useful.
func prefillFLOPs(c *config.Config, m, n int) (executed, ideal float64) {
	pad := func(x, to int) float64 { return float64((x + to - 1) / to * to) }
	tm := kernels.QMMTileRows(m)
	gemm := func(rows, cols int) { // y[m][rows] = x[m][cols] · Wᵀ on tm × 1024/tm tiles
		executed += 2 * pad(m, tm) * pad(rows, kernels.QMMTileCols(tm)) * float64(cols)
		ideal += 2 * float64(m) * float64(rows) * float64(cols)
	}
	H := c.HiddenSize
	gs := kernels.GDNShape{HK: c.LinearKeyHeads, HV: c.LinearValueHeads, DK: c.LinearKeyDim, DV: c.LinearValueDim}
	qd, kvd := c.NumHeads*c.HeadDim, c.NumKVHeads*c.HeadDim
	pairs := m * c.TopK
	ms := kernels.MoEShape{E: c.NumExperts, K: c.TopK}
	for _, kind := range c.Layers {
		if kind == config.LinearAttention {
			gemm(gs.Channels(), H)
			gemm(gs.HV*gs.DV, H)
			gemm(gs.HV, H)
			gemm(gs.HV, H)
			gemm(H, gs.HV*gs.DV)
			scan := 7 * float64(gs.DK*gs.DV) * float64(gs.HV) * float64(m) // decay, read, delta, write, output
			conv := 2 * float64(kernels.ConvKernel*gs.Channels()) * float64(m)
			executed, ideal = executed+scan+conv, ideal+scan+conv
		} else {
			gemm(2*qd, H)
			gemm(kvd, H)
			gemm(kvd, H)
			gemm(H, qd)
			// S = QKᵀ and O = PV over the causal keys: query t sees n + t + 1 keys; the kernel runs
			// whole 8-token blocks against whole 8-key tiles up to its last token's keys.
			for t0 := 0; t0 < m; t0 += kernels.AttnPrefillBlock {
				last := min(t0+kernels.AttnPrefillBlock, m) - 1
				executed += 4 * float64(c.HeadDim*c.NumHeads) * kernels.AttnPrefillBlock * pad(n+last+1, 8)
				for t := t0; t <= last; t++ {
					ideal += 4 * float64(c.HeadDim*c.NumHeads) * float64(n+t+1)
				}
			}
		}
		gemm(c.NumExperts, H) // router
		gemm(1, H)            // shared expert gate
		// routed experts under uniform routing: each expert's binomial count of pairs in blocks
		// of BlockRows(m)
		bm := ms.BlockRows(m)
		rows := ms.ExpectedBlocks(m, bm) * float64(bm)
		executed += 2 * rows * float64(c.MoEIntermediate) * float64(H) * 3
		ideal += 2 * float64(pairs) * float64(c.MoEIntermediate) * float64(H) * 3
		gemm(c.SharedIntermed, H)
		gemm(c.SharedIntermed, H)
		gemm(H, c.SharedIntermed)
	}
	return executed, ideal
}
