package vit

import (
	"github.com/lilyformac/lily/engine/config"
	"github.com/lilyformac/lily/metal/plan"
)

// Cost is what one image's tower costs on the GPU, as the plan models it.
type Cost struct {
	Patches, Tokens int
	Route           plan.Route // the plan's route (Build)
	// FLOPs are the dispatches' executed FLOPs (whole GEMM and attention tiles, each in its
	// form's tiles), IdealFLOPs the useful ones (2·N·O·K per GEMM, 4·N²·hd·heads for attention),
	// TensorFLOPs the part of FLOPs the tensor-op forms execute (plan.Dispatch.Tensor).
	FLOPs, IdealFLOPs, TensorFLOPs float64
	// Bytes is the modelled DRAM traffic (each dispatch's distinct reads and writes), IdealBytes
	// what the tower cannot avoid: its weights once, the pixel rows in and the output rows out.
	Bytes, IdealBytes int64
	// Fallbacks are the tensor route's GEMMs that keep vit_gemm, by kernel and why
	// (plan.Plan.Fallbacks): the patch embedding's float32 weights.
	Fallbacks []string
}

// Cost models the tower's run: plan.Stats of its dispatches against the ideal.
func (t *Tower) Cost() Cost {
	st := t.Plan.Stats("")
	c := Cost{Patches: t.N, Tokens: t.N / 4, Route: t.Route, FLOPs: st.FLOPs, IdealFLOPs: st.IdealFLOPs, TensorFLOPs: st.TensorFLOPs,
		Bytes: st.Bytes, Fallbacks: t.Plan.Fallbacks("")}
	for _, b := range t.Plan.Buffers {
		if b.Kind == plan.Weights {
			c.IdealBytes += b.Size
		}
	}
	c.IdealBytes += t.Plan.Buffers[t.Pixels].Size + t.Plan.Buffers[t.Out].Size
	return c
}

// Work is the run's cost for plan.Chip.Time: TensorFLOPs on the neural accelerators, the other
// FLOPs on the shader ALUs.
func (c Cost) Work() plan.Work {
	return plan.Work{Bytes: c.Bytes, FLOPs: c.FLOPs, TensorFLOPs: c.TensorFLOPs}
}

// CostOf builds tower v's plan for a gh×gw grid on route and models it.
func CostOf(v *config.Vision, gh, gw int, route plan.Route) (Cost, error) {
	t, err := Build(v, gh, gw, route)
	if err != nil {
		return Cost{}, err
	}
	return t.Cost(), nil
}
