package decode

import (
	"testing"

	"github.com/lilyformac/lily/engine/config"
	"github.com/lilyformac/lily/metal/plan"
)

// TestPerDispatchModel: plan.Stats is the sum of each dispatch's own bytes and FLOPs, the figures
// a per-kernel profile attributes; the decode step's FLOPs are about two per active weight (the
// ideal's weights at 4 bits, the router's 8) plus attention over the context
// and the DeltaNet updates.
func TestPerDispatchModel(t *testing.T) {
	const ctx = 4096
	c := config.Production()
	s := productionStep(t, ctx)
	st := s.Plan.Stats(ModeSample)
	var bytes int64
	var flops float64
	for i := range s.Plan.Dispatches {
		if d := &s.Plan.Dispatches[i]; d.RunsIn(ModeSample) {
			bytes, flops = bytes+d.Bytes(), flops+d.FLOPs
		}
	}
	if bytes != st.Bytes || flops != st.FLOPs || st.FLOPs != st.IdealFLOPs {
		t.Fatalf("dispatches sum to %d bytes, %g FLOPs; Stats %+v", bytes, flops, st)
	}
	w := float64(plan.IdealBytes(c, ctx, 16).Weights)
	attn := 10 * 4 * float64(c.NumHeads*c.HeadDim) * (ctx + 1)                   // QKᵀ and PV, 10 attention layers
	attn += 30 * 7 * float64(c.LinearValueHeads*c.LinearKeyDim*c.LinearValueDim) // 30 DeltaNet updates
	if lo, hi := 2*w/(1+4.0/64)+attn, 2*w/(0.5+4.0/64)+attn; st.FLOPs < lo || st.FLOPs > hi {
		t.Fatalf("decode step %g FLOPs, want between %g and %g", st.FLOPs, lo, hi)
	}
}

// TestTrafficCtxNone: a negative TrafficCtx models a step with nothing cached: attention reads
// the new row only, and a chunk's FLOPs see only its own keys.
func TestTrafficCtxNone(t *testing.T) {
	c := config.Production()
	none, err := Build(c, Options{MaxCtx: 65, TrafficCtx: -1, Chunks: []int{64}})
	if err != nil {
		t.Fatal(err)
	}
	full, err := Build(c, Options{MaxCtx: 65, Chunks: []int{64}}) // 0: MaxCtx-1 cached
	if err != nil {
		t.Fatal(err)
	}
	kv := int64(10 * 2 * c.NumKVHeads * c.HeadDim * 2) // a position's K and V rows, every layer
	if d := full.Plan.Stats(ModeSample).Bytes - none.Plan.Stats(ModeSample).Bytes; d != 64*kv {
		t.Fatalf("64 cached positions add %d bytes, want %d", d, 64*kv)
	}
	run := ChunkModes(64).Run
	if n, f := none.Plan.Stats(run), full.Plan.Stats(run); n.IdealFLOPs >= f.IdealFLOPs {
		t.Fatalf("chunk FLOPs with nothing cached %g, after 64 %g", n.IdealFLOPs, f.IdealFLOPs)
	}
}
