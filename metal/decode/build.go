// Package decode builds the model's GPU step as one plan.Plan over the metal/kernels kernels —
// the decode step of one to MaxRows sequences, each choosing its next token on the GPU, and
// the prefill chunk modes of one sequence on either route over the same state — and around it
// says which buffers hold a sequence's state, uploads a checkpoint's weights, and models the
// step's memory, a prefill chunk's cost, a multi-row step's (also one whose rows are grouped by
// sequence, as when sequences verify drafted tokens: GroupModel), and how many sequences fit;
// metal/gpu runs it.
//
// The plan allocates every buffer once and sets a barrier only where a dispatch depends on one
// since the last barrier. Build adds it block by block (layers.go: the embedding, each DeltaNet
// or attention layer, each MoE block; select.go: the LM head and the selection), each block's
// decode dispatches followed by each chunk size's (chunk.go).
//
// One step: embed_q4 (token from the step buffer) → per layer: the mixer (GDN: qmv_multi_norm_q4
// in_proj_qkv/z/b/a with the input norm folded in, conv1d_step, gdn_step, qmv_q4 out_proj added
// into the residual in place (QMV_ADD); attention: qmv_multi_norm_q4 q/k/v, attn_qk_rope_kv,
// attn_decode_partial/combine, qmv_q4 o_proj added into the residual), moe_router_norm and
// moe_gate_up_norm (the post-attention norm folded in), moe_down_combine (into the residual in
// place) → qmv_norm_q4 LM head (the final norm folded in) → sample_penalties, then per request
// argmax_partial/argmax_final or sample_select/sample_final (writes the chosen token and advances
// pos in the step buffer). No dispatch writes a normed copy of the
// residual: every consumer of a norm recomputes rsqrt(mean(x²)+eps) from the residual itself.
//
// Where the model has its vision tower the plan takes images (Step.Images): the host writes an
// image's embedding rows into the residual under the token id kernels.EmbedHostRow, which the
// embedding leaves as they are, and attn_qk_rope_kv turns each token by its slot plus the
// multimodal offsets the host writes (Step.RopeOff, Step.ChunkRopeOff).
//
// With Options.Rows = R > 1 the same step advances R sequences at once (each dispatch the
// kernel's rows form, every buffer a sequence or an activation holds R rows), each row selecting
// its next token with its own settings; there are no chunk modes.
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

// Options size a decode plan.
type Options struct {
	// MaxCtx is the number of positions each attention layer's KV cache holds.
	MaxCtx int
	// KVBits is the KV cache's format: 16 (bfloat16, also 0) or 8 (int8 blocks of 32 with a
	// binary16 scale: about half the memory and the attention traffic; kernels.KV8).
	KVBits int
	// Chunks are the prefill chunk sizes (none: prompts run token by token through the decode
	// step). Each size adds its modes (ChunkModes): that many prompt tokens at once
	// (Step.ChunkTokens holds their ids, the step buffer the first one's position) through the
	// batched kernels, writing the KV pool, conv windows and DeltaNet states the decode
	// dispatches read. All sizes share one set of buffers, sized for the largest.
	Chunks []int
	// ChunkLogits adds the +logits chunk modes: a chunk followed by the final norm and the LM head
	// for every row (Step.ChunkLogits, [largest chunk][vocab] float32), for a caller that wants
	// the prompt's logits (lily run --prompt-logits-out).
	ChunkLogits bool
	// PageSize is the positions per page of the KV pool (0: DefaultPageSize, or MaxCtx rounded
	// up to 16 when smaller); Pages the pool's pages (0: a session's worth, MaxCtx's pages, and
	// one more so a shared last page can be copied before it is written).
	PageSize, Pages int
	// TrafficCtx is the context (tokens already cached) the traffic model assumes for the
	// position-dependent ranges: the KV rows attention reads (TrafficCtx+1, the new one included)
	// and the row it writes, and the keys attention's FLOPs count. 0 or more than MaxCtx-1 means
	// MaxCtx-1; a negative value means none (a prefill chunk at the start of a sequence).
	TrafficCtx int
	// Rows is the number of sequences one step advances (0 or 1: one; 2 to MaxRows: a multi-row
	// step, Step.Rows). Each row is a sequence with its own step entry, block table row, conv
	// windows, DeltaNet states and sampler buffers (params, token states, bias, penalty table,
	// status), and every activation holds a row per sequence; every dispatch is the kernel's rows
	// form, each row bit-identical to the one-row plan on that sequence alone, selecting with its
	// own settings in the decode modes. Chunk modes are refused (Chunks must be empty). Pages 0 gives every row its own MaxCtx's pages (and a spare), and Init points row
	// r's block table at its own pages when the pool holds them (else rows share pages, and the
	// caller writes each row's table from the pages it gives the row, as the GPU backend does).
	Rows int
	// Verify makes a multi-row step take groups of consecutive rows, one sequence's next token and
	// its drafts (speculative decoding): Step.Groups holds each group's row count at its first row
	// (0 at its others; 1 everywhere, as Init writes it, is the plain step), the DeltaNet layers
	// run a group's rows in sequence from its first row's conv window and state, leave them as
	// they were for a group of more than one, and record each row's inputs in per-layer rings;
	// ModeCommit then replays the rows the host kept (Step.Keep) into them. Rows must be 2 or more.
	Verify bool
	// PrefillRoute is how the chunk modes run their matrix work: plan.Simdgroup (the zero value)
	// on every chip, or plan.Tensor, where each kernel with a tensor-op form (TensorKernels) runs
	// that form instead where the form runs the model's shape, and its simdgroup form elsewhere
	// (plan.Dispatch.Fallback says why). The decode step is the same on both.
	PrefillRoute plan.Route
}

// MaxRows is the most sequences one multi-row step advances (the kernels' row limit).
const MaxRows = kernels.QMVMaxBatch

// Step is a built decode step: the plan and the buffers the host uses.
type Step struct {
	Plan   *plan.Plan
	Config *config.Config
	MaxCtx int
	KVBits int // 16 or 8 (Options.KVBits)
	// Rows is the sequences a step advances (Options.Rows; 1 for the one-row plan). With more,
	// StepBuf is [Rows]{pos, token}, Table [Rows][Attn.TableLen()], Logits [Rows][vocab], each
	// Sampler buffer [Rows][...], Logprobs [2][Rows][record], and each Session buffer but the KV
	// pools [Rows][...].
	Rows int
	// Attn is the attention layers' shape, the KV pool's pages included; Table the block table
	// buffer ([Attn.TableLen()] uint32: a session's page i is pool page Table[i]), which every
	// attention layer reads; KV the K and V pools, in layer order.
	Attn  kernels.AttnShape
	Table int
	KV    []int
	// Chunks are the chunk sizes, largest first (none: no chunk modes; ChunkModes names their
	// modes); ChunkTokens their uint32 token ids; ChunkLogits the +logits modes' [Chunks[0]][vocab]
	// rows (0: none).
	Chunks                   []int
	ChunkTokens, ChunkLogits int

	StepBuf int // {pos, token} uint32
	// Residual is the decode step's residual rows ([Rows][H] float32), ChunkResidual the chunk
	// modes' ([largest chunk][H]; 0 without chunks): a row whose token id is kernels.EmbedHostRow
	// keeps what the host wrote there before the step (an image's embedding).
	Residual, ChunkResidual int
	// Images says the plan takes images, as it does where the model has its vision tower
	// (config.Config.Vision): every attention layer turns by multimodal rotary positions
	// (ATTN_MROPE), each token's its slot plus three offsets the host writes. RopeOff is then
	// every row's offsets ([Rows][3] uint32, a Session buffer: between prompts the sequence's
	// delta three times, which the GPU-resident decode loop keeps while it advances pos), and
	// ChunkRopeOff a chunk's ([largest chunk][3]). A text-only model's plan is as before.
	Images                bool
	RopeOff, ChunkRopeOff int
	// Verify is Options.Verify: Groups and Keep are then [Rows] uint32 (see Options.Verify and
	// ModeCommit).
	Verify       bool
	Groups, Keep int
	Logits       int // [vocab] float32
	Logprobs     int // two slots of Rows kernels.LogprobRecordLen-word records (the logprob modes' output)
	Sampler      SamplerBuffers
	Session      []int // buffers carrying the sequence's state across steps (GDN state, conv windows, KV caches)

	weights []weightSrc
	consts  []constSrc
	// routed are the routed experts' weight buffers (gate, up, down of every layer) and embed the
	// embedding's: a step over several rows (BatchModel) reads the experts its rows route to and
	// one embedding row per token, where it reads every other weight once.
	routed, embed []int
	rings         []ringSet // Options.Verify: each DeltaNet layer's state, window and rings
}

// weightSrc fills one Weights buffer from a loaded checkpoint.
type weightSrc struct {
	buf  int
	fill func(w *model.Weights, dst []byte) error
	// view, when set, is the buffer's exact bytes as the checkpoint stores them (a slice of the
	// mapped file), which a device able to wrap host memory serves without a copy.
	view func(w *model.Weights) []byte
}

// constSrc is a small non-weight buffer with fixed contents (the RoPE table, the sampler's
// params), written once per executor.
type constSrc struct {
	buf  int
	data []byte
}

// qmat is a quantized matrix held in three plan buffers (codes, bf16 scales, bf16 biases).
type qmat struct {
	words, scales, biases int
	rows, cols, bits      int
}

func (m qmat) rowBytes() int64   { return int64(m.cols * m.bits / 8) }
func (m qmat) groupBytes() int64 { return int64(m.cols / quant.GroupSize * 2) }

// rows is the device ranges of rows [r0, r0+n).
func (m qmat) rowsRange(r0, n int) []plan.Range {
	return []plan.Range{
		{Buffer: m.words, Offset: int64(r0) * m.rowBytes(), Len: int64(n) * m.rowBytes()},
		{Buffer: m.scales, Offset: int64(r0) * m.groupBytes(), Len: int64(n) * m.groupBytes()},
		{Buffer: m.biases, Offset: int64(r0) * m.groupBytes(), Len: int64(n) * m.groupBytes()},
	}
}

func (m qmat) all() []plan.Range { return m.rowsRange(0, m.rows) }

// buffers is the matrix's three plan buffers.
func (m qmat) buffers() []int { return []int{m.words, m.scales, m.biases} }

// bufs is the matrix's buffers, as the kernel calls bind them.
func (m qmat) bufs() kernels.QMatrixBuffers[int] {
	return kernels.QMatrixBuffers[int]{Words: m.words, Scales: m.scales, Biases: m.biases}
}

type builder struct {
	s       *Step
	p       *plan.Plan
	read    map[int]bool // buffers read since the last barrier
	written map[int]bool // buffers written since the last barrier
	modes   []string     // the Modes of dispatches added without their own
	rows    int          // the decode step's rows (Options.Rows, at least 1)
	route   plan.Route   // the chunk modes' route (Options.PrefillRoute)
	bf16    map[int]bool // buffers of bfloat elements (the chunk mode's activations; others float32)

	o      Options
	c      *config.Config
	tctx   int // the traffic model's cached positions (Options.TrafficCtx resolved)
	eps    float32
	gs     kernels.GDNShape
	as     kernels.AttnShape // Step.Attn
	ms     kernels.MoEShape
	splits int          // attention's split count (kernels.AttnSplits)
	bufs   stepBufs     // the decode step's activations
	chs    []*chunkBufs // the chunk sizes, largest first, over one set of buffers
	rings  []ringSet    // Options.Verify: each DeltaNet layer's state and rings, for ModeCommit
}

// ringSet is a DeltaNet layer's conv window and state and the rings a verify step records for
// them (kernels.Conv1DVerifyBuffers, kernels.GDNVerifyBuffers).
type ringSet struct{ window, state, convRing, gdnRing int }

// batch is the qmv variant's Batch for the decode step's rows: 0 (QMV_BATCH unset, the one-row
// pipeline) for one row, so the one-row plan keeps its dispatches exactly.
func (b *builder) batch() int {
	if b.rows == 1 {
		return 0
	}
	return b.rows
}

// perRow is the FLOPs of one row's work times the rows.
func (b *builder) perRow(fl float64) float64 { return fl * float64(b.rows) }

func (b *builder) buffer(name string, size int64, kind plan.Kind) int {
	b.p.Buffers = append(b.p.Buffers, plan.Buffer{Name: name, Size: size, Kind: kind})
	return len(b.p.Buffers) - 1
}

func (b *builder) whole(buf int) plan.Range {
	return plan.Range{Buffer: buf, Len: b.p.Buffers[buf].Size}
}

// bfloats allocates a bfloat vector of n.
func (b *builder) bfloats(name string, n int, kind plan.Kind) int {
	i := b.buffer(name, int64(2*n), kind)
	b.bf16[i] = true
	return i
}

// floats allocates a float32 vector of n.
func (b *builder) floats(name string, n int, kind plan.Kind) int {
	return b.buffer(name, int64(4*n), kind)
}

// matrix declares a quantized weight matrix and how to find it in a checkpoint.
func (b *builder) matrix(name string, rows, cols, bits int, get func(*model.Weights) *quant.Matrix) qmat {
	m := qmat{rows: rows, cols: cols, bits: bits}
	m.words = b.buffer(name+".weight", int64(rows)*int64(cols*bits/8), plan.Weights)
	m.scales = b.buffer(name+".scales", int64(rows)*int64(cols/quant.GroupSize*2), plan.Weights)
	m.biases = b.buffer(name+".biases", int64(rows)*int64(cols/quant.GroupSize*2), plan.Weights)
	b.s.weights = append(b.s.weights, weightSrc{buf: m.words, fill: func(w *model.Weights, dst []byte) error {
		q := get(w)
		if q == nil {
			return fmt.Errorf("decode: %s: missing", name)
		}
		if q.Rows != rows || q.Cols != cols || q.Bits != bits {
			return fmt.Errorf("decode: %s: checkpoint has %d×%d %d-bit, the plan expects %d×%d %d-bit", name, q.Rows, q.Cols, q.Bits, rows, cols, bits)
		}
		return nil
	}})
	// The three buffers are filled together from the matrix: the checks above run first.
	b.s.weights = append(b.s.weights,
		weightSrc{buf: m.words, fill: func(w *model.Weights, dst []byte) error { return put(dst, get(w).Words, name) },
			view: func(w *model.Weights) []byte { return BytesOf(get(w).Words) }},
		weightSrc{buf: m.scales, fill: func(w *model.Weights, dst []byte) error { return put(dst, get(w).Scales, name) },
			view: func(w *model.Weights) []byte { return BytesOf(get(w).Scales) }},
		weightSrc{buf: m.biases, fill: func(w *model.Weights, dst []byte) error { return put(dst, get(w).Biases, name) },
			view: func(w *model.Weights) []byte { return BytesOf(get(w).Biases) }})
	return m
}

// vector declares a small weight vector, stored as bf16 (bf16 true) or float32.
func (b *builder) vector(name string, n int, bf16 bool, get func(*model.Weights) []float32) int {
	size := 4 * n
	if bf16 {
		size = 2 * n
	}
	buf := b.buffer(name, int64(size), plan.Weights)
	b.s.weights = append(b.s.weights, weightSrc{buf: buf, fill: func(w *model.Weights, dst []byte) error {
		v := get(w)
		if len(v) != n {
			return fmt.Errorf("decode: %s: %d values, the plan expects %d", name, len(v), n)
		}
		if !bf16 {
			return put(dst, v, name)
		}
		h := make([]uint16, n)
		for i, x := range v {
			h[i] = quant.F32ToBF16(x) // the checkpoint's bf16 values round-trip exactly
		}
		return put(dst, h, name)
	}})
	return buf
}

// add appends a dispatch and sets its barrier when it reads a buffer written, or writes a buffer
// read or written, since the last barrier. Every bound buffer counts as read unless the
// dispatch's Writes name it.
func (b *builder) add(d plan.Dispatch) {
	if d.Modes == nil {
		d.Modes = b.modes
	}
	writes := map[int]bool{}
	for _, r := range d.Writes {
		writes[r.Buffer] = true
	}
	reads := map[int]bool{}
	for _, bind := range d.Buffers {
		if !writes[bind.Buffer] {
			reads[bind.Buffer] = true
		}
	}
	for _, r := range d.Reads {
		reads[r.Buffer] = true
	}
	for buf := range reads {
		if b.written[buf] {
			d.Barrier = true
		}
	}
	for buf := range writes {
		if b.written[buf] || b.read[buf] {
			d.Barrier = true
		}
	}
	if d.Barrier {
		b.read, b.written = map[int]bool{}, map[int]bool{}
	}
	for buf := range reads {
		b.read[buf] = true
	}
	for buf := range writes {
		b.written[buf] = true
	}
	b.p.Dispatches = append(b.p.Dispatches, d)
}

// Dispatch is the plan dispatch of a kernel call on plan buffers (every binding at offset 0)
// that reads and writes the given device ranges (the traffic model; see plan.Dispatch).
func Dispatch(c kernels.Call[int], reads, writes []plan.Range) plan.Dispatch {
	bs := make(map[int]plan.Binding, len(c.Buffers))
	for i, buf := range c.Buffers {
		bs[i] = plan.Binding{Buffer: buf}
	}
	return plan.Dispatch{
		Kernel: c.Kernel, Constants: c.Constants, Buffers: bs, ThreadgroupMem: c.ThreadgroupMem,
		Threadgroups: c.Threadgroups, Group: c.Group, Reads: reads, Writes: writes,
	}
}

// call adds the dispatch of c (Dispatch) in modes, or in b.modes when none are given.
func (b *builder) call(c kernels.Call[int], reads, writes []plan.Range, modes ...string) {
	d := Dispatch(c, reads, writes)
	d.Modes = modes
	b.add(d)
}

// qmv is y = W·x (add: y += W·x in place).
func (b *builder) qmv(m qmat, x, y int, add bool) {
	reads := append(m.all(), b.whole(x))
	if add {
		reads = append(reads, b.whole(y))
	}
	b.call(kernels.QMVCall(m.bits, m.rows, m.cols, kernels.QMVVariant{Add: add, Batch: b.batch()}, kernels.QMVBuffers[int]{W: m.bufs(), X: x, Y: y}),
		reads, []plan.Range{b.whole(y)})
	b.flops(b.perRow(gemvFLOPs(m.rows, m.cols)), b.perRow(gemvFLOPs(m.rows, m.cols)))
}

// qmvNorm is y = W·rmsnorm(x, gain): the norm computed in the GEMV.
func (b *builder) qmvNorm(m qmat, x, gain, y int, eps float32) {
	b.call(kernels.QMVCall(m.bits, m.rows, m.cols, kernels.QMVVariant{Norm: true, Eps: eps, Batch: b.batch()}, kernels.QMVBuffers[int]{W: m.bufs(), X: x, Y: y, Gain: gain}),
		append(m.all(), b.whole(x), b.whole(gain)), []plan.Range{b.whole(y)})
	b.flops(b.perRow(gemvFLOPs(m.rows, m.cols)), b.perRow(gemvFLOPs(m.rows, m.cols)))
}

// qmvMultiNorm is ys[j] = W_j·rmsnorm(x, gain) for 1..4 matrices of the same bit width and
// columns, in one dispatch.
func (b *builder) qmvMultiNorm(ms []qmat, ys []int, x, gain int, eps float32) {
	bufs := kernels.QMVMultiBuffers[int]{Y: ys, X: x, Gain: gain}
	var rows []int
	var reads, writes []plan.Range
	var fl float64
	for j, m := range ms {
		bufs.W = append(bufs.W, m.bufs())
		rows = append(rows, m.rows)
		reads = append(reads, m.all()...)
		writes = append(writes, b.whole(ys[j]))
		fl += gemvFLOPs(m.rows, m.cols)
	}
	b.call(kernels.QMVMultiCall(ms[0].bits, ms[0].cols, rows, kernels.QMVVariant{Norm: true, Eps: eps, Batch: b.batch()}, bufs),
		append(reads, b.whole(x), b.whole(gain)), writes)
	b.flops(b.perRow(fl), b.perRow(fl))
}

// Check reports whether the kernels support a configuration's shapes.
func Check(c *config.Config) error {
	H := c.HiddenSize
	switch {
	case H <= 0 || H%quant.GroupSize != 0:
		return fmt.Errorf("decode: hidden size %d: want a positive multiple of %d", H, quant.GroupSize)
	case c.ConvKernel != kernels.ConvKernel:
		return fmt.Errorf("decode: conv kernel %d: conv1d_step supports %d", c.ConvKernel, kernels.ConvKernel)
	case len(c.Layers) != c.NumLayers:
		return fmt.Errorf("decode: %d layer kinds for %d layers", len(c.Layers), c.NumLayers)
	}
	if err := (kernels.GDNShape{HK: c.LinearKeyHeads, HV: c.LinearValueHeads, DK: c.LinearKeyDim, DV: c.LinearValueDim}).Validate(); err != nil {
		return err
	}
	if err := (kernels.AttnShape{Heads: c.NumHeads, KVHeads: c.NumKVHeads, HeadDim: c.HeadDim, RotaryDim: c.RotaryDim, MaxCtx: 1}).Validate(); err != nil {
		return err
	}
	return (kernels.MoEShape{H: H, E: c.NumExperts, K: c.TopK, I: c.MoEIntermediate, SI: c.SharedIntermed}).Validate()
}

// Build makes the decode step for configuration c. It needs shapes only; Upload fills the
// weight buffers from a checkpoint.
func Build(c *config.Config, o Options) (*Step, error) {
	b, err := newBuilder(c, o)
	if err != nil {
		return nil, err
	}
	b.stepBuffers()
	// The decode step's dispatches run in every mode but the chunk's.
	b.modes = []string{ModeGreedy, ModeSample, ModeGreedyLogprobs, ModeSampleLogprobs, ModePrefill}
	b.chunkSets()
	b.embedding()
	b.layers()
	pl := b.selection(b.head())
	b.logprobs(pl)
	b.commits()
	b.s.rings = b.rings
	if err := b.p.Validate(); err != nil {
		return nil, err
	}
	return b.s, nil
}

// newBuilder checks c and o and starts the step: its shapes, the KV pool's pages and the
// traffic model's context.
func newBuilder(c *config.Config, o Options) (*builder, error) {
	if o.MaxCtx <= 0 {
		return nil, fmt.Errorf("decode: max context %d: want at least 1", o.MaxCtx)
	}
	if err := Check(c); err != nil {
		return nil, err
	}
	tctx := o.TrafficCtx
	if tctx == 0 || tctx > o.MaxCtx-1 {
		tctx = o.MaxCtx - 1
	}
	tctx = max(tctx, 0)
	if o.KVBits != 0 && o.KVBits != 16 && o.KVBits != 8 {
		return nil, fmt.Errorf("decode: --kv-bits %d: want 16 or 8", o.KVBits)
	}
	R := max(o.Rows, 1)
	switch {
	case o.Rows < 0 || o.Rows > MaxRows:
		return nil, fmt.Errorf("decode: %d rows: want 1 to %d", o.Rows, MaxRows)
	case o.Verify && R < 2:
		return nil, fmt.Errorf("decode: verify groups need a multi-row step, not %d row", R)
	case R > 1 && len(ChunkSizes(o.Chunks)) > 0:
		return nil, fmt.Errorf("decode: prefill chunks %v with %d rows: the chunk modes are one sequence's; a multi-row step has none", o.Chunks, R)
	}
	s := &Step{Plan: &plan.Plan{}, Config: c, MaxCtx: o.MaxCtx, KVBits: kvBits(o.KVBits), Rows: R}
	ps := o.PageSize
	if ps == 0 {
		ps = min(DefaultPageSize, (o.MaxCtx+kernels.AttnTile-1)/kernels.AttnTile*kernels.AttnTile)
	}
	pages := o.Pages
	if pages == 0 {
		pages = R*((o.MaxCtx+ps-1)/ps) + 1 // every row's pages, and a spare
	}
	s.Attn = kernels.AttnShape{Heads: c.NumHeads, KVHeads: c.NumKVHeads, HeadDim: c.HeadDim, RotaryDim: c.RotaryDim,
		MaxCtx: o.MaxCtx, KVBits: s.KVBits, PageSize: ps, Pages: pages}
	if err := s.Attn.Validate(); err != nil {
		return nil, err
	}
	s.Images = c.Vision != nil
	s.Verify = o.Verify
	return &builder{s: s, p: s.Plan, read: map[int]bool{}, written: map[int]bool{}, rows: R, route: o.PrefillRoute, bf16: map[int]bool{},
		o: o, c: c, tctx: tctx, eps: c.RMSNormEps, as: s.Attn, splits: kernels.AttnSplits(o.MaxCtx),
		gs: kernels.GDNShape{HK: c.LinearKeyHeads, HV: c.LinearValueHeads, DK: c.LinearKeyDim, DV: c.LinearValueDim},
		ms: kernels.MoEShape{H: c.HiddenSize, E: c.NumExperts, K: c.TopK, I: c.MoEIntermediate, SI: c.SharedIntermed}}, nil
}

// stepBufs are the decode step's control buffers beyond Step's and its activations, shared by
// every layer, each holding a row per sequence (zero: the model has no layer of that kind).
type stepBufs struct {
	res     int // [R][H] float32 residual stream
	gdn     gdnActs
	attn    attnActs
	moe     moeActs
	partial int // argmax_partial's [R][groups] (value, index) pairs
}

// gdnActs are a DeltaNet layer's activations: the in-projections' qkv (before the conv), z, a
// and b, the conv's output u, and the recurrence's output y.
type gdnActs struct{ qkv, u, z, ga, gb, y int }

// attnActs are an attention layer's activations (q with its gates, k, v, the rotated q, the
// split-context partials, the gated output) and the RoPE table.
type attnActs struct{ qg, k, v, qrot, opart, mlpart, out, invFreq, axes int }

// moeActs are the MoE block's chosen experts, their weights and the gate/up activations.
type moeActs struct{ ids, weights, act int }

// stepBuffers declares the decode step's per-sequence control buffers (step entry, block table,
// the sampler's) and its activations (b.bufs), in the plan's buffer order.
func (b *builder) stepBuffers() {
	s, c, R := b.s, b.c, b.rows
	H, V, as, ms := c.HiddenSize, c.VocabSize, b.as, b.ms
	s.StepBuf = b.buffer("step", 8*int64(R), plan.Control)
	s.Table = b.buffer("kv.table", 4*int64(R*as.TableLen()), plan.Control)
	s.consts = append(s.consts, constSrc{s.Table, BytesOf(rowTables(as, R))}) // until a session sets its pages
	s.Sampler = SamplerBuffers{
		Params: b.buffer("sample.params", 4*16*int64(R), plan.Control),
		State:  b.buffer("sample.state", 4*int64(R*V), plan.Control), // per request: count | seen<<31
		Bias:   b.floats("sample.bias", R*V, plan.Control),
		Pen:    b.floats("sample.pen", R*(b.o.MaxCtx+1), plan.Control),
		Status: b.buffer("sample.status", 4*int64(R), plan.Control),
	}
	b.bufs.res = b.floats("residual", R*H, plan.Activations)
	s.Residual = b.bufs.res
	s.consts = append(s.consts, constSrc{s.Sampler.Params, BytesOf(repeatRows(kernels.SampleParams{}.Words(), R))})
	if gs := b.gs; gs.HV > 0 && hasKind(c, config.LinearAttention) {
		b.bufs.gdn = gdnActs{
			qkv: b.floats("gdn.qkv", R*gs.Channels(), plan.Activations),
			u:   b.floats("gdn.conv_out", R*gs.Channels(), plan.Activations),
			z:   b.floats("gdn.z", R*gs.HV*gs.DV, plan.Activations),
			ga:  b.floats("gdn.a", R*gs.HV, plan.Activations),
			gb:  b.floats("gdn.b", R*gs.HV, plan.Activations),
			y:   b.floats("gdn.y", R*gs.HV*gs.DV, plan.Activations),
		}
	}
	if hasKind(c, config.FullAttention) {
		b.bufs.attn = b.attnActs()
	}
	if b.s.Images {
		s.RopeOff = b.buffer("rope.off", 12*int64(R), plan.State)
		s.Session = append(s.Session, s.RopeOff)
	}
	b.bufs.moe = moeActs{
		ids:     b.buffer("moe.ids", int64(4*R*ms.K), plan.Activations),
		weights: b.floats("moe.weights", R*(ms.K+1), plan.Activations),
		act:     b.floats("moe.act", R*ms.ActLen(), plan.Activations),
	}
	if s.Verify {
		s.Groups = b.buffer("verify.groups", 4*int64(R), plan.Control)
		s.Keep = b.buffer("verify.keep", 4*int64(R), plan.Control)
		s.consts = append(s.consts, constSrc{s.Groups, BytesOf(repeatRows([]uint32{1}, R))}) // every row alone: the plain step
	}
	s.Logits = b.floats("logits", R*V, plan.Activations)
	b.bufs.partial = b.buffer("argmax.partial", 8*int64(R*kernels.ArgmaxDefaultGroups), plan.Activations)
}

// attnActs declares the attention layers' activations and the RoPE table.
func (b *builder) attnActs() attnActs {
	as, R := b.as, b.rows
	qd := as.Heads * as.HeadDim
	a := attnActs{
		qg:   b.floats("attn.qg", R*2*qd, plan.Activations),
		k:    b.floats("attn.k", R*as.KVHeads*as.HeadDim, plan.Activations),
		v:    b.floats("attn.v", R*as.KVHeads*as.HeadDim, plan.Activations),
		qrot: b.floats("attn.q_rot", R*qd, plan.Activations),
	}
	ol, mll := as.AttnPartialLens(b.splits)
	a.opart = b.floats("attn.o_part", R*ol, plan.Activations)
	a.mlpart = b.floats("attn.ml_part", R*mll, plan.Activations)
	a.out = b.floats("attn.out", R*qd, plan.Activations)
	a.invFreq = b.floats("rope.inv_freq", b.c.RotaryDim/2, plan.Weights)
	b.s.consts = append(b.s.consts, constSrc{a.invFreq, BytesOf(kernels.RopeInvFreq(b.c.RotaryDim, b.c.RopeTheta))})
	if b.s.Images {
		a.axes = b.buffer("rope.axis", 4*int64(b.c.RotaryDim/2), plan.Weights)
		b.s.consts = append(b.s.consts, constSrc{a.axes, BytesOf(kernels.MRoPEAxes(b.c.RotaryDim/2, b.c.MRoPEAxis))})
	}
	return a
}

// chunkSets declares the chunk modes' buffers (Options.Chunks): the sizes, largest first, over
// one set of buffers sized for the largest.
func (b *builder) chunkSets() {
	sizes := ChunkSizes(b.o.Chunks)
	if len(sizes) == 0 {
		return
	}
	b.s.Chunks = sizes
	big := b.chunkBuffers(sizes[0], b.gs, b.as, b.ms, b.o.ChunkLogits)
	b.chs = append(b.chs, big)
	for _, n := range sizes[1:] {
		b.chs = append(b.chs, big.bucket(n, b.ms))
	}
}

// rowTables is the block tables Init gives rows sequences ([rows][TableLen]): row r the pool
// pages r·TableLen, r·TableLen+1, ... (modulo the pool), so each row has its own when the pool
// holds them all; one row is the identity table.
func rowTables(as kernels.AttnShape, rows int) []uint32 {
	n := as.TableLen()
	t := make([]uint32, rows*n)
	for i := range t {
		t[i] = uint32(i % as.Pages)
	}
	return t
}

// repeatRows is rows copies of row, one after another.
func repeatRows[T any](row []T, rows int) []T {
	out := make([]T, 0, rows*len(row))
	for range rows {
		out = append(out, row...)
	}
	return out
}

func hasKind(c *config.Config, k config.LayerKind) bool {
	for _, l := range c.Layers {
		if l == k {
			return true
		}
	}
	return false
}

// Upload writes the checkpoint's weights into the Weights buffers (bytes(i) is buffer i's host
// view) after checking every tensor's shape and bit width against the plan.
func (s *Step) Upload(w *model.Weights, bytes func(i int) []byte, wrapped func(buf int) bool) error {
	for _, src := range s.weights {
		dst := bytes(src.buf)
		if wrapped != nil && wrapped(src.buf) {
			dst = nil // served from the checkpoint itself: fill only runs its checks
		}
		if err := src.fill(w, dst); err != nil {
			return err
		}
	}
	return nil
}

// Views are the weight buffers a device can serve straight from the checkpoint, by buffer name.
func (s *Step) Views(w *model.Weights) map[string][]byte {
	out := map[string][]byte{}
	for _, src := range s.weights {
		if src.view != nil {
			if v := src.view(w); len(v) == int(s.Plan.Buffers[src.buf].Size) {
				out[s.Plan.Buffers[src.buf].Name] = v
			}
		}
	}
	return out
}

// DefaultPageSize is the KV pool's positions per page: a sequence that diverges from a shared
// prefix copies at most one page (about 5 MB at production with a bf16 cache).
const DefaultPageSize = 256

// The step's modes (plan.Dispatch.Modes).
const (
	ModeGreedy  = "greedy"  // logits, then the argmax of the penalised logits (argmax_partial, argmax_final)
	ModeSample  = "sample"  // logits, then seeded sampling (sample_select, sample_final)
	ModePrefill = "prefill" // the layers only: a prompt token before the last, whose logits nobody reads
	// The selection modes with the chosen token's logprob and the most likely alternatives
	// (logprob_partial, logprob_final) written into the Logprobs record.
	ModeGreedyLogprobs = "greedy+logprobs"
	ModeSampleLogprobs = "sample+logprobs"
	// ModeCommit (Options.Verify) runs only conv1d_commit and gdn_commit of every DeltaNet layer:
	// after a verify step, each group keeps the rows Step.Keep says (at its first row).
	ModeCommit = "commit"
)

// ChunkSizes is sizes without the ones below 1 and repeats, largest first.
func ChunkSizes(sizes []int) []int {
	var out []int
	for _, n := range sizes {
		if n > 0 && !slices.Contains(out, n) {
			out = append(out, n)
		}
	}
	slices.SortFunc(out, func(a, b int) int { return b - a })
	return out
}

// LargestChunk is the largest chunk size (0: none).
func (s *Step) LargestChunk() int {
	if len(s.Chunks) == 0 {
		return 0
	}
	return s.Chunks[0]
}

// ChunkModes names the modes of the chunk size n: Run takes n prompt tokens through the batched
// prefill kernels; Last also computes the last row's logits and greedy token (a piece of prompt
// ending with a whole chunk); Logits every row's logits (Options.ChunkLogits).
func ChunkModes(n int) struct{ Run, Last, Logits string } {
	r := fmt.Sprintf("chunk%d", n)
	return struct{ Run, Last, Logits string }{r, r + "+last", r + "+logits"}
}

// SamplerBuffers are the buffers a request's selection settings go in (kernels.SampleSetup).
type SamplerBuffers struct {
	Params int // kernels.SampleParams words
	State  int // [vocab] uint32 token states
	Bias   int // [vocab] float32
	Pen    int // [MaxCtx+1] float32 penalty table
	Status int // uint32: bit 0 set when sample_final's result must be redone on the host
}

// Init writes the fixed non-weight buffers (the RoPE table, the sampler's params) and clears the
// sequence state, for a fresh sequence on a new or reused executor. KV caches are not cleared:
// attention reads only the rows of positions the sequence has written. A multi-row step's Init
// starts every row afresh (each with its own pages, rowTables); restarting one row alone is the
// caller's (its rows of the Session buffers, step entry, table and sampler rows).
func (s *Step) Init(bytes func(i int) []byte) {
	for _, c := range s.consts {
		copy(bytes(c.buf), c.data)
	}
	for _, buf := range s.Session {
		if s.Plan.Buffers[buf].Kind != plan.KVCache {
			clear(bytes(buf))
		}
	}
	clear(bytes(s.StepBuf))
}

// StateSpans calls f with every span of device memory that holds a sequence's state after pos
// positions: the GDN states, conv windows and step buffer whole, and, when table is not nil, of
// each KV pool the sequence's first pos rows of every kv head found through table
// (kernels.AttnShape.SeqSpans), in Session order. It describes the one-row plan only (snapshots
// are of one sequence): a multi-row step's buffers hold every row's state, and it panics.
func (s *Step) StateSpans(pos int, table []uint32, f func(buf int, off, n int64)) {
	if s.Rows > 1 {
		panic(fmt.Sprintf("decode: StateSpans of a %d-row step: one-row plans only", s.Rows))
	}
	for _, buf := range append(slices.Clone(s.Session), s.StepBuf) {
		if s.Plan.Buffers[buf].Kind != plan.KVCache {
			f(buf, 0, s.Plan.Buffers[buf].Size)
		} else if table != nil {
			s.Attn.SeqSpans(table, 0, pos, func(off, n int64) { f(buf, off, n) })
		}
	}
}

// PerRow is the buffers that hold one row per sequence the step advances, [Rows][...] each: the
// step buffer, the block table, the sampler's buffers, and the Session buffers but the KV pools. A sequence's rows of them are its whole state outside the shared KV pool, laid
// out in a multi-row plan exactly as in the one-row plan, so a one-row executor whose PerRow
// buffers are views of row r of a multi-row plan's runs that row's sequence alone.
func (s *Step) PerRow() []int {
	sb := s.Sampler
	out := []int{s.StepBuf, s.Table, sb.Params, sb.State, sb.Bias, sb.Pen, sb.Status}
	for _, buf := range s.Session {
		if s.Plan.Buffers[buf].Kind != plan.KVCache {
			out = append(out, buf)
		}
	}
	return out
}

// GroupRows are the per-row buffers a verify group's later rows use in a step (Options.Verify),
// by how: Lent they read as the group's, so they must hold its first row's values (the block
// table and, where the plan takes images, the rotary offsets); Scratch they use as their own,
// set for the step (the step entry, which the host writes, and the sampler params, cleared: the
// host picks from the logits, so the selection then reads no bias, penalty or token state and
// counts nothing). The step leaves every other per-row buffer of those rows alone — the DeltaNet
// states and conv windows (the group forms use the first row's) and the sampler's state, bias,
// penalty table and status — so a backend lends the rows of sequences that are not in the step
// and puts the few bytes of these back afterwards.
type GroupRows struct{ Lent, Scratch []int }

// GroupRows is the step's GroupRows.
func (s *Step) GroupRows() GroupRows {
	g := GroupRows{Lent: []int{s.Table}, Scratch: []int{s.StepBuf, s.Sampler.Params}}
	if s.Images {
		g.Lent = append(g.Lent, s.RopeOff)
	}
	return g
}

func kvBits(b int) int {
	if b == 0 {
		return 16
	}
	return b
}
