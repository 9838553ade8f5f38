// Package model loads a Qwen3.5/3.6-MoE MLX checkpoint into typed weights that point into the
// memory-mapped files (no copies of the big tensors), shared by every backend.
package model

import (
	"cmp"
	"fmt"
	"sort"
	"strings"

	"github.com/lilyformac/lily/engine/config"
	"github.com/lilyformac/lily/engine/quant"
	"github.com/lilyformac/lily/engine/safetensors"
)

// Weights is a loaded checkpoint. Quantized matrices view the mapped files; the small vectors
// (norms, conv taps, gates' parameters) are converted to float32 once.
type Weights struct {
	Config    *config.Config
	Embed     *quant.Matrix // [vocab, hidden]
	LMHead    *quant.Matrix // [vocab, hidden]
	FinalNorm []float32     // stored gain (MLX already holds 1+w)
	Layers    []Layer
	Vision    *Vision // nil: no tower loaded (Config.VisionOff says why)

	ckpt *safetensors.Checkpoint
}

// Layer is one decoder layer: a token mixer (exactly one of GDN, Attn) and the MoE block.
type Layer struct {
	Kind      config.LayerKind
	InputNorm []float32
	PostNorm  []float32
	GDN       *GDN
	Attn      *Attention
	MoE       MoE
}

// GDN holds a Gated DeltaNet layer.
type GDN struct {
	InProjQKV *quant.Matrix // [2·Hk·Dk + Hv·Dv, hidden], channels [q | k | v]
	InProjZ   *quant.Matrix // [Hv·Dv, hidden]
	InProjB   *quant.Matrix // [Hv, hidden]
	InProjA   *quant.Matrix // [Hv, hidden]
	OutProj   *quant.Matrix // [hidden, Hv·Dv]
	Conv      []float32     // [channels][kernel]: tap j multiplies the input j-(kernel-1) steps back
	DtBias    []float32     // [Hv]
	ALog      []float32     // [Hv]
	Norm      []float32     // [Dv], plain gain of the gated RMSNorm
}

// Attention holds a gated full-attention layer.
type Attention struct {
	Q     *quant.Matrix // [heads·2·headDim, hidden]: per head [query | gate]
	K, V  *quant.Matrix // [kvHeads·headDim, hidden]
	O     *quant.Matrix // [hidden, heads·headDim]
	QNorm []float32     // [headDim] stored gain
	KNorm []float32
}

// MoE holds the router, the stacked routed experts and the gated shared expert.
type MoE struct {
	Router           *quant.Matrix // [experts, hidden], 8-bit in the production checkpoint
	Gate, Up         *quant.Matrix // [experts·moeI, hidden]: expert e owns rows e·moeI ..
	Down             *quant.Matrix // [experts·hidden, moeI]: expert e owns rows e·hidden ..
	SharedGate       *quant.Matrix // [sharedI, hidden]
	SharedUp         *quant.Matrix
	SharedDown       *quant.Matrix // [hidden, sharedI]
	SharedExpertGate *quant.Matrix // [1, hidden], 8-bit in the production checkpoint
}

// Close unmaps the checkpoint files; the Weights must not be used afterwards.
func (w *Weights) Close() error {
	if w.ckpt == nil {
		return nil
	}
	return w.ckpt.Close()
}

// ignoredPrefixes are tensors Lily deliberately does not load: the multi-token-prediction head.
var ignoredPrefixes = []string{"mtp.", "model.mtp.", "language_model.mtp.", "language_model.model.mtp."}

// ignored says whether an unused tensor is one Lily leaves alone: the MTP head, and the vision
// tower when it is not loaded.
func ignored(name string, vision bool) bool {
	for _, p := range ignoredPrefixes {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	return !vision && visionIgnored(name)
}

// Load reads config.json and the safetensors files of dir and checks every tensor.
func Load(dir string) (*Weights, error) { return LoadWith(dir, Options{}) }

// Options change what Load takes from a checkpoint.
type Options struct {
	// NoVision leaves the vision tower out (serve's --vision off, or auto's choice): its weights
	// are not checked or used, and images become placeholders. NoVisionWhy says why, as
	// Config.VisionOff ("": --vision off).
	NoVision    bool
	NoVisionWhy string
}

// LoadWith is Load with options.
func LoadWith(dir string, o Options) (*Weights, error) {
	cfg, err := config.Load(dir)
	if err != nil {
		return nil, err
	}
	if o.NoVision && cfg.Vision != nil {
		cfg.Vision, cfg.VisionOff = nil, cmp.Or(o.NoVisionWhy, "vision is off (--vision off)")
	}
	ck, err := safetensors.OpenDir(dir)
	if err != nil {
		return nil, err
	}
	w, err := FromCheckpoint(cfg, ck)
	if err != nil {
		ck.Close()
		return nil, err
	}
	return w, nil
}

// FromCheckpoint builds Weights from an opened checkpoint; the Weights own ck afterwards.
func FromCheckpoint(cfg *config.Config, ck *safetensors.Checkpoint) (*Weights, error) {
	l := &loader{ck: ck, cfg: cfg, used: map[string]bool{}}
	switch {
	case has(ck, "language_model.model.embed_tokens.weight"):
		l.prefix, l.head = "language_model.model.", "language_model.lm_head"
	case has(ck, "model.embed_tokens.weight"):
		l.prefix, l.head = "model.", "lm_head"
	default:
		return nil, fmt.Errorf("checkpoint: missing tensor language_model.model.embed_tokens.weight (or model.embed_tokens.weight): not a Qwen3.5/3.6 MLX checkpoint")
	}
	c := cfg
	H := c.HiddenSize
	w := &Weights{Config: cfg, ckpt: ck}
	w.Embed = l.linear(l.prefix+"embed_tokens", c.VocabSize, H)
	w.LMHead = l.linear(l.head, c.VocabSize, H)
	w.FinalNorm = l.vector(l.prefix+"norm.weight", H)
	for i, kind := range c.Layers {
		p := fmt.Sprintf("%slayers.%d.", l.prefix, i)
		ly := Layer{Kind: kind}
		ly.InputNorm = l.vector(p+"input_layernorm.weight", H)
		ly.PostNorm = l.vector(p+"post_attention_layernorm.weight", H)
		if kind == config.LinearAttention {
			hv, dv := c.LinearValueHeads, c.LinearValueDim
			channels := 2*c.LinearKeyHeads*c.LinearKeyDim + hv*dv
			a := p + "linear_attn."
			ly.GDN = &GDN{
				InProjQKV: l.linear(a+"in_proj_qkv", channels, H),
				InProjZ:   l.linear(a+"in_proj_z", hv*dv, H),
				InProjB:   l.linear(a+"in_proj_b", hv, H),
				InProjA:   l.linear(a+"in_proj_a", hv, H),
				OutProj:   l.linear(a+"out_proj", H, hv*dv),
				Conv:      l.conv(a+"conv1d.weight", channels, c.ConvKernel),
				DtBias:    l.vector(a+"dt_bias", hv),
				ALog:      l.vector(a+"A_log", hv),
				Norm:      l.vector(a+"norm.weight", dv),
			}
		} else {
			a := p + "self_attn."
			ly.Attn = &Attention{
				Q:     l.linear(a+"q_proj", c.NumHeads*c.HeadDim*2, H),
				K:     l.linear(a+"k_proj", c.NumKVHeads*c.HeadDim, H),
				V:     l.linear(a+"v_proj", c.NumKVHeads*c.HeadDim, H),
				O:     l.linear(a+"o_proj", H, c.NumHeads*c.HeadDim),
				QNorm: l.vector(a+"q_norm.weight", c.HeadDim),
				KNorm: l.vector(a+"k_norm.weight", c.HeadDim),
			}
		}
		m := p + "mlp."
		E, I := c.NumExperts, c.MoEIntermediate
		ly.MoE = MoE{
			Router:           l.linear(m+"gate", E, H),
			Gate:             l.experts(m+"switch_mlp.gate_proj", E, I, H),
			Up:               l.experts(m+"switch_mlp.up_proj", E, I, H),
			Down:             l.experts(m+"switch_mlp.down_proj", E, H, I),
			SharedGate:       l.linear(m+"shared_expert.gate_proj", c.SharedIntermed, H),
			SharedUp:         l.linear(m+"shared_expert.up_proj", c.SharedIntermed, H),
			SharedDown:       l.linear(m+"shared_expert.down_proj", H, c.SharedIntermed),
			SharedExpertGate: l.linear(m+"shared_expert_gate", 1, H),
		}
		w.Layers = append(w.Layers, ly)
		if l.err != nil {
			return nil, l.err
		}
	}
	l.vision(w)
	if l.err != nil {
		return nil, l.err
	}
	var left []string
	for _, n := range ck.Names() {
		if !l.used[n] && !ignored(n, w.Vision != nil) {
			left = append(left, n)
		}
	}
	if len(left) > 0 {
		sort.Strings(left)
		more := ""
		if len(left) > 8 {
			more = fmt.Sprintf(" and %d more", len(left)-8)
			left = left[:8]
		}
		return nil, fmt.Errorf("checkpoint: unknown tensors (not used by the model, not on the ignore list): %s%s", strings.Join(left, ", "), more)
	}
	return w, nil
}

func has(ck *safetensors.Checkpoint, name string) bool {
	_, ok := ck.Tensor(name)
	return ok
}

// loader takes tensors out of a checkpoint, checking names, dtypes and shapes, and records
// the first error (so the construction code above reads as a plain description of the model).
type loader struct {
	ck           *safetensors.Checkpoint
	cfg          *config.Config
	prefix, head string
	used         map[string]bool
	err          error
}

func (l *loader) fail(format string, args ...any) {
	if l.err == nil {
		l.err = fmt.Errorf("checkpoint: "+format, args...)
	}
}

func (l *loader) tensor(name string, dtypes ...safetensors.DType) *safetensors.Tensor {
	if l.err != nil {
		return nil
	}
	t, ok := l.ck.Tensor(name)
	if !ok {
		l.fail("missing tensor %s", name)
		return nil
	}
	l.used[name] = true
	for _, d := range dtypes {
		if t.DType == d {
			return t
		}
	}
	l.fail("tensor %s: dtype %s, expected %s", name, t.DType, joinDTypes(dtypes))
	return nil
}

func joinDTypes(ds []safetensors.DType) string {
	s := make([]string, len(ds))
	for i, d := range ds {
		s[i] = string(d)
	}
	return strings.Join(s, " or ")
}

func shapeEq(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// linear loads module.{weight,scales,biases} as a [rows, cols] quantized matrix.
func (l *loader) linear(module string, rows, cols int) *quant.Matrix {
	return l.quantized(module, nil, rows, cols)
}

// experts loads a stacked [n, rows, cols] expert tensor as one [n·rows, cols] matrix.
func (l *loader) experts(module string, n, rows, cols int) *quant.Matrix {
	return l.quantized(module, []int{n}, rows, cols)
}

func (l *loader) quantized(module string, lead []int, rows, cols int) *quant.Matrix {
	wt := l.tensor(module+".weight", safetensors.U32)
	st := l.tensor(module+".scales", safetensors.BF16)
	bt := l.tensor(module+".biases", safetensors.BF16)
	if l.err != nil {
		return nil
	}
	want := l.cfg.Quant.For(strings.TrimSuffix(module, ".weight"))
	if l.cfg.Profile == config.ProfileProduction {
		// Lily's kernels assume the checkpoint's layout: 8-bit router and shared-expert gate, 4-bit elsewhere.
		rule := 4
		if strings.HasSuffix(module, ".mlp.gate") || strings.HasSuffix(module, ".shared_expert_gate") {
			rule = 8
		}
		if want.Bits != rule {
			l.fail("%s: config quantization says %d-bit, expected %d-bit for this module in Qwen3.6-35B-A3B", module, want.Bits, rule)
			return nil
		}
	}
	groups := cols / want.GroupSize
	gshape := append(append([]int{}, lead...), rows, groups)
	if !shapeEq(st.Shape, gshape) {
		l.fail("tensor %s.scales: shape %v, expected %v (%d outputs × %d inputs in groups of %d)", module, st.Shape, gshape, rows, cols, want.GroupSize)
		return nil
	}
	if !shapeEq(bt.Shape, gshape) {
		l.fail("tensor %s.biases: shape %v, expected %v", module, bt.Shape, gshape)
		return nil
	}
	ws := wt.Shape
	if len(ws) != len(gshape) || !shapeEq(ws[:len(ws)-1], gshape[:len(gshape)-1]) || ws[len(ws)-1] == 0 {
		l.fail("tensor %s.weight: shape %v, expected %v with packed columns", module, ws, gshape[:len(gshape)-1])
		return nil
	}
	// The bit width is what the packed row length implies for cols inputs.
	packed := ws[len(ws)-1]
	if packed*32%cols != 0 || packed*32/cols != want.Bits {
		found := fmt.Sprintf("%d×32/%d = %.3g bits", packed, cols, float64(packed*32)/float64(cols))
		l.fail("tensor %s.weight: bit width mismatch: %d packed uint32 columns for %d inputs is %s, config expects %d-bit (shape %v, expected [..., %d])",
			module, packed, cols, found, want.Bits, ws, cols*want.Bits/32)
		return nil
	}
	n := rows
	for _, d := range lead {
		n *= d
	}
	m := &quant.Matrix{Rows: n, Cols: cols, Bits: want.Bits, Words: wt.Uint32s(), Scales: st.Uint16s(), Biases: bt.Uint16s()}
	if err := m.Validate(); err != nil {
		l.fail("%s: %v", module, err)
		return nil
	}
	return m
}

// vector loads a small 1-D bf16 or f32 tensor as float32.
func (l *loader) vector(name string, n int) []float32 {
	t := l.tensor(name, safetensors.BF16, safetensors.F32)
	if l.err != nil {
		return nil
	}
	if !shapeEq(t.Shape, []int{n}) {
		l.fail("tensor %s: shape %v, expected [%d]", name, t.Shape, n)
		return nil
	}
	return toF32(t)
}

// conv loads the depthwise conv taps, MLX [C, K, 1] or HF [C, 1, K], as [C][K].
func (l *loader) conv(name string, channels, kernel int) []float32 {
	t := l.tensor(name, safetensors.BF16, safetensors.F32)
	if l.err != nil {
		return nil
	}
	if !shapeEq(t.Shape, []int{channels, kernel, 1}) && !shapeEq(t.Shape, []int{channels, 1, kernel}) {
		l.fail("tensor %s: shape %v, expected [%d %d 1] (MLX) or [%d 1 %d]", name, t.Shape, channels, kernel, channels, kernel)
		return nil
	}
	return toF32(t) // both layouts are [C][K] in memory
}

func toF32(t *safetensors.Tensor) []float32 {
	if t.DType == safetensors.F32 {
		return append([]float32(nil), t.Float32s()...)
	}
	return quant.BF16sToF32(t.Uint16s())
}
