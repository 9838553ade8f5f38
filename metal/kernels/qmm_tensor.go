package kernels

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/lilyformac/lily/engine/quant"
)

// QMMTensorTile is qmm_tensor.metal's tile width (QT_BN) and qmm_q4/q8_tensor's tile height
// (QT_BM): a threadgroup of QMMThreads computes that many columns of Y on Metal 4 tensor ops.
const QMMTensorTile = 64

// tensorForms maps each kernel instance that has a Metal 4 tensor-op form (qmm_tensor.metal,
// attn_prefill_tensor.metal, vit_tensor.metal) to it: the dense GEMMs at every tile height to
// qmm_q<bits>_tensor, the grouped GEMMs, prefill attention and the vision tower's GEMM to the
// same name with _tensor.
var tensorForms = func() map[string]string {
	m := map[string]string{"attn_prefill": "attn_prefill_tensor", "vit_gemm": "vit_gemm_tensor"}
	for _, bm := range QMMTileHeights {
		for _, bits := range []int{4, 8} {
			m[QMMKernel(bits, bm)] = QMMTensorKernel(bits)
		}
		for _, name := range []string{"moe_gate_up_mm", "moe_down_mm"} {
			m[tileKernel(name, bm)] = tileKernel(name, bm) + "_tensor"
		}
	}
	return m
}()

// TensorFormKernels are the kernel instances that have a tensor-op form, sorted.
func TensorFormKernels() []string { return slices.Sorted(maps.Keys(tensorForms)) }

// QMMTensorKernel names qmm_tensor's instance for a bit width.
func QMMTensorKernel(bits int) string { return fmt.Sprintf("qmm_q%d_tensor", bits) }

// TensorForm is the call of k's tensor-op form: the same constants and buffers, the tensor
// kernel and its grid — for qmm, tiles of QMMTensorTile × QMMTensorTile over the same matrices
// in the same order; for a grouped GEMM, the same block map in columns of QMMTensorTile; for
// attn_prefill, attnPrefillTensorGrid's; for vit_gemm, tiles of ViTGEMMTensorTile ×
// ViTGEMMTensorTile over the same rows and outputs. ok is false when k's kernel has no tensor
// form.
func TensorForm[B any](k Call[B]) (out Call[B], ok bool) {
	name, ok := tensorForms[k.Kernel]
	if !ok {
		return k, false
	}
	out = k
	out.Kernel = name
	switch {
	case k.Kernel == "attn_prefill":
		out.Threadgroups, out.Group = attnPrefillTensorGrid(k.Constants)
	case k.Kernel == "vit_gemm":
		out.Threadgroups = viTGEMMTensorGrid(k.Constants)
	case strings.HasPrefix(k.Kernel, "qmm_"):
		tiles := 0
		for _, c := range []int{QMMRows, QMMRows1, QMMRows2, QMMRows3} {
			n, _ := k.Constants[c].(int)
			tiles += groupsFor(n, QMMTensorTile)
		}
		out.Threadgroups = [3]int{tiles, groupsFor(k.Constants[QMMTokens].(int), QMMTensorTile), 1}
	default:
		out.Threadgroups[0] = groupsFor(k.Constants[QMMRows].(int), QMMTensorTile)
	}
	return out, true
}

// TensorFits is nil when k has a tensor-op form that runs k's shape, else why not. The text
// model's GEMM forms run every shape their simdgroup forms do (K a multiple of 64, edge tiles in
// M and N, any block map of moe_sort's), and so does vit_gemm_tensor but for float32 weights
// (viTGEMMTensorFits); attn_prefill_tensor runs fewer (attnPrefillTensorFits: the query heads per
// kv head must divide AttnPrefillTensorRows). A caller on the tensor route runs the simdgroup
// form where it is not nil (decode and metal/vit do, and say so: plan.Dispatch.Fallback).
func TensorFits[B any](k Call[B]) error {
	if _, ok := tensorForms[k.Kernel]; !ok {
		return fmt.Errorf("%s has no tensor-op form", k.Kernel)
	}
	switch k.Kernel {
	case "attn_prefill":
		return attnPrefillTensorFits(k.Constants)
	case "vit_gemm":
		return viTGEMMTensorFits(k.Constants)
	}
	return nil
}

// QMMTensorCall is qmm_q<bits>_tensor: QMMCall's product on tensor ops (TensorForm).
func QMMTensorCall[B any](bits, tokens, cols int, rows []int, b QMMBuffers[B]) Call[B] {
	c, _ := TensorForm(QMMCall(bits, tokens, cols, rows, b))
	return c
}

// MoEGateUpMMTensorCall is moe_gate_up_mm's tensor form (TensorForm of MoEGateUpMMCall).
func MoEGateUpMMTensorCall[B any](hidden, inter, pairs, blocks, bm int, b MoEGateUpMMBuffers[B]) Call[B] {
	c, _ := TensorForm(MoEGateUpMMCall(hidden, inter, pairs, blocks, bm, b))
	return c
}

// MoEDownMMTensorCall is moe_down_mm's tensor form (TensorForm of MoEDownMMCall).
func MoEDownMMTensorCall[B any](hidden, inter, pairs, blocks, bm int, b MoEDownMMBuffers[B]) Call[B] {
	c, _ := TensorForm(MoEDownMMCall(hidden, inter, pairs, blocks, bm, b))
	return c
}

// BF16Round is x with each element rounded to bfloat (to nearest even), as the tensor-op
// kernels stage their activations: the tensor forms' Go references are their simdgroup forms'
// on BF16Round of the activations.
func BF16Round(x []float32) []float32 { return quant.BF16sToF32(quant.F32sToBF16(x)) }
