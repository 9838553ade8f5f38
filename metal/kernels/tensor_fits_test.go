package kernels

import (
	"strings"
	"testing"
)

// TestTensorFits: the GEMMs' tensor forms run what their simdgroup forms run (the tower's only
// with bfloat weights); prefill attention's needs its query heads per kv head to divide 32.
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
	v := ViTGEMMCall(37, 200, 4304, EpilogueAdd, false, ViTGEMMBuffers[int]{})
	if err := TensorFits(v); err != nil {
		t.Fatalf("vit_gemm with bfloat weights: %v", err)
	}
	if f, ok := TensorForm(v); !ok || f.Kernel != "vit_gemm_tensor" || f.Threadgroups != [3]int{4, 1, 1} || f.Group != v.Group {
		t.Fatalf("vit_gemm's tensor form %s over %v of %v", f.Kernel, f.Threadgroups, f.Group)
	}
	if err := TensorFits(ViTGEMMCall(37, 200, 768, EpilogueNone, true, ViTGEMMBuffers[int]{})); err == nil {
		t.Fatal("vit_gemm with float32 weights fits vit_gemm_tensor")
	}
}

// TestViTTensorEpilogue: vit_tensor.metal's erf, GELUs and epilogue are vit.metal's, verbatim, so
// the tensor form activates exactly as vit_gemm does (the files share no header).
func TestViTTensorEpilogue(t *testing.T) {
	src, form := Source("vit.metal"), Source("vit_tensor.metal")
	for _, part := range [][2]string{
		{"// The erf below follows", "kernel void vit_erf_probe"},
		{"// vit_epilogue is", "kernel void vit_gemm("},
	} {
		i, j := strings.Index(src, part[0]), strings.Index(src, part[1])
		if i < 0 || j < i {
			t.Fatalf("vit.metal has no %q before %q", part[0], part[1])
		}
		if seg := strings.TrimSpace(src[i:j]); len(seg) < 100 || !strings.Contains(form, seg) {
			t.Errorf("vit_tensor.metal does not hold vit.metal's %q … (%d bytes) verbatim", part[0], len(seg))
		}
	}
}
