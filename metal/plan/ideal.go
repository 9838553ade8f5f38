package plan

import "github.com/lilyformac/lily/engine/config"

// Bytes per stored weight in the MLX affine format, group 64 with bf16 scale and bias.
const (
	q4BytesPerWeight = 0.5 + 4.0/64 // 0.5625
	q8BytesPerWeight = 1 + 4.0/64   // 1.0625
)

// Ideal is the least DRAM traffic one decoded token needs, split by kind.
type Ideal struct {
	Weights int64 // weights on the active path, as stored in the checkpoint
	KV      int64 // K and V rows read by attention, in the cache's format
	State   int64 // DeltaNet recurrent state read and written (float32)
}

// Total is the sum of the parts.
func (i Ideal) Total() int64 { return i.Weights + i.KV + i.State }

// IdealBytes is the ideal traffic of one decode step at context ctx (tokens already cached) with a
// kvBits KV cache (16, or 8: int8 codes and a binary16 scale per 32 values): every active weight
// read once (the embedding row, each layer's projections and norms, the router, the chosen
// experts and the shared one, the LM head), the KV cache read once, the recurrent state read and
// written once. Conv windows, activations and logits are small beside these and left out.
func IdealBytes(c *config.Config, ctx, kvBits int) Ideal {
	q4 := func(rows, cols int) float64 { return float64(rows) * float64(cols) * q4BytesPerWeight }
	q8 := func(rows, cols int) float64 { return float64(rows) * float64(cols) * q8BytesPerWeight }
	H := c.HiddenSize
	var w float64
	w += q4(1, H) + 2*float64(H) // embedding row + final norm (bf16)
	w += q4(c.VocabSize, H)      // LM head
	conv := 2*c.LinearKeyHeads*c.LinearKeyDim + c.LinearValueHeads*c.LinearValueDim
	var state int64
	for _, kind := range c.Layers {
		w += 2 * 2 * float64(H) // input and post-attention norms (bf16)
		if kind == config.LinearAttention {
			vd := c.LinearValueHeads * c.LinearValueDim
			w += q4(conv, H) + q4(vd, H) + 2*q4(c.LinearValueHeads, H) + q4(H, vd)
			// conv taps, dt_bias and the gated norm in bf16; A_log float32 (MLX leaves it un-cast)
			w += float64(conv*c.ConvKernel*2 + 2*(c.LinearValueHeads+c.LinearValueDim) + 4*c.LinearValueHeads)
			state += 2 * int64(c.LinearValueHeads*c.LinearKeyDim*c.LinearValueDim*4)
		} else {
			qd := c.NumHeads * c.HeadDim
			w += q4(2*qd, H) + 2*q4(c.NumKVHeads*c.HeadDim, H) + q4(H, qd)
			w += float64(2 * 2 * c.HeadDim) // q and k norms (bf16)
		}
		w += q8(c.NumExperts, H) + q8(1, H)                 // router and shared-expert gate
		w += float64(c.TopK) * 3 * q4(c.MoEIntermediate, H) // routed experts: gate, up, down
		w += 3 * q4(c.SharedIntermed, H)                    // shared expert
	}
	fullLayers := 0
	for _, kind := range c.Layers {
		if kind == config.FullAttention {
			fullLayers++
		}
	}
	row := int64(2 * c.HeadDim) // bytes per position per kv head
	if kvBits == 8 {
		row = int64(c.HeadDim + c.HeadDim/32*2)
	}
	kv := int64(fullLayers) * 2 * int64(c.NumKVHeads) * row * int64(ctx)
	return Ideal{Weights: int64(w), KV: kv, State: state}
}
