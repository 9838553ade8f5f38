package decode

import (
	"fmt"
	"slices"

	"github.com/lilyformac/lily/metal/kernels"
	"github.com/lilyformac/lily/metal/plan"
)

// chunkBufs are the chunk mode's activations, a row per token of the chunk (Options.Chunk), and
// the builder that adds its dispatches (ChunkModes). Its traffic ranges are whole buffers.
//
// The activations one kernel writes and the next reads are bfloat: at thousands of tokens they,
// not the weights, are most of a chunk's traffic, and storing them in half the bytes is what a
// bfloat16 model (Hugging Face's, MLX's) does anyway; every kernel computes and accumulates in
// float32 and rounds once when it stores. Float32 stay: the residual stream (the sum every layer
// adds into, which the decode step continues from the last row), the router's logits and the
// routing weights (experts are chosen on near-ties), and the logits a caller reads.
type chunkBufs struct {
	b     *builder
	n, h  int      // tokens, hidden size
	modes []string // this size's modes (ChunkModes: Run, Last, and Logits when the plan has it)
	logit bool     // the plan has the +logits modes

	res, xn, zero, o               int // [n][H] residual (float32), normed input, zeros, a mixer's output
	qkv, z, ga, gb, y              int // GDN: [n][channels] (before the conv), [n][HV·DV], [n][HV] ×2, [n][HV·DV]
	qg, k, v, qrot, ao             int // attention: [n][2·qd], [n][kvd] ×2, [rows][qd], [n][qd]
	logits, seg, ids, weights      int // MoE routing: [n][E], [n], [n][K], [n][K+1]
	offs, tok, w, blocks, pos      int // moe_sort's
	act, ey, shAct, sh             int // [n·K][I], [n·K][H], [n][SI], [n][H]
	idTok, idBlocks, ones, nBlocks int // the shared expert's identity map; moe_sort's block count
	bm                             int // the routed experts' block rows (MoEShape.BlockRows)
	idBM, idN                      int // the identity map's block rows and blocks
}

// chunkBuffers declares the chunk mode's buffers for n tokens (and the token ids' buffer).
func (b *builder) chunkBuffers(n int, gs kernels.GDNShape, as kernels.AttnShape, ms kernels.MoEShape, logits bool) *chunkBufs {
	s, H := b.s, ms.H
	s.ChunkTokens = b.buffer("chunk.tokens", 4*int64(n), plan.Control)
	act := func(name string, elems int) int { return b.bfloats("chunk."+name, elems, plan.Activations) }
	f32 := func(name string, elems int) int { return b.floats("chunk."+name, elems, plan.Activations) }
	c := &chunkBufs{b: b, n: n, h: H, logit: logits}
	c.modes = c.modesOf(n)
	if logits {
		s.ChunkLogits = f32("logits", n*s.Config.VocabSize)
	}
	c.res, c.xn, c.o = f32("res", n*H), act("xn", n*H), act("o", n*H)
	s.ChunkResidual = c.res
	if s.Images {
		s.ChunkRopeOff = b.buffer("chunk.rope_off", 12*int64(n), plan.Control)
	}
	// Zeros no kernel writes: scratch-like, so the GPU backend keeps one copy for all sessions.
	c.zero = b.bfloats("chunk.zero", n*H, plan.Activations)
	s.consts = append(s.consts, constSrc{c.zero, make([]byte, 2*n*H)})
	if gs.HV > 0 {
		c.qkv = act("gdn.qkv", n*gs.Channels())
		c.z, c.y = act("gdn.z", n*gs.HV*gs.DV), act("gdn.y", n*gs.HV*gs.DV)
		c.ga, c.gb = act("gdn.a", n*gs.HV), act("gdn.b", n*gs.HV)
	}
	qd, kvd := as.Heads*as.HeadDim, as.KVHeads*as.HeadDim
	c.qg, c.k, c.v = act("attn.qg", n*2*qd), act("attn.k", n*kvd), act("attn.v", n*kvd)
	c.qrot, c.ao = act("attn.q_rot", kernels.AttnPrefillRows(n)*qd), act("attn.out", n*qd)
	c.logits, c.seg = f32("moe.logits", n*ms.E), f32("moe.seg", n)
	c.ids, c.weights = b.buffer("chunk.moe.ids", 4*int64(n*ms.K), plan.Activations), f32("moe.weights", n*(ms.K+1))
	c.bm = ms.BlockRows(n)
	c.nBlocks = ms.MoEBlocks(n, c.bm)
	c.offs = b.buffer("chunk.moe.offs", 4*int64(ms.E+1), plan.Activations)
	c.tok = b.buffer("chunk.moe.tok", 4*int64(n*ms.K), plan.Activations)
	c.w = f32("moe.w", n*ms.K)
	// the most blocks any size up to n asks for: blocks of the shortest height
	c.blocks = b.buffer("chunk.moe.blocks", 16*int64(ms.MoEBlocks(n, slices.Min(kernels.QMMTileHeights))), plan.Activations)
	c.pos = b.buffer("chunk.moe.pos", 4*int64(n*ms.K), plan.Activations)
	c.act, c.ey = act("moe.act", n*ms.K*ms.I), act("moe.y", n*ms.K*H)
	c.shAct, c.sh = act("moe.shared_act", n*ms.SI), act("moe.shared", n*H)
	// The shared expert: one expert over every token, weight 1 (moe_combine applies its gate).
	tok, ones, _ := kernels.MoEIdentity(n, 1)
	c.idTok = b.buffer("chunk.moe.id_tok", 4*int64(n), plan.Control)
	c.ones = b.floats("chunk.moe.ones", n, plan.Control)
	s.consts = append(s.consts, constSrc{c.idTok, BytesOf(tok)}, constSrc{c.ones, BytesOf(ones)})
	c.identityBlocks()
	return c
}

// modesOf is the modes the dispatches of a chunk of n tokens run in.
func (c *chunkBufs) modesOf(n int) []string {
	m := ChunkModes(n)
	if c.logit {
		return []string{m.Run, m.Last, m.Logits}
	}
	return []string{m.Run, m.Last}
}

// identityBlocks adds the shared expert's block map for the chunk's size, in the dense GEMMs'
// tile height (kernels.QMMTileRows).
func (c *chunkBufs) identityBlocks() {
	c.idBM = kernels.QMMTileRows(c.n)
	_, _, blocks := kernels.MoEIdentity(c.n, c.idBM)
	c.idN = len(blocks) / 4
	c.idBlocks = c.b.buffer(fmt.Sprintf("chunk%d.moe.id_blocks", c.n), 4*int64(len(blocks)), plan.Control)
	c.b.s.consts = append(c.b.s.consts, constSrc{c.idBlocks, BytesOf(blocks)})
}

// bucket is a smaller chunk size n over the same buffers (every buffer holds at least n rows; the
// identity map's first tokens and ones are n's, its blocks its own).
func (c *chunkBufs) bucket(n int, ms kernels.MoEShape) *chunkBufs {
	d := *c
	d.n, d.bm = n, ms.BlockRows(n)
	d.nBlocks = ms.MoEBlocks(n, d.bm)
	d.modes = d.modesOf(n)
	d.identityBlocks()
	return &d
}

// call adds a chunk-mode dispatch reading the reads buffers whole (and the weights' ranges) and
// writing the writes buffers whole.
func (c *chunkBufs) call(k kernels.Call[int], reads []int, weights []plan.Range, writes ...int) {
	c.callRanges(k, reads, weights, writes, nil)
}

// callRanges is call with ranges read and written besides the whole buffers.
func (c *chunkBufs) callRanges(k kernels.Call[int], reads []int, extraReads []plan.Range, writes []int, extraWrites []plan.Range) {
	b := c.b
	var r, w []plan.Range
	for _, buf := range reads {
		r = append(r, b.whole(buf))
	}
	for _, buf := range writes {
		w = append(w, b.whole(buf))
	}
	r, w = append(r, extraReads...), append(w, extraWrites...)
	k, tensor, fallback := b.form(c.actTypes(k, r, w))
	b.call(k, r, w, c.modes...)
	d := &b.p.Dispatches[len(b.p.Dispatches)-1]
	d.Tensor, d.Fallback = tensor, fallback
}

// actTypes is k with its activations' storage as the buffers it reads (r) and writes (w) have
// it: bfloat inputs when it reads a bfloat buffer, bfloat outputs when it writes one
// (kernels.BF16Acts; what else it touches — the residual, routing, state, caches — is never
// bfloat, and a projection stack's outputs share one type: the chunk's buffers are chosen so).
func (c *chunkBufs) actTypes(k kernels.Call[int], r, w []plan.Range) kernels.Call[int] {
	in, out := false, false
	for _, x := range r {
		in = in || c.b.bf16[x.Buffer]
	}
	for _, x := range w {
		out = out || c.b.bf16[x.Buffer]
	}
	return kernels.BF16Acts(k, in, out)
}

// lastRowLogits adds the +last mode's LM head: the final norm folded in, over the chunk's last row
// of the residual (the binding's offset), into the decode step's logits.
func (c *chunkBufs) lastRowLogits(head qmat, finalNorm int, eps float32) {
	b := c.b
	V, H := head.rows, head.cols
	d := Dispatch(kernels.QMVCall(4, V, H, kernels.QMVVariant{Norm: true, Eps: eps}, kernels.QMVBuffers[int]{W: head.bufs(), X: c.res, Y: b.s.Logits, Gain: finalNorm}),
		append(head.all(), b.whole(c.res), b.whole(finalNorm)), []plan.Range{b.whole(b.s.Logits)})
	for i, bind := range d.Buffers {
		if bind.Buffer == c.res {
			d.Buffers[i] = plan.Binding{Buffer: c.res, Offset: int64((c.n - 1) * H * 4)}
		}
	}
	d.Modes = []string{ChunkModes(c.n).Last}
	b.add(d)
	b.flops(gemvFLOPs(V, H), gemvFLOPs(V, H))
}

// logitsRows adds the +logits mode's tail: the final norm and the LM head over every row.
func (c *chunkBufs) logitsRows(head qmat, finalNorm int, eps float32) {
	modes := c.modes
	c.modes = []string{ChunkModes(c.n).Logits}
	c.norm(c.zero, finalNorm, eps)
	c.qmm([]qmat{head}, c.xn, c.b.s.ChunkLogits)
	c.modes = modes
}

// qmm is ys[j] = x·W[j]ᵀ over the chunk's rows for a stack of one to four matrices of one bit
// width, in one dispatch.
func (c *chunkBufs) qmm(ms []qmat, x int, ys ...int) {
	var w []kernels.QMatrixBuffers[int]
	var rows []int
	var reads []plan.Range
	var executed, ideal float64
	for _, m := range ms {
		w, rows, reads = append(w, m.bufs()), append(rows, m.rows), append(reads, m.all()...)
		tm, tn := c.b.gemmTiles(kernels.QMMTileRows(c.n), true)
		e, i := gemmFLOPs(tm, tn, c.n, m.rows, m.cols)
		executed, ideal = executed+e, ideal+i
	}
	c.call(kernels.QMMCall(ms[0].bits, c.n, ms[0].cols, rows, kernels.QMMBuffers[int]{W: w, Y: ys, X: x}), []int{x}, reads, ys...)
	c.b.flops(executed, ideal)
}

// gdnLayer adds DeltaNet layer l over the chunk: (on the first layer, the input norm, which
// later layers get from the previous combine) the in-projections, the recurrence with the conv,
// out_proj, and the residual add with the post norm.
func (c *chunkBufs) gdnLayer(l gdnWeights, first bool, inNorm, postNorm int) {
	eps := c.b.eps
	if first {
		c.norm(c.zero, inNorm, eps)
	}
	c.qmm([]qmat{l.qkv, l.z, l.b, l.a}, c.xn, c.qkv, c.z, c.gb, c.ga)
	c.gdn(c.b.gs, eps, kernels.GDNChunkBuffers[int]{ALog: l.aLog, DtBias: l.dtBias, NormW: l.norm, State: l.state, Taps: l.taps, Window: l.window})
	c.qmm([]qmat{l.out}, c.y, c.o)
	c.norm(c.o, postNorm, eps)
}

// attnLayer adds attention layer l over the chunk: (on the first layer, the input norm) q/k/v,
// the norms, RoPE and the chunk's KV rows, causal attention over the cache, o_proj, and the
// residual add with the post norm.
func (c *chunkBufs) attnLayer(l attnWeights, first bool, inNorm, postNorm int) {
	b, s := c.b, c.b.s
	as, eps, tctx, invFreq := b.as, b.eps, b.tctx, b.bufs.attn.invFreq
	if first {
		c.norm(c.zero, inNorm, eps)
	}
	c.qmm([]qmat{l.q, l.k, l.v}, c.xn, c.qg, c.k, c.v)
	// The traffic model's chunk follows tctx cached positions in pool pages 0, 1, ...
	id := as.IdentityTable()
	writes := b.kvRanges(id, tctx, min(c.n, b.o.MaxCtx-tctx), l.kc, l.vc)
	reads := b.kvRanges(id, 0, min(tctx+c.n, b.o.MaxCtx), l.kc, l.vc)
	rope := kernels.AttnQKRopeKVChunkCall(as, eps, kernels.AttnRopeThreads, c.n, kernels.AttnQKRopeKVBuffers[int]{
		QG: c.qg, K: c.k, V: c.v, QNorm: l.qNorm, KNorm: l.kNorm, InvFreq: invFreq, Step: s.StepBuf, QOut: c.qrot,
		KCache: l.kc, VCache: l.vc, Table: s.Table})
	ropeReads := []int{c.qg, c.k, c.v, l.qNorm, l.kNorm, invFreq, s.StepBuf, s.Table}
	if s.Images {
		axes := b.bufs.attn.axes
		rope = kernels.AttnQKRopeKVMRoPE(rope, s.ChunkRopeOff, axes)
		ropeReads = append(ropeReads, s.ChunkRopeOff, axes)
	}
	c.callRanges(rope, ropeReads, nil, []int{c.qrot}, writes)
	c.callRanges(kernels.AttnPrefillCall(as, c.n, kernels.AttnPrefillBuffers[int]{
		Q: c.qrot, KCache: l.kc, VCache: l.vc, Step: s.StepBuf, Table: s.Table, QG: c.qg, Out: c.ao}),
		[]int{c.qrot, s.StepBuf, s.Table, c.qg}, reads, []int{c.ao}, nil)
	b.flops(attnPrefillFLOPs(as, c.n, tctx, b.p.Dispatches[len(b.p.Dispatches)-1].Tensor))
	c.qmm([]qmat{l.o}, c.ao, c.o)
	c.norm(c.o, postNorm, eps)
}

// gdn is a DeltaNet layer's recurrence over the chunk, from the in-projections' rows (qkv, z, b,
// a) to y, the causal conv folded in (so its output never goes through memory): p carries the
// layer's parameters, state and conv window; gdn_chunk reads the window as it was before the
// chunk, and conv1d_chunk then shifts the chunk's last rows into it.
func (c *chunkBufs) gdn(gs kernels.GDNShape, eps float32, p kernels.GDNChunkBuffers[int]) {
	C, n := gs.Channels(), c.n
	p.X, p.Z, p.A, p.Beta, p.Y = c.qkv, c.z, c.ga, c.gb, c.y
	c.call(kernels.GDNChunkCall(gs, eps, n, p), []int{c.qkv, c.z, c.ga, c.gb, p.ALog, p.DtBias, p.NormW, p.State, p.Taps, p.Window}, nil, p.State, c.y)
	c.b.flops(convFLOPs(C, n)+gdnFLOPs(gs, n), convFLOPs(C, n)+gdnFLOPs(gs, n))
	// The window update reads only the chunk's last rows (kernels.ConvKernel-1 of them).
	last := int64(min(n, kernels.ConvKernel-1))
	rows := plan.Range{Buffer: c.qkv, Offset: 2 * int64(C) * (int64(n) - last), Len: 2 * int64(C) * last}
	c.callRanges(kernels.Conv1DChunkCall(C, kernels.ConvThreads, n, kernels.Conv1DChunkBuffers[int]{X: c.qkv, Window: p.Window}),
		[]int{p.Window}, []plan.Range{rows}, []int{p.Window}, nil)
}

// norm adds d into the chunk's residual and normalises it into xn with gain.
func (c *chunkBufs) norm(d, gain int, eps float32) {
	H := c.h
	c.call(kernels.AddRMSNormCall(H, c.n, eps, kernels.RMSNormThreads, kernels.AddRMSNormBuffers[int]{X: c.res, D: d, W: gain, Res: c.res, Out: c.xn}),
		[]int{c.res, d, gain}, nil, c.res, c.xn)
}

// moe is the chunk's MoE block on xn, added into the residual: the router and shared gate
// logits, routing, grouping by expert, the grouped GEMMs, the shared expert, the combine, which
// also writes xn normalised with gain next (the next layer's input norm; -1: none).
func (c *chunkBufs) moe(ms kernels.MoEShape, l moeWeights, next int, eps float32) {
	n, pairs := c.n, c.n*ms.K
	router, seg, gate, up, down, shGate, shUp, shDown := l.router, l.seg, l.gate, l.up, l.down, l.shGate, l.shUp, l.shDown
	c.qmm([]qmat{router, seg}, c.xn, c.logits, c.seg)
	c.call(kernels.MoETopKChunkCall(ms, n, kernels.MoETopKBuffers[int]{Logits: c.logits, Shared: c.seg, IDs: c.ids, Weights: c.weights}),
		[]int{c.logits, c.seg}, nil, c.ids, c.weights)
	c.call(kernels.MoESortCall(ms, n, c.bm, kernels.MoESortBuffers[int]{IDs: c.ids, Weights: c.weights, Offs: c.offs, Tok: c.tok, W: c.w, Blocks: c.blocks, Pos: c.pos}),
		[]int{c.ids, c.weights}, nil, c.offs, c.tok, c.w, c.blocks, c.pos)
	// Which experts run is known only on the GPU: the traffic model counts the experts a chunk of
	// n touches under uniform routing (0 .. d-1 stand for them), as the decode step counts K.
	var guReads, dReads []plan.Range
	for e := range ms.ExpectedExperts(n) {
		guReads = append(append(guReads, gate.rowsRange(e*ms.I, ms.I)...), up.rowsRange(e*ms.I, ms.I)...)
		dReads = append(dReads, down.rowsRange(e*ms.H, ms.H)...)
	}
	// The routed experts' FLOPs under uniform routing: each expert's binomial count of pairs in
	// blocks of bm rows (executed), against the pairs themselves (useful).
	rows := ms.ExpectedBlocks(n, c.bm) * float64(c.bm)
	expert := 2 * float64(ms.I) * float64(ms.H) // one row through one expert matrix
	c.call(kernels.MoEGateUpMMCall(ms.H, ms.I, pairs, c.nBlocks, c.bm, kernels.MoEGateUpMMBuffers[int]{
		Gate: gate.bufs(), Up: up.bufs(), X: c.xn, Tok: c.tok, Blocks: c.blocks, Act: c.act}),
		[]int{c.xn, c.tok, c.blocks}, guReads, c.act)
	c.b.flops(2*rows*expert, 2*float64(pairs)*expert)
	c.call(kernels.MoEDownMMCall(ms.H, ms.I, pairs, c.nBlocks, c.bm, kernels.MoEDownMMBuffers[int]{
		Down: down.bufs(), Act: c.act, W: c.w, Blocks: c.blocks, Y: c.ey}),
		[]int{c.act, c.w, c.blocks}, dReads, c.ey)
	c.b.flops(rows*expert, float64(pairs)*expert)
	// The shared expert over every token, counted as the dense GEMMs' tiles.
	c.call(kernels.MoEGateUpMMCall(ms.H, ms.SI, n, c.idN, c.idBM, kernels.MoEGateUpMMBuffers[int]{
		Gate: shGate.bufs(), Up: shUp.bufs(), X: c.xn, Tok: c.idTok, Blocks: c.idBlocks, Act: c.shAct}),
		[]int{c.xn, c.idTok, c.idBlocks}, append(shGate.all(), shUp.all()...), c.shAct)
	tm, tn := c.b.gemmTiles(c.idBM, false)
	e, i := gemmFLOPs(tm, tn, n, ms.SI, ms.H)
	c.b.flops(2*e, 2*i)
	c.call(kernels.MoEDownMMCall(ms.H, ms.SI, n, c.idN, c.idBM, kernels.MoEDownMMBuffers[int]{
		Down: shDown.bufs(), Act: c.shAct, W: c.ones, Blocks: c.idBlocks, Y: c.sh}),
		[]int{c.shAct, c.ones, c.idBlocks}, shDown.all(), c.sh)
	c.b.flops(gemmFLOPs(tm, tn, n, ms.H, ms.SI))
	cb := kernels.MoECombineBuffers[int]{IDs: c.ids, Weights: c.weights, Pos: c.pos, Y: c.ey, Shared: c.sh, Res: c.res}
	reads := []int{c.ids, c.weights, c.pos, c.ey, c.sh, c.res}
	if next < 0 {
		c.call(kernels.MoECombineCall(ms, n, cb), reads, nil, c.res)
		return
	}
	cb.Gain, cb.Out = next, c.xn
	c.call(kernels.MoECombineNormCall(ms, n, eps, cb), append(reads, next), nil, c.res, c.xn)
}
