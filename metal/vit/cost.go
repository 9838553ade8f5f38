package vit

import (
	"github.com/lilyformac/lily/engine/config"
	"github.com/lilyformac/lily/metal/plan"
)

// Cost is what one image's tower costs on the GPU, as the plan models it.
type Cost struct {
	Patches, Tokens int
	// FLOPs are the dispatches' executed FLOPs (whole GEMM and attention tiles), IdealFLOPs the
	// useful ones (2·N·O·K per GEMM, 4·N²·hd·heads for attention).
	FLOPs, IdealFLOPs float64
	// Bytes is the modelled DRAM traffic (each dispatch's distinct reads and writes), IdealBytes
	// what the tower cannot avoid: its weights once, the pixel rows in and the output rows out.
	Bytes, IdealBytes int64
}

// Cost models the tower's run: plan.Stats of its dispatches against the ideal.
func (t *Tower) Cost() Cost {
	st := t.Plan.Stats("")
	c := Cost{Patches: t.N, Tokens: t.N / 4, FLOPs: st.FLOPs, IdealFLOPs: st.IdealFLOPs, Bytes: st.Bytes}
	for _, b := range t.Plan.Buffers {
		if b.Kind == plan.Weights {
			c.IdealBytes += b.Size
		}
	}
	c.IdealBytes += t.Plan.Buffers[t.Pixels].Size + t.Plan.Buffers[t.Out].Size
	return c
}

// Work is the run's cost for plan.Chip.Time: every FLOP on the shader ALUs (the kernels are
// simdgroup-matrix kernels; the tower has no tensor-op form).
func (c Cost) Work() plan.Work { return plan.Work{Bytes: c.Bytes, FLOPs: c.FLOPs} }

// CostOf builds tower v's plan for a gh×gw grid and models it.
func CostOf(v *config.Vision, gh, gw int) (Cost, error) {
	t, err := Build(v, gh, gw)
	if err != nil {
		return Cost{}, err
	}
	return t.Cost(), nil
}
