package decode

import "github.com/lilyformac/lily/metal/kernels"

// The compute model: each dispatch carries the multiply-adds (×2) it executes and the useful ones
// (plan.Dispatch.FLOPs, IdealFLOPs), set where the builder adds it, so plan.Stats sums the same
// per-dispatch figures that a per-kernel profile attributes. Only matrix and attention work counts
// (GEMVs, GEMMs, QKᵀ and PV, the DeltaNet update, the conv taps); norms, activations, routing,
// sampling and the weights' dequantisation are left out.

// flops sets the last added dispatch's executed and useful FLOPs.
func (b *builder) flops(executed, ideal float64) {
	d := &b.p.Dispatches[len(b.p.Dispatches)-1]
	d.FLOPs, d.IdealFLOPs = executed, ideal
}

// gemvFLOPs is y = W·x for a rows × cols matrix.
func gemvFLOPs(rows, cols int) float64 { return 2 * float64(rows) * float64(cols) }

// padTo is x rounded up to a multiple of to.
func padTo(x, to int) float64 { return float64((x + to - 1) / to * to) }

// gemmFLOPs is y[m][rows] = x[m][cols]·Wᵀ on the QMM kernels' tiles (QMMTileRows(m) ×
// QMMTileCols of that): executed, edge tiles included, and useful.
func gemmFLOPs(m, rows, cols int) (executed, ideal float64) {
	tm := kernels.QMMTileRows(m)
	return 2 * padTo(m, tm) * padTo(rows, kernels.QMMTileCols(tm)) * float64(cols), 2 * float64(m) * float64(rows) * float64(cols)
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

// attnPrefillFLOPs is causal attention for a chunk of m queries after n cached positions: query
// t sees n + t + 1 keys; the kernel runs whole AttnPrefillBlock-query blocks against whole 8-key
// tiles up to its last query's keys.
func attnPrefillFLOPs(as kernels.AttnShape, m, n int) (executed, ideal float64) {
	per := 4 * float64(as.HeadDim*as.Heads)
	for t0 := 0; t0 < m; t0 += kernels.AttnPrefillBlock {
		last := min(t0+kernels.AttnPrefillBlock, m) - 1
		executed += per * kernels.AttnPrefillBlock * padTo(n+last+1, 8)
		for t := t0; t <= last; t++ {
			ideal += per * float64(n+t+1)
		}
	}
	return executed, ideal
}
