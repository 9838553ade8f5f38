// Package vit builds the vision tower's GPU plan for one image's patch grid over the metal/kernels
// ViT kernels, and models its cost and its device memory at the largest grid it serves.
//
// The plan mirrors engine/vision's Tower.Encode dispatch for dispatch: the patch embedding
// (vit_gemm over the folded float32 weight) → vit_pos_embed → per block: vit_layernorm, the qkv
// GEMM, vit_attention, the proj GEMM added into the residual h, vit_layernorm, fc1 with
// tanh-GELU, fc2 added into h → the merger: vit_layernorm, fc1 with exact GELU over the normed
// rows read as [N/4][4D] (a block's four patches are consecutive rows, so the join is a view),
// fc2 → the output rows.
//
// Build takes a route, as the text model's prefill does (decode.Options.PrefillRoute): on
// plan.Simdgroup every GEMM is vit_gemm on simdgroup matrices; on plan.Tensor each GEMM whose
// shape its tensor-op form runs (kernels.TensorFits: every bfloat-weight one) is vit_gemm_tensor
// on M5's neural accelerators, and the patch embedding, whose weights are float32, keeps vit_gemm
// (plan.Dispatch.Fallback says why). Attention and the norms are the same on both routes.
package vit

import (
	"fmt"

	"github.com/lilyformac/lily/engine/config"
	"github.com/lilyformac/lily/metal/kernels"
	"github.com/lilyformac/lily/metal/plan"
)

// Tower is a built tower plan for one grid, with the buffers the host fills and reads.
type Tower struct {
	Plan   *plan.Plan
	Config config.Vision
	GH, GW int        // the grid in patches
	N      int        // patches, GH·GW
	Route  plan.Route // how its GEMMs run (Build's route)

	// Inputs the host writes before each run: the pixel rows [N][PatchInputs] float32, and the
	// tables the kernels take from the host (HostTables fills them): the rotary's inverse
	// frequencies and the position table's taps per row and column.
	Pixels, InvFreq, PosRows, PosCols int
	// Out is the output rows, [N/4][OutHidden] float32, one per merged block.
	Out int
	// Activations: the residual stream h [N][D], a LayerNorm's output [N][D] (the merger reads
	// it as [N/4][4D]), qkv [N][3D], attention's output [N][D], the MLP's [N][F] and the
	// merger's hidden rows [N/4][4D].
	H, Norm, QKV, Attn, MLP, Merger int
	// Weights are the Weights buffers by checkpoint-derived name ("vit.blocks.3.attn.qkv.weight").
	Weights map[string]int

	b *builder
}

// Prefix is the tower's weight buffers' name prefix: distinct from the language model's names,
// so a device sharing weight buffers by name keeps both.
const Prefix = "vit."

// linear is a dense layer's two Weights buffers.
type linear struct{ w, b, out, in int }

// norm is a LayerNorm's gain and shift buffers.
type norm struct{ w, b int }

// Check reports whether the kernels run tower v over a gh×gw grid.
func Check(v *config.Vision, gh, gw int) error {
	hd := v.HeadDim()
	switch {
	case v.Merge != kernels.ViTMerge:
		return fmt.Errorf("vit: merge %d: the kernels take %d", v.Merge, kernels.ViTMerge)
	case gh < v.Merge || gw < v.Merge || gh%v.Merge != 0 || gw%v.Merge != 0:
		return fmt.Errorf("vit: grid %d×%d is not a positive multiple of %d", gh, gw, v.Merge)
	case v.Heads <= 0 || v.Hidden%v.Heads != 0 || hd%8 != 0 || hd > kernels.ViTMaxHeadDim:
		return fmt.Errorf("vit: head dim %d×%d: vit_attention takes a multiple of 8 up to %d", v.Heads, hd, kernels.ViTMaxHeadDim)
	case v.Hidden%8 != 0 || v.Intermediate%8 != 0 || v.PatchInputs()%8 != 0 || v.Intermediate <= 0 || v.OutHidden <= 0:
		return fmt.Errorf("vit: widths %d, %d, %d: vit_gemm takes multiples of 8", v.Hidden, v.Intermediate, v.PatchInputs())
	case v.Side <= 0 || v.Side*v.Side != v.NumPositions:
		return fmt.Errorf("vit: %d positions is not a %d×%d table", v.NumPositions, v.Side, v.Side)
	}
	return nil
}

// Build makes the tower's plan for a gh×gw grid of tower v, its GEMMs on route.
func Build(v *config.Vision, gh, gw int, route plan.Route) (*Tower, error) {
	if err := Check(v, gh, gw); err != nil {
		return nil, err
	}
	t := &Tower{Plan: &plan.Plan{}, Config: *v, GH: gh, GW: gw, N: gh * gw, Route: route, Weights: map[string]int{}}
	t.b = &builder{t: t, read: map[int]bool{}, written: map[int]bool{}}
	t.buffers()
	t.embed()
	for i := range v.Depth {
		t.block(i)
	}
	t.merger()
	if err := t.Plan.Validate(); err != nil {
		return nil, err
	}
	return t, nil
}

// buffers declares the inputs, the output and the activations.
func (t *Tower) buffers() {
	b, v, N := t.b, &t.Config, t.N
	D := v.Hidden
	t.Pixels = b.floats("vit.pixels", N*v.PatchInputs(), plan.Activations)
	t.InvFreq = b.floats("vit.rope.inv_freq", v.HeadDim()/4, plan.Control)
	t.PosRows = b.buffer("vit.pos.rows", 16*int64(t.GH), plan.Control)
	t.PosCols = b.buffer("vit.pos.cols", 16*int64(t.GW), plan.Control)
	t.H = b.floats("vit.h", N*D, plan.Activations)
	t.Norm = b.floats("vit.norm", N*D, plan.Activations)
	t.QKV = b.floats("vit.qkv", N*3*D, plan.Activations)
	t.Attn = b.floats("vit.attn", N*D, plan.Activations)
	t.MLP = b.floats("vit.mlp", N*v.Intermediate, plan.Activations)
	t.Merger = b.floats("vit.merger.hidden", N*D, plan.Activations) // [N/4][4D]
	t.Out = b.floats("vit.out", N/4*v.OutHidden, plan.Activations)
}

// HostTables are the contents of InvFreq, PosRows and PosCols, as the kernels take them.
func (t *Tower) HostTables() (invFreq []float32, rows, cols []uint32) {
	v := &t.Config
	return kernels.ViTInvFreq(v.HeadDim(), v.RopeTheta), kernels.ViTPosAxis(t.GH, v.Side), kernels.ViTPosAxis(t.GW, v.Side)
}

// embed adds the patch embedding (float32 weights) and the position embedding added into h.
func (t *Tower) embed() {
	b, v, N, D := t.b, &t.Config, t.N, t.Config.Hidden
	patch := b.linear(t, "patch_embed.proj", D, v.PatchInputs(), 4)
	b.gemm(patch, t.Pixels, t.H, N, kernels.EpilogueNone, true)
	tab := b.weight(t, "pos_embed.weight", 2*int64(v.NumPositions*D))
	c := kernels.ViTPosEmbedCall(v.Side, D, t.GH, t.GW, kernels.LayerNormThreads,
		kernels.ViTPosEmbedBuffers[int]{H: t.H, Tab: tab, Rows: t.PosRows, Cols: t.PosCols})
	b.add(c, []int{t.H, tab, t.PosRows, t.PosCols}, []int{t.H}, 0, 0)
}

// block adds transformer block i: h += proj(attention(LN1(h))); h += fc2(gelu(fc1(LN2(h)))).
func (t *Tower) block(i int) {
	b, v, N, D := t.b, &t.Config, t.N, t.Config.Hidden
	p := fmt.Sprintf("blocks.%d.", i)
	n1, n2 := b.norm(t, p+"norm1", D), b.norm(t, p+"norm2", D)
	qkv, proj := b.linear(t, p+"attn.qkv", 3*D, D, 2), b.linear(t, p+"attn.proj", D, D, 2)
	fc1, fc2 := b.linear(t, p+"mlp.linear_fc1", v.Intermediate, D, 2), b.linear(t, p+"mlp.linear_fc2", D, v.Intermediate, 2)
	b.layerNorm(n1, t.H, t.Norm, N, D, v.Eps)
	b.gemm(qkv, t.Norm, t.QKV, N, kernels.EpilogueNone, false)
	t.attention()
	b.gemm(proj, t.Attn, t.H, N, kernels.EpilogueAdd, false)
	b.layerNorm(n2, t.H, t.Norm, N, D, v.Eps)
	b.gemm(fc1, t.Norm, t.MLP, N, kernels.EpilogueGELUTanh, false)
	b.gemm(fc2, t.MLP, t.H, N, kernels.EpilogueAdd, false)
}

// attention adds vit_attention over the qkv rows. Its FLOPs are QKᵀ and PV over whole tiles:
// queries padded to blocks of ViTAttnQueries, keys to tiles of ViTAttnKeys.
func (t *Tower) attention() {
	v, N := &t.Config, t.N
	hd := v.HeadDim()
	c := kernels.ViTAttentionCall(N, v.Heads, hd, t.GW, kernels.ViTAttentionBuffers[int]{QKV: t.QKV, InvFreq: t.InvFreq, Out: t.Attn})
	fl := 4 * float64(pad(N, kernels.ViTAttnQueries)) * float64(pad(N, ViTAttnKeys)) * float64(hd*v.Heads)
	t.b.add(c, []int{t.QKV, t.InvFreq}, []int{t.Attn}, fl, AttentionFLOPs(N, hd, v.Heads))
}

// ViTAttnKeys is the key tile vit_attention streams (its online softmax's step).
const ViTAttnKeys = 32

// merger adds the patch merger: LayerNorm, fc1 + exact GELU over the normed rows as [N/4][4D],
// fc2 into the output rows.
func (t *Tower) merger() {
	b, v, N, D := t.b, &t.Config, t.N, t.Config.Hidden
	M := 4 * D
	n := b.norm(t, "merger.norm", D)
	fc1, fc2 := b.linear(t, "merger.linear_fc1", M, M, 2), b.linear(t, "merger.linear_fc2", v.OutHidden, M, 2)
	b.layerNorm(n, t.H, t.Norm, N, D, v.Eps)
	b.gemm(fc1, t.Norm, t.Merger, N/4, kernels.EpilogueGELUErf, false)
	b.gemm(fc2, t.Merger, t.Out, N/4, kernels.EpilogueNone, false)
}

// GEMMFLOPs are a vit_gemm's executed FLOPs: whole 32×32 tiles of rows and outputs, K's
// columns as they are (its last step takes only those left); with tensor, vit_gemm_tensor's:
// whole 64×64 tiles in whole 64-column steps of K (the last zero-padded).
func GEMMFLOPs(rows, out, in int, tensor bool) float64 {
	if tensor {
		t := kernels.ViTGEMMTensorTile
		return 2 * float64(pad(rows, t)) * float64(pad(out, t)) * float64(pad(in, t))
	}
	return 2 * float64(pad(rows, kernels.ViTGEMMTile)) * float64(pad(out, kernels.ViTGEMMTile)) * float64(in)
}

// AttentionFLOPs are attention's useful FLOPs over n patches: QKᵀ and PV, 2·n²·hd each, per head.
func AttentionFLOPs(n, hd, heads int) float64 { return 4 * float64(n) * float64(n) * float64(hd*heads) }

func pad(n, tile int) int { return (n + tile - 1) / tile * tile }
