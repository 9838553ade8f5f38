package kernels

import "testing"

// TestTensorFits: the GEMMs' tensor forms run what their simdgroup forms run; prefill
// attention's needs its query heads per kv head to divide 32.
func TestTensorFits(t *testing.T) {
	as := AttnShape{Heads: 16, KVHeads: 2, HeadDim: 256, RotaryDim: 64, MaxCtx: 64, PageSize: 64, Pages: 1}
	buf := AttnPrefillBuffers[int]{}
	if err := TensorFits(AttnPrefillCall(as, 32, buf)); err != nil {
		t.Fatalf("production attention: %v", err)
	}
	for _, g := range []int{3, 5, 6, 12} {
		as.Heads = g * as.KVHeads
		if err := TensorFits(AttnPrefillCall(as, 32, buf)); err == nil {
			t.Fatalf("%d query heads per kv head fit attn_prefill_tensor", g)
		}
	}
	q := QMMCall(4, 37, 128, []int{70, 33}, QMMBuffers[int]{W: make([]QMatrixBuffers[int], 2), Y: []int{0, 0}})
	if err := TensorFits(q); err != nil {
		t.Fatalf("qmm with edge tiles: %v", err)
	}
	if err := TensorFits(MoETopKChunkCall(MoEShape{H: 64, E: 8, K: 2, I: 64, SI: 64}, 4, MoETopKBuffers[int]{})); err == nil {
		t.Fatal("moe_topk has no tensor form, yet fits")
	}
}
