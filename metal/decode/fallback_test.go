package decode

import (
	"strings"
	"testing"

	"github.com/lilyformac/lily/engine/config"
	"github.com/lilyformac/lily/metal/plan"
)

// TestTensorRouteFallsBack: on the tensor route, a model whose attention has 3 query heads per kv
// head (attn_prefill_tensor needs a divisor of 32) builds instead of panicking: each chunk size's
// attn_prefill keeps its simdgroup form, says why (plan.Dispatch.Fallback, plan.Plan.Fallbacks,
// PrefillCost.Fallbacks) and is counted in its own tiles (its FLOPs the simdgroup route's), while
// the GEMMs run their tensor forms; at production (8 heads per kv head) nothing falls back.
func TestTensorRouteFallsBack(t *testing.T) {
	c, err := config.Load("../../testdata/golden/tiny-a")
	if err != nil {
		t.Fatal(err)
	}
	c.NumHeads = 3 * c.NumKVHeads
	o := Options{MaxCtx: 256, Chunks: []int{32, 8}, ChunkLogits: true, PrefillRoute: plan.Tensor}
	s, err := Build(c, o)
	if err != nil {
		t.Fatal(err)
	}
	o.PrefillRoute = plan.Simdgroup
	simd, err := Build(c, o)
	if err != nil {
		t.Fatal(err)
	}
	attnLayers := 0
	for _, k := range c.Layers {
		if k == config.FullAttention {
			attnLayers++
		}
	}
	var attn, gemms int
	for i, d := range s.Plan.Dispatches {
		switch {
		case d.Kernel == "attn_prefill":
			attn++
			if d.Tensor || !strings.Contains(d.Fallback, "dividing 32, not 3") {
				t.Errorf("dispatch %d: attn_prefill on the tensor route: tensor %v, fallback %q", i, d.Tensor, d.Fallback)
			}
			if sd := simd.Plan.Dispatches[i]; sd.Kernel != d.Kernel || sd.FLOPs != d.FLOPs || sd.Threadgroups != d.Threadgroups {
				t.Errorf("dispatch %d: attn_prefill fallen back (%g FLOPs, grid %v) unlike the simdgroup route's %s (%g, %v)", i, d.FLOPs, d.Threadgroups, sd.Kernel, sd.FLOPs, sd.Threadgroups)
			}
		case d.Kernel == "attn_prefill_tensor":
			t.Errorf("dispatch %d: attn_prefill_tensor with 3 query heads per kv head", i)
		case d.Tensor:
			gemms++
			if d.Fallback != "" {
				t.Errorf("dispatch %d: %s on tensor ops with a fallback %q", i, d.Kernel, d.Fallback)
			}
		}
	}
	if attn != 2*attnLayers || gemms == 0 {
		t.Fatalf("%d attn_prefill dispatches for %d attention layers and 2 chunk sizes; %d on tensor ops", attn, attnLayers, gemms)
	}
	fb := s.Plan.Fallbacks(ChunkModes(32).Run)
	if len(fb) != 1 || !strings.HasPrefix(fb[0], "attn_prefill ×2: ") {
		t.Fatalf("fallbacks of chunk32: %q", fb)
	}
	if f := simd.Plan.Fallbacks(ChunkModes(32).Run); len(f) != 0 {
		t.Fatalf("fallbacks on the simdgroup route: %q", f)
	}
	cost, err := PrefillRouteModel(c, 32, 64, 16, plan.Tensor)
	if err != nil || len(cost.Fallbacks) != 1 || cost.TensorFLOPs == 0 {
		t.Fatalf("prefill model on the tensor route: %+v, %v", cost, err)
	}
	if p, err := PrefillRouteModel(config.Production(), 512, 128, 16, plan.Tensor); err != nil || len(p.Fallbacks) != 0 {
		t.Fatalf("production on the tensor route falls back: %q (%v)", p.Fallbacks, err)
	}
}
