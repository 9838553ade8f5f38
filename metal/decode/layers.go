package decode

import (
	"fmt"
	"slices"

	"github.com/lilyformac/lily/engine/config"
	"github.com/lilyformac/lily/engine/model"
	"github.com/lilyformac/lily/engine/quant"
	"github.com/lilyformac/lily/metal/kernels"
	"github.com/lilyformac/lily/metal/plan"
)

// The decode step's blocks, each adding the decode dispatches and then each chunk size's
// (chunkBufs) over the same weights and state.

// embedding adds embed_q4: the token's row into the residual stream (a chunk's rows into its).
func (b *builder) embedding() {
	s, R, H, V := b.s, b.rows, b.c.HiddenSize, b.c.VocabSize
	emb := b.matrix("embed_tokens", V, H, 4, func(w *model.Weights) *quant.Matrix { return w.Embed })
	s.embed = emb.buffers()
	b.call(kernels.EmbedRowsCall(H, V, R, kernels.EmbedBuffers[int]{Embed: emb.bufs(), Step: s.StepBuf, Out: b.bufs.res}),
		append(emb.rowsRange(0, R), b.whole(s.StepBuf)), []plan.Range{b.whole(b.bufs.res)})
	for _, ch := range b.chs {
		ch.call(kernels.EmbedChunkCall(H, V, ch.n, kernels.EmbedChunkBuffers[int]{Embed: emb.bufs(), Tokens: s.ChunkTokens, Out: ch.res}),
			[]int{s.ChunkTokens}, emb.all(), ch.res)
	}
}

// layers adds every layer: its mixer (a DeltaNet or an attention layer), then its MoE block.
func (b *builder) layers() {
	c, H := b.c, b.c.HiddenSize
	// The input norms first: a chunk's MoE combine normalises the residual for the next layer.
	inNorms := make([]int, len(c.Layers))
	for li := range c.Layers {
		inNorms[li] = b.vector(fmt.Sprintf("layers.%d.input_layernorm", li), H, true, func(w *model.Weights) []float32 { return w.Layers[li].InputNorm })
	}
	for li, kind := range c.Layers {
		next := -1 // the next layer's input norm, for the chunk's combine (none after the last)
		if li+1 < len(c.Layers) {
			next = inNorms[li+1]
		}
		postNorm := b.vector(fmt.Sprintf("layers.%d.post_attention_layernorm", li), H, true, func(w *model.Weights) []float32 { return w.Layers[li].PostNorm })
		if kind == config.LinearAttention {
			b.gdnLayer(li, inNorms[li], postNorm)
		} else {
			b.attnLayer(li, inNorms[li], postNorm)
		}
		b.moeBlock(li, postNorm, next)
	}
}

// gdnWeights are a DeltaNet layer's weights and its sequence state (conv window, state).
type gdnWeights struct {
	qkv, z, b, a, out        qmat
	taps, aLog, dtBias, norm int
	window, state            int
}

// gdnWeights declares layer li's DeltaNet weights and state.
func (b *builder) gdnWeights(li int) gdnWeights {
	g := func(w *model.Weights) *model.GDN { return w.Layers[li].GDN }
	a := fmt.Sprintf("layers.%d.linear_attn.", li)
	gs, H, R := b.gs, b.c.HiddenSize, b.rows
	C, vd := gs.Channels(), gs.HV*gs.DV
	l := gdnWeights{
		qkv: b.matrix(a+"in_proj_qkv", C, H, 4, func(w *model.Weights) *quant.Matrix { return g(w).InProjQKV }),
		z:   b.matrix(a+"in_proj_z", vd, H, 4, func(w *model.Weights) *quant.Matrix { return g(w).InProjZ }),
		b:   b.matrix(a+"in_proj_b", gs.HV, H, 4, func(w *model.Weights) *quant.Matrix { return g(w).InProjB }),
		a:   b.matrix(a+"in_proj_a", gs.HV, H, 4, func(w *model.Weights) *quant.Matrix { return g(w).InProjA }),
		out: b.matrix(a+"out_proj", H, vd, 4, func(w *model.Weights) *quant.Matrix { return g(w).OutProj }),
	}
	l.taps = b.vector(a+"conv1d", C*kernels.ConvKernel, false, func(w *model.Weights) []float32 { return g(w).Conv })
	l.aLog = b.vector(a+"A_log", gs.HV, false, func(w *model.Weights) []float32 { return g(w).ALog })
	l.dtBias = b.vector(a+"dt_bias", gs.HV, false, func(w *model.Weights) []float32 { return g(w).DtBias })
	l.norm = b.vector(a+"norm", gs.DV, false, func(w *model.Weights) []float32 { return g(w).Norm })
	l.window = b.floats(a+"conv_window", R*(kernels.ConvKernel-1)*C, plan.State)
	l.state = b.floats(a+"state", R*gs.StateLen(), plan.State)
	b.s.Session = append(b.s.Session, l.window, l.state)
	return l
}

// gdnLayer adds DeltaNet layer li: the in-projections with the input norm folded in, the conv
// step, the recurrence with its gated norm, and out_proj added into the residual in place.
func (b *builder) gdnLayer(li, inNorm, postNorm int) {
	l := b.gdnWeights(li)
	d, gs, R, eps, res := b.bufs.gdn, b.gs, b.rows, b.eps, b.bufs.res
	C := gs.Channels()
	b.qmvMultiNorm([]qmat{l.qkv, l.z, l.b, l.a}, []int{d.qkv, d.z, d.gb, d.ga}, res, inNorm, eps)
	convBufs := kernels.Conv1DStepBuffers[int]{X: d.qkv, Taps: l.taps, Window: l.window, U: d.u}
	gdnBufs := kernels.GDNStepBuffers[int]{QKV: d.u, Z: d.z, A: d.ga, Beta: d.gb, ALog: l.aLog, DtBias: l.dtBias, NormW: l.norm, State: l.state, Y: d.y}
	conv, gdn := kernels.Conv1DStepRowsCall(C, kernels.ConvThreads, R, convBufs), kernels.GDNStepRowsCall(gs, eps, kernels.GDNSimdgroups, R, gdnBufs)
	convReads := []plan.Range{b.whole(d.qkv), b.whole(l.taps), b.whole(l.window)}
	convWrites := []plan.Range{b.whole(l.window), b.whole(d.u)}
	gdnReads := []plan.Range{b.whole(d.u), b.whole(d.z), b.whole(d.ga), b.whole(d.gb), b.whole(l.aLog), b.whole(l.dtBias), b.whole(l.norm), b.whole(l.state)}
	gdnWrites := []plan.Range{b.whole(l.state), b.whole(d.y)}
	if b.s.Verify {
		rs := b.ringSet(li, l)
		conv = kernels.Conv1DVerifyCall(C, kernels.ConvThreads, R, kernels.Conv1DVerifyBuffers[int]{Conv1DStepBuffers: convBufs, Groups: b.s.Groups, Ring: rs.convRing})
		gdn = kernels.GDNVerifyCall(gs, eps, kernels.GDNSimdgroups, R, kernels.GDNVerifyBuffers[int]{GDNStepBuffers: gdnBufs, Groups: b.s.Groups, Ring: rs.gdnRing})
		convReads, convWrites = append(convReads, b.whole(b.s.Groups)), append(convWrites, b.whole(rs.convRing))
		gdnReads, gdnWrites = append(gdnReads, b.whole(b.s.Groups)), append(gdnWrites, b.whole(rs.gdnRing))
	}
	b.call(conv, convReads, convWrites)
	b.flops(convFLOPs(C, R), convFLOPs(C, R))
	b.call(gdn, gdnReads, gdnWrites)
	b.flops(gdnFLOPs(gs, R), gdnFLOPs(gs, R))
	b.qmv(l.out, d.y, res, true)
	for _, ch := range b.chs {
		ch.gdnLayer(l, li == 0, inNorm, postNorm)
	}
}

// ringSet declares DeltaNet layer li's rings for a verify step (Options.Verify): each row's raw
// conv input and its recurrence's inputs, kept until ModeCommit replays the kept rows.
func (b *builder) ringSet(li int, l gdnWeights) ringSet {
	a := fmt.Sprintf("layers.%d.linear_attn.", li)
	R := b.rows
	rs := ringSet{window: l.window, state: l.state,
		convRing: b.floats(a+"conv_ring", R*b.gs.Channels(), plan.Activations),
		gdnRing:  b.floats(a+"gdn_ring", R*b.gs.RingLen(), plan.Activations)}
	b.rings = append(b.rings, rs)
	return rs
}

// commits adds ModeCommit's dispatches (Options.Verify): every DeltaNet layer's conv1d_commit
// and gdn_commit, which keep the rows Step.Keep says of each group. They come after every other
// dispatch and run in no other mode.
func (b *builder) commits() {
	if !b.s.Verify {
		return
	}
	C, R, keep := b.gs.Channels(), b.rows, b.s.Keep
	for _, rs := range b.rings {
		b.call(kernels.Conv1DCommitCall(C, kernels.ConvThreads, R, kernels.Conv1DCommitBuffers[int]{Window: rs.window, Ring: rs.convRing, Keep: keep}),
			[]plan.Range{b.whole(rs.window), b.whole(rs.convRing), b.whole(keep)}, []plan.Range{b.whole(rs.window)}, ModeCommit)
		b.call(kernels.GDNCommitCall(b.gs, kernels.GDNSimdgroups, R, kernels.GDNCommitBuffers[int]{State: rs.state, Ring: rs.gdnRing, Keep: keep}),
			[]plan.Range{b.whole(rs.state), b.whole(rs.gdnRing), b.whole(keep)}, []plan.Range{b.whole(rs.state)}, ModeCommit)
	}
}

// attnWeights are an attention layer's weights and its K and V pools.
type attnWeights struct {
	q, k, v, o   qmat
	qNorm, kNorm int
	kc, vc       int
}

// attnWeights declares layer li's attention weights and KV pools.
func (b *builder) attnWeights(li int) attnWeights {
	at := func(w *model.Weights) *model.Attention { return w.Layers[li].Attn }
	a := fmt.Sprintf("layers.%d.self_attn.", li)
	as, H := b.as, b.c.HiddenSize
	qd, kvd := as.Heads*as.HeadDim, as.KVHeads*as.HeadDim
	l := attnWeights{
		q: b.matrix(a+"q_proj", 2*qd, H, 4, func(w *model.Weights) *quant.Matrix { return at(w).Q }),
		k: b.matrix(a+"k_proj", kvd, H, 4, func(w *model.Weights) *quant.Matrix { return at(w).K }),
		v: b.matrix(a+"v_proj", kvd, H, 4, func(w *model.Weights) *quant.Matrix { return at(w).V }),
		o: b.matrix(a+"o_proj", H, qd, 4, func(w *model.Weights) *quant.Matrix { return at(w).O }),
	}
	l.qNorm = b.vector(a+"q_norm", as.HeadDim, false, func(w *model.Weights) []float32 { return at(w).QNorm })
	l.kNorm = b.vector(a+"k_norm", as.HeadDim, false, func(w *model.Weights) []float32 { return at(w).KNorm })
	l.kc = b.buffer(a+"k_cache", int64(as.CacheBytes()), plan.KVCache)
	l.vc = b.buffer(a+"v_cache", int64(as.CacheBytes()), plan.KVCache)
	b.s.Session = append(b.s.Session, l.kc, l.vc)
	b.s.KV = append(b.s.KV, l.kc, l.vc)
	return l
}

// attnLayer adds attention layer li: q/k/v with the input norm folded in, the q/k norms, RoPE
// and the KV write, split-context attention and its combine with the output gate, and o_proj
// added into the residual in place.
func (b *builder) attnLayer(li, inNorm, postNorm int) {
	l := b.attnWeights(li)
	s, d, as, R, tctx := b.s, b.bufs.attn, b.as, b.rows, b.tctx
	b.qmvMultiNorm([]qmat{l.q, l.k, l.v}, []int{d.qg, d.k, d.v}, b.bufs.res, inNorm, b.eps)
	// The traffic model's sequences hold the pages Init gives them (rowTables): the one-row
	// plan's pool pages 0, 1, ... in order.
	tables := rowTables(as, R)
	kvWrites, kvReads := b.kvRanges(tables, tctx, 1, l.kc, l.vc), b.kvRanges(tables, 0, tctx+1, l.kc, l.vc)
	table := b.whole(s.Table)
	bufs := kernels.AttnQKRopeKVBuffers[int]{
		QG: d.qg, K: d.k, V: d.v, QNorm: l.qNorm, KNorm: l.kNorm, InvFreq: d.invFreq, Step: s.StepBuf, QOut: d.qrot,
		KCache: l.kc, VCache: l.vc, Table: s.Table}
	rope := kernels.AttnQKRopeKVCall(as, b.eps, kernels.AttnRopeThreads, bufs)
	if R > 1 { // ATTN_SEQ_ROWS: unset keeps the one-row plan's pipeline
		rope = kernels.AttnQKRopeKVRowsCall(as, b.eps, kernels.AttnRopeThreads, R, bufs)
	}
	reads := []plan.Range{b.whole(d.qg), b.whole(d.k), b.whole(d.v), b.whole(l.qNorm), b.whole(l.kNorm), b.whole(d.invFreq),
		b.whole(s.StepBuf), table}
	if s.Images {
		rope = kernels.AttnQKRopeKVMRoPE(rope, s.RopeOff, d.axes)
		reads = append(reads, b.whole(s.RopeOff), b.whole(d.axes))
	}
	b.call(rope, reads, append([]plan.Range{b.whole(d.qrot)}, kvWrites...))
	b.call(kernels.AttnDecodePartialRowsCall(as, b.splits, R, kernels.AttnDecodePartialBuffers[int]{
		Q: d.qrot, KCache: l.kc, VCache: l.vc, Step: s.StepBuf, OPart: d.opart, MLPart: d.mlpart, Table: s.Table}),
		append([]plan.Range{b.whole(d.qrot), b.whole(s.StepBuf), table}, kvReads...),
		[]plan.Range{b.whole(d.opart), b.whole(d.mlpart)})
	b.flops(b.perRow(attnDecodeFLOPs(as, tctx+1)), b.perRow(attnDecodeFLOPs(as, tctx+1)))
	b.call(kernels.AttnDecodeCombineRowsCall(as, b.splits, R, kernels.AttnDecodeCombineBuffers[int]{
		OPart: d.opart, MLPart: d.mlpart, QG: d.qg, Step: s.StepBuf, Out: d.out}),
		[]plan.Range{b.whole(d.opart), b.whole(d.mlpart), b.whole(d.qg), b.whole(s.StepBuf)},
		[]plan.Range{b.whole(d.out)})
	b.qmv(l.o, d.out, b.bufs.res, true)
	for _, ch := range b.chs {
		ch.attnLayer(l, li == 0, inNorm, postNorm)
	}
}

// kvRanges is the ranges of caches that positions [pos, pos+n) of sequences take, whose block
// tables lie one after another in tables ([sequences][TableLen]): sequence by sequence, each
// cache in turn.
func (b *builder) kvRanges(tables []uint32, pos, n int, caches ...int) []plan.Range {
	var out []plan.Range
	for t := range slices.Chunk(tables, b.as.TableLen()) {
		for _, cache := range caches {
			b.as.SeqSpans(t, pos, n, func(off, n int64) {
				out = append(out, plan.Range{Buffer: cache, Offset: off, Len: n})
			})
		}
	}
	return out
}

// moeWeights are a MoE block's weights: the router and shared-expert gate (8-bit), the routed
// experts' stacked gate, up and down, and the shared expert's.
type moeWeights struct {
	router, seg, gate, up, down, shGate, shUp, shDown qmat
}

// moeWeights declares layer li's MoE weights.
func (b *builder) moeWeights(li int) moeWeights {
	mo := func(w *model.Weights) *model.MoE { return &w.Layers[li].MoE }
	m := fmt.Sprintf("layers.%d.mlp.", li)
	ms, H := b.ms, b.c.HiddenSize
	l := moeWeights{
		router: b.matrix(m+"gate", ms.E, H, 8, func(w *model.Weights) *quant.Matrix { return mo(w).Router }),
		seg:    b.matrix(m+"shared_expert_gate", 1, H, 8, func(w *model.Weights) *quant.Matrix { return mo(w).SharedExpertGate }),
		gate:   b.matrix(m+"switch_mlp.gate_proj", ms.E*ms.I, H, 4, func(w *model.Weights) *quant.Matrix { return mo(w).Gate }),
		up:     b.matrix(m+"switch_mlp.up_proj", ms.E*ms.I, H, 4, func(w *model.Weights) *quant.Matrix { return mo(w).Up }),
		down:   b.matrix(m+"switch_mlp.down_proj", ms.E*H, ms.I, 4, func(w *model.Weights) *quant.Matrix { return mo(w).Down }),
		shGate: b.matrix(m+"shared_expert.gate_proj", ms.SI, H, 4, func(w *model.Weights) *quant.Matrix { return mo(w).SharedGate }),
		shUp:   b.matrix(m+"shared_expert.up_proj", ms.SI, H, 4, func(w *model.Weights) *quant.Matrix { return mo(w).SharedUp }),
		shDown: b.matrix(m+"shared_expert.down_proj", H, ms.SI, 4, func(w *model.Weights) *quant.Matrix { return mo(w).SharedDown }),
	}
	b.s.routed = slices.Concat(b.s.routed, l.gate.buffers(), l.up.buffers(), l.down.buffers())
	return l
}

// moeBlock adds layer li's MoE block: router and gate/up normalise the residual themselves
// (postNorm), down adds into the residual in place; a chunk's combine also normalises its
// residual with next (the next layer's input norm; -1: none).
func (b *builder) moeBlock(li, postNorm, next int) {
	l := b.moeWeights(li)
	d, ms, R, eps, res, H := b.bufs.moe, b.ms, b.rows, b.eps, b.bufs.res, b.c.HiddenSize
	b.call(b.moeRouter(ms, eps, kernels.MoERouterBuffers[int]{
		Router: l.router.bufs(), SharedGate: l.seg.bufs(), X: res, IDs: d.ids, Weights: d.weights, Gain: postNorm}),
		append(append(l.router.all(), l.seg.all()...), b.whole(res), b.whole(postNorm)),
		[]plan.Range{b.whole(d.ids), b.whole(d.weights)})
	fl := b.perRow(gemvFLOPs(ms.E, H) + gemvFLOPs(1, H))
	b.flops(fl, fl)
	// Which experts run is known only on the GPU: the traffic model counts K expert-sized
	// ranges per row, at most E (experts 0, 1, ... stand for the chosen ones), as
	// kernels.MoEShape.Bytes does for one row.
	var guReads, dReads []plan.Range
	for e := range min(R*ms.K, ms.E) {
		guReads = append(guReads, l.gate.rowsRange(e*ms.I, ms.I)...)
		guReads = append(guReads, l.up.rowsRange(e*ms.I, ms.I)...)
		dReads = append(dReads, l.down.rowsRange(e*H, H)...)
	}
	guReads = append(guReads, l.shGate.all()...)
	guReads = append(guReads, l.shUp.all()...)
	b.call(b.moeGateUp(ms, eps, kernels.MoEGateUpBuffers[int]{
		IDs: d.ids, Gate: l.gate.bufs(), Up: l.up.bufs(), SharedGate: l.shGate.bufs(), SharedUp: l.shUp.bufs(), X: res, Act: d.act, Gain: postNorm}),
		append(guReads, b.whole(d.ids), b.whole(res), b.whole(postNorm)),
		[]plan.Range{b.whole(d.act)})
	fl = b.perRow(float64(ms.K)*2*gemvFLOPs(ms.I, H) + 2*gemvFLOPs(ms.SI, H))
	b.flops(fl, fl)
	dReads = append(dReads, l.shDown.all()...)
	b.call(b.moeDownCombine(ms, kernels.MoEDownCombineBuffers[int]{
		IDs: d.ids, Weights: d.weights, Down: l.down.bufs(), SharedDown: l.shDown.bufs(), Act: d.act, Res: res}),
		append(dReads, b.whole(d.ids), b.whole(d.weights), b.whole(d.act), b.whole(res)),
		[]plan.Range{b.whole(res)})
	fl = b.perRow(float64(ms.K)*gemvFLOPs(H, ms.I) + gemvFLOPs(H, ms.SI))
	b.flops(fl, fl)
	for _, ch := range b.chs {
		ch.moe(ms, l, next, eps)
	}
}

// moeRouter is moe_router_norm over the step's rows (MOE_BATCH unset for one row: the one-row
// plan's pipeline).
func (b *builder) moeRouter(ms kernels.MoEShape, eps float32, bufs kernels.MoERouterBuffers[int]) kernels.Call[int] {
	if b.rows == 1 {
		return kernels.MoERouterNormCall(ms, eps, kernels.MoERouterThreads, bufs)
	}
	return kernels.MoERouterNormRowsCall(ms, b.rows, eps, kernels.MoERouterThreads, bufs)
}

// moeGateUp is moe_gate_up_norm over the step's rows (as moeRouter).
func (b *builder) moeGateUp(ms kernels.MoEShape, eps float32, bufs kernels.MoEGateUpBuffers[int]) kernels.Call[int] {
	if b.rows == 1 {
		return kernels.MoEGateUpNormCall(ms, eps, bufs)
	}
	return kernels.MoEGateUpNormRowsCall(ms, b.rows, eps, bufs)
}

// moeDownCombine is moe_down_combine over the step's rows (as moeRouter).
func (b *builder) moeDownCombine(ms kernels.MoEShape, bufs kernels.MoEDownCombineBuffers[int]) kernels.Call[int] {
	if b.rows == 1 {
		return kernels.MoEDownCombineCall(ms, bufs)
	}
	return kernels.MoEDownCombineRowsCall(ms, b.rows, bufs)
}
