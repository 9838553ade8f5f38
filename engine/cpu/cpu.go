// Package cpu is the pure-Go reference backend: the Qwen3.5/3.6-MoE forward pass in float32 over
// quantized weights, dequantized on the fly, matching Hugging Face transformers' eager fp32 path.
package cpu

import (
	"errors"
	"fmt"
	"math"
	"runtime"
	"sync"
	"unsafe"

	"github.com/lilyformac/lily/engine/backend"
	"github.com/lilyformac/lily/engine/config"
	"github.com/lilyformac/lily/engine/f32"
	"github.com/lilyformac/lily/engine/model"
	"github.com/lilyformac/lily/engine/quant"
	"github.com/lilyformac/lily/engine/vision"
	"github.com/lilyformac/lily/internal/hostmem"
)

// Model runs the forward pass of loaded weights. It is safe for concurrent use with separate States.
type Model struct {
	W       *model.Weights
	cfg     *config.Config
	invFreq []float32 // RoPE inverse frequencies, rotaryDim/2 of them
	axis    []int     // the position axis (time, height, width) each frequency reads

	towerOnce sync.Once
	tower     *vision.Tower

	// OnLayer, when set, sees the residual stream after each layer (for tests and debugging).
	OnLayer func(layer int, hidden [][]float32)
}

// New prepares a model for weights w.
func New(w *model.Weights) *Model {
	c := w.Config
	m := &Model{W: w, cfg: c}
	// Same float32 steps as HF: base ** (float32(2i)/dim), then 1/x.
	for i := 0; i < c.RotaryDim; i += 2 {
		e := float32(i) / float32(c.RotaryDim)
		m.invFreq = append(m.invFreq, 1/float32(math.Pow(c.RopeTheta, float64(e))))
		m.axis = append(m.axis, c.MRoPEAxis(i/2))
	}
	return m
}

// State is one sequence's cache: KV for full-attention layers, the conv window and the recurrent
// state for Gated DeltaNet layers.
type State struct {
	Pos int
	// Delta is how far the rotary position of the next text token is from its slot: images
	// advance the position by their longer side rather than their token count (backend.Positions).
	Delta int
	conv  [][]float32 // per GDN layer: the last kernel-1 pre-conv inputs, oldest first, [kernel-1][channels]
	ssm   [][]float32 // per GDN layer: [valueHeads][keyDim][valueDim]
	k, v  [][]float32 // per attention layer: [pos][kvHeads·headDim], grown as tokens arrive
}

// NewState returns an empty sequence state.
func (m *Model) NewState() *State {
	c := m.cfg
	s := &State{
		conv: make([][]float32, c.NumLayers), ssm: make([][]float32, c.NumLayers),
		k: make([][]float32, c.NumLayers), v: make([][]float32, c.NumLayers),
	}
	channels := 2*c.LinearKeyHeads*c.LinearKeyDim + c.LinearValueHeads*c.LinearValueDim
	for i, kind := range c.Layers {
		if kind == config.LinearAttention {
			s.conv[i] = make([]float32, (c.ConvKernel-1)*channels)
			s.ssm[i] = make([]float32, c.LinearValueHeads*c.LinearKeyDim*c.LinearValueDim)
		}
	}
	return s
}

// Forward runs tokens at slots s.Pos, s.Pos+1, … and advances s. It returns a row of logits
// for every token when all is set, else only for the last one.
func (m *Model) Forward(s *State, tokens []int, all bool) ([][]float32, error) {
	return m.ForwardImages(s, tokens, nil, all)
}

// ForwardImages is Forward for a piece of prompt holding images (backend.Image): their rows
// replace the pad tokens' embeddings, and every token takes its multimodal rotary position.
func (m *Model) ForwardImages(s *State, tokens []int, images []backend.Image, all bool) ([][]float32, error) {
	c := m.cfg
	T, H := len(tokens), c.HiddenSize
	if err := m.check(s, tokens); err != nil {
		return nil, err
	}
	pos, delta, err := backend.Positions(s.Pos, s.Delta, T, images)
	if err != nil {
		return nil, err
	}
	x := rows(T, H)
	for t, id := range tokens {
		m.W.Embed.DequantRow(id, x[t])
	}
	for _, im := range images {
		for i := max(im.At, 0); i < min(im.At+im.H*im.W, T); i++ {
			row := im.Embeds[i-im.At]
			if len(row) != H {
				return nil, fmt.Errorf("cpu: an image row of %d values, the model's hidden size is %d", len(row), H)
			}
			copy(x[i], row)
		}
	}
	h := rows(T, H)
	in := inputs(T, H)
	for li := range m.W.Layers {
		L := &m.W.Layers[li]
		normInto(h, in, x, L.InputNorm, c.RMSNormEps)
		var mixed [][]float32
		if L.GDN != nil {
			mixed = m.gdn(s, li, L.GDN, in)
		} else {
			mixed = m.attention(s, li, L.Attn, in, pos)
		}
		addRows(x, mixed)
		normInto(h, in, x, L.PostNorm, c.RMSNormEps)
		addRows(x, m.moe(&L.MoE, in))
		if m.OnLayer != nil {
			m.OnLayer(li, x)
		}
	}
	s.Pos += T
	s.Delta = delta
	if !all {
		x, h, in = x[T-1:], h[T-1:], in[T-1:]
	}
	normInto(h, in, x, m.W.FinalNorm, c.RMSNormEps)
	logits := rows(len(x), c.VocabSize)
	quant.MatMul(m.W.LMHead, logits, in)
	return logits, nil
}

// check refuses tokens the model cannot take at the state's next slots.
func (m *Model) check(s *State, tokens []int) error {
	c := m.cfg
	if len(tokens) == 0 {
		return fmt.Errorf("cpu: no tokens")
	}
	for _, id := range tokens {
		if id < 0 || id >= c.VocabSize {
			return fmt.Errorf("cpu: token id %d outside the vocabulary [0, %d)", id, c.VocabSize)
		}
	}
	if c.MaxPositions > 0 && s.Pos+len(tokens) > c.MaxPositions {
		return fmt.Errorf("cpu: %d positions exceed the model's context of %d", s.Pos+len(tokens), c.MaxPositions)
	}
	return nil
}

// gdn is the Gated DeltaNet mixer: projections, causal conv, the delta-rule recurrence per value
// head (HF's recurrent order: decay, read, delta, write, output), gated RMSNorm, out projection.
func (m *Model) gdn(s *State, li int, g *model.GDN, in []*quant.Input) [][]float32 {
	c := m.cfg
	T := len(in)
	hk, hv, dk, dv, K := c.LinearKeyHeads, c.LinearValueHeads, c.LinearKeyDim, c.LinearValueDim, c.ConvKernel
	C := 2*hk*dk + hv*dv
	qkv, z := rows(T, C), rows(T, hv*dv)
	bs, as := rows(T, hv), rows(T, hv)
	quant.MatMul(g.InProjQKV, qkv, in)
	quant.MatMul(g.InProjZ, z, in)
	quant.MatMul(g.InProjB, bs, in)
	quant.MatMul(g.InProjA, as, in)

	window, S := s.conv[li], s.ssm[li]
	y := rows(T, hv*dv)
	u := make([]float32, C)
	qScale := f32.Rsqrt(float32(dk))
	for t := range T {
		p := qkv[t]
		for ch := range C {
			taps := g.Conv[ch*K : (ch+1)*K]
			var acc float32
			for j := 0; j < K-1; j++ {
				acc += taps[j] * window[j*C+ch]
			}
			acc += taps[K-1] * p[ch]
			u[ch] = f32.Silu(acc)
		}
		copy(window, window[C:])
		copy(window[(K-2)*C:], p)

		q, k, v := u[:hk*dk], u[hk*dk:2*hk*dk], u[2*hk*dk:]
		for head := range hk {
			f32.L2Norm(q[head*dk:(head+1)*dk], qScale)
			f32.L2Norm(k[head*dk:(head+1)*dk], 1)
		}
		parallelFor(hv, func(head int) {
			kh := head / (hv / hk)
			qh, kvec := q[kh*dk:(kh+1)*dk], k[kh*dk:(kh+1)*dk]
			beta := f32.Sigmoid(bs[t][head])
			decay := float32(math.Exp(float64(-float32(math.Exp(float64(g.ALog[head]))) * f32.Softplus(as[t][head]+g.DtBias[head]))))
			st := S[head*dk*dv : (head+1)*dk*dv]
			read := make([]float32, dv)
			for kk := range dk {
				row := st[kk*dv : (kk+1)*dv]
				kv := kvec[kk]
				for j := range row {
					row[j] *= decay
					read[j] += row[j] * kv
				}
			}
			delta := read // reuse: delta = β(v − read)
			vh := v[head*dv : (head+1)*dv]
			for j := range delta {
				delta[j] = (vh[j] - read[j]) * beta
			}
			o := y[t][head*dv : (head+1)*dv]
			for kk := range dk {
				row := st[kk*dv : (kk+1)*dv]
				kv, qv := kvec[kk], qh[kk]
				for j := range row {
					row[j] += kv * delta[j]
					o[j] += row[j] * qv
				}
			}
			f32.GatedNorm(o, z[t][head*dv:(head+1)*dv], g.Norm, c.RMSNormEps)
		})
	}
	out := rows(T, c.HiddenSize)
	quant.MatMul(g.OutProj, out, prepared(y))
	return out
}

// attention is the gated full-attention mixer with q/k RMSNorm, partial multimodal RoPE at the
// tokens' positions pos (time, height, width rows) and a KV cache.
func (m *Model) attention(s *State, li int, a *model.Attention, in []*quant.Input, pos [3][]int) [][]float32 {
	c := m.cfg
	T := len(in)
	nh, nkv, hd := c.NumHeads, c.NumKVHeads, c.HeadDim
	qg, k, v := rows(T, nh*2*hd), rows(T, nkv*hd), rows(T, nkv*hd)
	quant.MatMul(a.Q, qg, in)
	quant.MatMul(a.K, k, in)
	quant.MatMul(a.V, v, in)
	pos0 := s.Pos
	for t := range T {
		for j := range nkv {
			kh := k[t][j*hd : (j+1)*hd]
			f32.RMSNorm(kh, kh, a.KNorm, c.RMSNormEps)
			m.rope(kh, pos, t)
		}
		s.k[li] = append(s.k[li], k[t]...)
		s.v[li] = append(s.v[li], v[t]...)
	}
	keys, vals := s.k[li], s.v[li]
	o := rows(T, nh*hd)
	scale := f32.Rsqrt(float32(hd))
	stride := nkv * hd
	for t := range T {
		n := pos0 + t + 1 // causal: positions 0..pos
		parallelFor(nh, func(head int) {
			q := append([]float32(nil), qg[t][head*2*hd:head*2*hd+hd]...)
			gate := qg[t][head*2*hd+hd : (head+1)*2*hd]
			f32.RMSNorm(q, q, a.QNorm, c.RMSNormEps)
			m.rope(q, pos, t)
			off := (head / (nh / nkv)) * hd
			scores := make([]float32, n)
			maxScore := float32(math.Inf(-1))
			for j := range n {
				scores[j] = f32.Dot(q, keys[j*stride+off:j*stride+off+hd]) * scale
				maxScore = max(maxScore, scores[j])
			}
			var sum float32
			for j := range scores {
				scores[j] = float32(math.Exp(float64(scores[j] - maxScore)))
				sum += scores[j]
			}
			out := o[t][head*hd : (head+1)*hd]
			for j, p := range scores {
				p /= sum
				vj := vals[j*stride+off : j*stride+off+hd]
				for d := range out {
					out[d] += p * vj[d]
				}
			}
			for d := range out {
				out[d] *= f32.Sigmoid(gate[d])
			}
		})
	}
	res := rows(T, c.HiddenSize)
	quant.MatMul(a.O, res, prepared(o))
	return res
}

// rope rotates the first RotaryDim dims of x (NeoX pairing: i with i+RotaryDim/2) for token t of
// pos: frequency i turns by the position on its axis (the three are equal for text).
func (m *Model) rope(x []float32, pos [3][]int, t int) {
	half := len(m.invFreq)
	for i, f := range m.invFreq {
		theta := float64(float32(pos[m.axis[i]][t]) * f)
		cos, sin := float32(math.Cos(theta)), float32(math.Sin(theta))
		a, b := x[i], x[i+half]
		x[i] = a*cos - b*sin
		x[i+half] = b*cos + a*sin
	}
}

// moe is the sparse MoE block: softmax router over all experts, top-k renormalised, experts in
// ascending id order (as HF accumulates), then the sigmoid-gated shared expert added last.
func (m *Model) moe(mo *model.MoE, in []*quant.Input) [][]float32 {
	c := m.cfg
	T, H, E, I := len(in), c.HiddenSize, c.NumExperts, c.MoEIntermediate
	logits := rows(T, E)
	quant.MatMul(mo.Router, logits, in)
	type use struct {
		token  int
		weight float32
	}
	byExpert := make([][]use, E)
	for t := range T {
		probs := softmax(logits[t])
		top := topK(probs, c.TopK)
		var sum float32
		for _, e := range top {
			sum += probs[e]
		}
		for _, e := range top {
			byExpert[e] = append(byExpert[e], use{t, probs[e] / sum})
		}
	}
	y := rows(T, H)
	for e, uses := range byExpert {
		if len(uses) == 0 {
			continue
		}
		sub := make([]*quant.Input, len(uses))
		for j, u := range uses {
			sub[j] = in[u.token]
		}
		act := swiglu(mo.Gate.RowRange(e*I, I), mo.Up.RowRange(e*I, I), sub)
		down := rows(len(uses), H)
		quant.MatMul(mo.Down.RowRange(e*H, H), down, prepared(act))
		for j, u := range uses {
			for d, val := range down[j] {
				y[u.token][d] += val * u.weight
			}
		}
	}
	shared := rows(T, H)
	quant.MatMul(mo.SharedDown, shared, prepared(swiglu(mo.SharedGate, mo.SharedUp, in)))
	gate := rows(T, 1)
	quant.MatMul(mo.SharedExpertGate, gate, in)
	for t := range T {
		sg := f32.Sigmoid(gate[t][0])
		for d, val := range shared[t] {
			y[t][d] += sg * val
		}
	}
	return y
}

// swiglu returns f32.Silu(gate·x) ⊙ (up·x) for each input.
func swiglu(gate, up *quant.Matrix, in []*quant.Input) [][]float32 {
	g, u := rows(len(in), gate.Rows), rows(len(in), up.Rows)
	quant.MatMul(gate, g, in)
	quant.MatMul(up, u, in)
	for t := range g {
		for i := range g[t] {
			g[t][i] = f32.Silu(g[t][i]) * u[t][i]
		}
	}
	return g
}

// --- small float32 helpers -------------------------------------------------------------------

func rows(n, width int) [][]float32 {
	flat := make([]float32, n*width)
	out := make([][]float32, n)
	for i := range out {
		out[i] = flat[i*width : (i+1)*width : (i+1)*width]
	}
	return out
}

func inputs(n, cols int) []*quant.Input {
	out := make([]*quant.Input, n)
	for i := range out {
		out[i] = quant.NewInput(cols)
	}
	return out
}

func prepared(xs [][]float32) []*quant.Input {
	in := inputs(len(xs), len(xs[0]))
	for i, x := range xs {
		in[i].Set(x)
	}
	return in
}

// normInto sets h = RMSNorm(x)·w row by row and prepares the matvec inputs from h.
func normInto(h [][]float32, in []*quant.Input, x [][]float32, w []float32, eps float32) {
	for t := range x {
		f32.RMSNorm(h[t], x[t], w, eps)
		in[t].Set(h[t])
	}
}

func addRows(x, d [][]float32) {
	for t := range x {
		for i, v := range d[t] {
			x[t][i] += v
		}
	}
}

func softmax(x []float32) []float32 {
	out := make([]float32, len(x))
	m := float32(math.Inf(-1))
	for _, v := range x {
		m = max(m, v)
	}
	var sum float32
	for i, v := range x {
		out[i] = float32(math.Exp(float64(v - m)))
		sum += out[i]
	}
	for i := range out {
		out[i] /= sum
	}
	return out
}

// topK returns the indices of the k largest values, largest first; ties go to the lower index.
func topK(p []float32, k int) []int {
	idx := make([]int, 0, k)
	taken := make([]bool, len(p))
	for range k {
		best := -1
		for i, v := range p {
			if !taken[i] && (best < 0 || v > p[best]) {
				best = i
			}
		}
		taken[best] = true
		idx = append(idx, best)
	}
	return idx
}

// parallelFor runs f(0..n-1) across the available cores.
func parallelFor(n int, f func(i int)) {
	workers := min(runtime.GOMAXPROCS(0), n)
	if workers <= 1 {
		for i := range n {
			f(i)
		}
		return
	}
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func(lo, hi int) {
			defer wg.Done()
			for i := lo; i < hi; i++ {
				f(i)
			}
		}(w*n/workers, (w+1)*n/workers)
	}
	wg.Wait()
}

// Session is one sequence on the CPU backend.
type Session struct {
	m       *Model
	st      *State
	pending *verifying // a Verify awaiting its Keep
}

// NewSession starts an empty sequence.
func (m *Model) NewSession() backend.Session { return &Session{m: m, st: m.NewState()} }

// Name identifies the backend.
func (m *Model) Name() string { return "cpu" }

// Config is the model's configuration.
func (m *Model) Config() *config.Config { return m.cfg }

// Describe is the CPU reference's description: the model's whole context, no memory limit of its
// own on the sequences at once, prompts token by token, images when the checkpoint has a tower.
func (m *Model) Describe() backend.Description {
	d := backend.Description{Name: m.Name(), Context: m.cfg.MaxPositions, Vision: m.W.Vision != nil, VisionWhy: m.cfg.VisionOff}
	if d.Vision {
		d.VisionWhy = ""
	}
	return d
}

// EncodeImage runs the float32 tower (built on first use: its float32 copy of the weights is
// made only when an image comes).
func (m *Model) EncodeImage(px *vision.Pixels) ([][]float32, error) {
	if m.W.Vision == nil {
		return nil, fmt.Errorf("cpu: no vision tower: %s", m.cfg.VisionOff)
	}
	m.towerOnce.Do(func() { m.tower = vision.NewTower(m.cfg.Vision, m.W.Vision) })
	return m.tower.Encode(px), nil
}

// StepRows runs rows one after another (backend.StepEach): the reference has no batched step.
func (m *Model) StepRows(rows []backend.Row) []backend.RowResult { return backend.StepEach(rows) }

// Batched is zero: no step runs several rows at once.
func (m *Model) Batched() (steps, rows int64) { return 0, 0 }

// Fits holds for any sequences: each session's memory is its own, grown as it goes.
func (m *Model) Fits([]int) bool { return true }

// Forward feeds tokens at the session's next positions; see Model.Forward.
func (s *Session) Forward(tokens []int, all bool) ([][]float32, error) {
	return s.m.Forward(s.st, tokens, all)
}

// ForwardImages feeds a piece of prompt holding images; see Model.ForwardImages.
func (s *Session) ForwardImages(tokens []int, images []backend.Image, all bool) ([][]float32, error) {
	return s.m.ForwardImages(s.st, tokens, images, all)
}

// Pos is the number of tokens the session has consumed.
func (s *Session) Pos() int { return s.st.Pos }

// Save copies the session's state (conv windows, DeltaNet state, KV rows) into a snapshot: the
// hybrid model's recurrent state cannot be truncated, so reuse needs exact copies. The copy lives
// outside the Go heap (internal/hostmem) until Close.
func (s *Session) Save() (backend.Snapshot, error) {
	sn, err := s.m.newSnapshot(s.st.Pos)
	if err != nil {
		return nil, err
	}
	for i, v := range s.st.parts() {
		copy(sn.parts[i], *v)
	}
	sn.delta = s.st.Delta
	return sn, nil
}

// Close does nothing: the session's memory is Go memory.
func (s *Session) Close() {}

type snapshot struct {
	m     *Model
	pos   int
	delta int // the state's rotary delta (State.Delta)
	mem   []byte
	parts [][]float32 // views of mem, in State.parts order
}

// newSnapshot allocates an empty snapshot of pos positions.
func (m *Model) newSnapshot(pos int) (*snapshot, error) {
	shape := m.stateAt(pos)
	var n int
	for _, v := range shape.parts() {
		n += len(*v)
	}
	mem, err := hostmem.Alloc(4 * int64(n))
	if err != nil {
		return nil, fmt.Errorf("cpu: %d bytes for a snapshot: %w", 4*n, err)
	}
	sn := &snapshot{m: m, pos: pos, mem: mem}
	floats := unsafe.Slice((*float32)(unsafe.Pointer(unsafe.SliceData(mem))), n)
	for _, v := range shape.parts() {
		sn.parts = append(sn.parts, floats[:len(*v):len(*v)])
		floats = floats[len(*v):]
	}
	return sn, nil
}

// stateAt is an empty state with room for pos positions of K and V rows.
func (m *Model) stateAt(pos int) *State {
	st := m.NewState()
	st.Pos = pos
	kv := m.cfg.NumKVHeads * m.cfg.HeadDim
	for i := range st.k {
		if st.conv[i] == nil { // an attention layer
			st.k[i], st.v[i] = make([]float32, pos*kv), make([]float32, pos*kv)
		}
	}
	return st
}

func (sn *snapshot) Pos() int     { return sn.pos }
func (sn *snapshot) Bytes() int64 { return int64(len(sn.mem)) }

// Close frees the snapshot's memory.
func (sn *snapshot) Close() {
	sn.parts = nil
	hostmem.Free(sn.mem)
	sn.mem = nil
}

// Restore starts a session from a copy of the snapshot's state.
func (sn *snapshot) Restore() (backend.Session, error) {
	if sn.parts == nil {
		return nil, errors.New("cpu: restore of a closed snapshot")
	}
	st := sn.m.stateAt(sn.pos)
	for i, v := range st.parts() {
		copy(*v, sn.parts[i])
	}
	st.Delta = sn.delta
	return &Session{m: sn.m, st: st}, nil
}
