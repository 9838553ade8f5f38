package decode

import (
	"slices"
	"strings"

	"github.com/lilyformac/lily/metal/kernels"
	"github.com/lilyformac/lily/metal/plan"
)

// The compute model: each dispatch carries the multiply-adds (×2) it executes and the useful ones
// (plan.Dispatch.FLOPs, IdealFLOPs), set where the builder adds it, so plan.Stats sums the same
// per-dispatch figures that a per-kernel profile attributes. Only matrix and attention work counts
// (GEMVs, GEMMs, QKᵀ and PV, the DeltaNet update, the conv taps); norms, activations, routing,
// sampling and the weights' dequantisation are left out.

// TensorKernels are the chunk kernels the tensor route (Options.PrefillRoute) runs in their
// tensor-op form (kernels.TensorForm) instead; the forms' tiles are in gemmTiles and
// attnPrefillTiles. The 8-bit GEMM keeps its float form: in this model it is only the router and
// the shared expert's gate, and routing picks experts by comparing the router's logits — inputs
// rounded to bfloat would flip near ties, after which everything downstream differs — for 1 % of
// a chunk's FLOPs. The vision tower's GEMM (vit_gemm) is metal/vit's, not a chunk kernel.
func TensorKernels() []string { return slices.Clone(tensorKernels) }

var tensorKernels = slices.DeleteFunc(kernels.TensorFormKernels(), func(k string) bool {
	return strings.HasPrefix(k, "qmm_q8") || strings.HasPrefix(k, "vit_")
})

// form is the call a chunk mode runs for k on the builder's route, whether its FLOPs run on
// tensor ops (plan.Dispatch.Tensor), and why, on the tensor route, k keeps its simdgroup form
// although it has a tensor form (plan.Dispatch.Fallback): a shape that form cannot run
// (kernels.TensorFits; prefill attention with query heads per kv head not dividing 32).
func (b *builder) form(k kernels.Call[int]) (out kernels.Call[int], tensor bool, fallback string) {
	if b.route != plan.Tensor || !slices.Contains(tensorKernels, k.Kernel) {
		return k, false, ""
	}
	if err := kernels.TensorFits(k); err != nil {
		return k, false, err.Error()
	}
	out, tensor = kernels.TensorForm(k)
	return out, tensor, ""
}

// flops sets the last added dispatch's executed and useful FLOPs.
func (b *builder) flops(executed, ideal float64) {
	d := &b.p.Dispatches[len(b.p.Dispatches)-1]
	d.FLOPs, d.IdealFLOPs = executed, ideal
}

// gemvFLOPs is y = W·x for a rows × cols matrix.
func gemvFLOPs(rows, cols int) float64 { return 2 * float64(rows) * float64(cols) }

// padTo is x rounded up to a multiple of to.
func padTo(x, to int) float64 { return float64((x + to - 1) / to * to) }

// gemmFLOPs is y[m][rows] = x[m][cols]·Wᵀ on tiles of tm × tn (gemmTiles): executed, edge tiles
// included, and useful.
func gemmFLOPs(tm, tn, m, rows, cols int) (executed, ideal float64) {
	return 2 * padTo(m, tm) * padTo(rows, tn) * float64(cols), 2 * float64(m) * float64(rows) * float64(cols)
}

// gemmTiles are the tiles a GEMM over tm-row tiles runs in on the builder's route: qmm's
// (QMMTileRows(m) × QMMTileCols) or a grouped GEMM's (its map's rows) on the simdgroup route; on
// the tensor route the tensor forms' columns, and rows of QMMTensorTile for qmm (dense) or of
// the map for a grouped GEMM.
func (b *builder) gemmTiles(tm int, dense bool) (int, int) {
	if b.route != plan.Tensor {
		return tm, kernels.QMMTileCols(tm)
	}
	if dense {
		tm = kernels.QMMTensorTile
	}
	return tm, kernels.QMMTensorTile
}

// gdnFLOPs is the DeltaNet update of tokens tokens: decay, read, delta, write and output over
// every head's DK × DV state.
func gdnFLOPs(gs kernels.GDNShape, tokens int) float64 {
	return 7 * float64(gs.DK*gs.DV) * float64(gs.HV) * float64(tokens)
}

// convFLOPs is the causal conv's taps over tokens tokens of channels channels.
func convFLOPs(channels, tokens int) float64 {
	return 2 * float64(kernels.ConvKernel*channels) * float64(tokens)
}

// attnDecodeFLOPs is one query's QKᵀ and PV over keys keys, every head.
func attnDecodeFLOPs(as kernels.AttnShape, keys int) float64 {
	return 4 * float64(as.HeadDim*as.Heads) * float64(keys)
}

// attnPrefillFLOPs is causal attention for a chunk of m queries after n cached positions in
// attn_prefill's form (tensor: its tensor form; attnPrefillTiles): query t sees n + t + 1 keys;
// the kernel runs whole blocks of bq queries against whole bk-key tiles up to its last query's
// keys, dim columns wide.
func attnPrefillFLOPs(as kernels.AttnShape, m, n int, tensor bool) (executed, ideal float64) {
	bq, bk, dim := attnPrefillTiles(as, tensor)
	per, useful := 4*float64(dim*as.Heads), 4*float64(as.HeadDim*as.Heads)
	for t0 := 0; t0 < m; t0 += bq {
		last := min(t0+bq, m) - 1
		executed += per * float64(bq) * padTo(n+last+1, bk)
		for t := t0; t <= last; t++ {
			ideal += useful * float64(n+t+1)
		}
	}
	return executed, ideal
}

// attnPrefillTiles are the query blocks, key tiles and tile width prefill attention runs in:
// attn_prefill's (AttnPrefillBlock tokens, 8 keys, the head dim); with tensor its tensor form's
// (AttnPrefillTensorBlock tokens of the G heads, AttnPrefillTensorKeys keys,
// AttnPrefillTensorDim columns: head dims below it are zero-padded).
func attnPrefillTiles(as kernels.AttnShape, tensor bool) (bq, bk, dim int) {
	if !tensor {
		return kernels.AttnPrefillBlock, 8, as.HeadDim
	}
	return kernels.AttnPrefillTensorBlock(as.Heads / as.KVHeads), kernels.AttnPrefillTensorKeys, kernels.AttnPrefillTensorDim
}
