// Package config reads and validates a Qwen3.5/3.6-MoE checkpoint's config.json against the two
// profiles Lily runs: the exact Qwen3.6-35B-A3B numbers and the same architecture at test sizes.
package config

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strconv"
)

// LayerKind says which token mixer a decoder layer uses.
type LayerKind int

const (
	LinearAttention LayerKind = iota // Gated DeltaNet
	FullAttention                    // gated softmax attention with a KV cache
)

func (k LayerKind) String() string {
	if k == FullAttention {
		return "full_attention"
	}
	return "linear_attention"
}

// Profile names the set of rules a config was validated against.
type Profile string

const (
	ProfileProduction Profile = "qwen3.6-35b-a3b" // exact production numbers
	ProfileTest       Profile = "test-family"     // same architecture, small sizes (tests, demo)
)

// Quant describes MLX affine quantization: defaults plus per-module overrides.
type Quant struct {
	GroupSize int
	Bits      int
	Mode      string
	Overrides map[string]QuantParams // module path (e.g. "language_model.model.layers.0.mlp.gate") -> params
}

// QuantParams is one module's quantization.
type QuantParams struct {
	GroupSize int
	Bits      int
}

// For returns the quantization of a module path, falling back to the defaults.
func (q Quant) For(module string) QuantParams {
	if p, ok := q.Overrides[module]; ok {
		return p
	}
	return QuantParams{GroupSize: q.GroupSize, Bits: q.Bits}
}

// Config is the validated text-model configuration.
type Config struct {
	Profile Profile
	Wrapper bool // multimodal wrapper (model_type qwen3_5_moe with text_config)

	VocabSize        int
	HiddenSize       int
	NumLayers        int
	Layers           []LayerKind
	NumHeads         int
	NumKVHeads       int
	HeadDim          int
	RotaryDim        int
	RopeTheta        float64
	LinearKeyHeads   int
	LinearValueHeads int
	LinearKeyDim     int
	LinearValueDim   int
	ConvKernel       int
	NumExperts       int
	TopK             int
	MoEIntermediate  int
	SharedIntermed   int
	RMSNormEps       float32
	MaxPositions     int
	EOSTokenIDs      []int
	Quant            Quant
	MRoPESection     [3]int // interleaved multimodal rotary sections (MRoPEAxis)

	// Vision is the vision tower's configuration (nil: none to run, VisionOff says why).
	Vision    *Vision
	VisionOff string
}

// FieldError is a config value that Lily does not accept.
type FieldError struct {
	Field    string
	Expected string
	Found    string
}

func (e *FieldError) Error() string {
	return fmt.Sprintf("config.json: %s: expected %s, found %s", e.Field, e.Expected, e.Found)
}

// Load reads dir/config.json (and dir/generation_config.json for extra stop ids, if present).
func Load(dir string) (*Config, error) {
	data, err := os.ReadFile(filepath.Join(dir, "config.json"))
	if err != nil {
		return nil, fmt.Errorf("config.json: %w", err)
	}
	cfg, err := Parse(data)
	if err != nil {
		return nil, err
	}
	if gen, err := os.ReadFile(filepath.Join(dir, "generation_config.json")); err == nil {
		var g map[string]any
		if err := json.Unmarshal(gen, &g); err != nil {
			return nil, fmt.Errorf("generation_config.json: %w", err)
		}
		ids, err := tokenIDs(g, "generation_config.json: eos_token_id")
		if err != nil {
			return nil, err
		}
		for _, id := range ids {
			if id >= cfg.VocabSize {
				return nil, fmt.Errorf("generation_config.json: eos_token_id: expected ids in [0, %d), found %d", cfg.VocabSize, id)
			}
		}
		cfg.EOSTokenIDs = unionSorted(cfg.EOSTokenIDs, ids)
	}
	return cfg, nil
}

// Parse decodes and validates config.json contents.
func Parse(data []byte) (*Config, error) {
	var top map[string]any
	if err := json.Unmarshal(data, &top); err != nil {
		return nil, fmt.Errorf("config.json: invalid JSON: %w", err)
	}
	r := &reader{}
	cfg := &Config{}
	text := top
	textPrefix := ""
	switch mt, _ := top["model_type"].(string); mt {
	case "qwen3_5_moe":
		t, ok := top["text_config"].(map[string]any)
		if !ok {
			return nil, &FieldError{"text_config", "an object (model_type qwen3_5_moe wraps the text model)", describe(top["text_config"])}
		}
		text, textPrefix, cfg.Wrapper = t, "text_config.", true
	case "qwen3_5_moe_text":
	default:
		return nil, &FieldError{"model_type", `"qwen3_5_moe" (with text_config) or "qwen3_5_moe_text"`, describe(top["model_type"])}
	}
	r.obj, r.prefix = text, textPrefix

	cfg.VocabSize = r.int("vocab_size")
	cfg.HiddenSize = r.int("hidden_size")
	cfg.NumLayers = r.int("num_hidden_layers")
	cfg.NumHeads = r.int("num_attention_heads")
	cfg.NumKVHeads = r.int("num_key_value_heads")
	cfg.HeadDim = r.int("head_dim")
	cfg.LinearKeyHeads = r.int("linear_num_key_heads")
	cfg.LinearValueHeads = r.int("linear_num_value_heads")
	cfg.LinearKeyDim = r.int("linear_key_head_dim")
	cfg.LinearValueDim = r.int("linear_value_head_dim")
	cfg.ConvKernel = r.int("linear_conv_kernel_dim")
	cfg.NumExperts = r.int("num_experts")
	cfg.TopK = r.int("num_experts_per_tok")
	cfg.MoEIntermediate = r.int("moe_intermediate_size")
	cfg.SharedIntermed = r.int("shared_expert_intermediate_size")
	cfg.RMSNormEps = float32(r.float("rms_norm_eps"))
	cfg.MaxPositions = r.optInt("max_position_embeddings", 0)
	r.wantString("hidden_act", "silu", true)
	r.wantBool("tie_word_embeddings", false, top)
	r.wantBool("attn_output_gate", true, nil)
	r.wantBool("norm_topk_prob", true, nil)
	r.wantBool("attention_bias", false, nil)
	if err := r.err(); err != nil {
		return nil, err
	}
	var err error
	if cfg.Layers, err = layerKinds(text, textPrefix, cfg.NumLayers); err != nil {
		return nil, err
	}
	if err := rope(text, textPrefix, cfg); err != nil {
		return nil, err
	}
	eosField, eosObj := textPrefix+"eos_token_id", text
	if _, ok := top["eos_token_id"]; ok && cfg.Wrapper { // the wrapper's value overrides text_config's
		eosField, eosObj = "eos_token_id", top
	}
	eos, err := tokenIDs(eosObj, eosField)
	if err != nil {
		return nil, err
	}
	cfg.EOSTokenIDs = unionSorted(nil, eos)
	if cfg.Quant, err = quantization(top); err != nil {
		return nil, err
	}
	if err := validate(cfg, textPrefix); err != nil {
		return nil, err
	}
	cfg.Vision, cfg.VisionOff = vision(top, cfg)
	for _, id := range cfg.EOSTokenIDs {
		if id >= cfg.VocabSize {
			return nil, &FieldError{eosField, fmt.Sprintf("ids in [0, %d)", cfg.VocabSize), fmt.Sprint(id)}
		}
	}
	return cfg, nil
}

// Production is Qwen3.6-35B-A3B's text configuration, the one place its numbers are written:
// a checkpoint's config.json is validated against it, and the decode plan, lily bench --plan and
// lily doctor size the model from it without a checkpoint.
func Production() *Config {
	c := &Config{
		Profile:   ProfileProduction,
		VocabSize: 248320, HiddenSize: 2048, NumLayers: 40, NumHeads: 16, NumKVHeads: 2, HeadDim: 256,
		RotaryDim: 64, RopeTheta: 10_000_000,
		LinearKeyHeads: 16, LinearValueHeads: 32, LinearKeyDim: 128, LinearValueDim: 128, ConvKernel: 4,
		NumExperts: 256, TopK: 8, MoEIntermediate: 512, SharedIntermed: 512,
		RMSNormEps: 1e-6, MaxPositions: 262144, MRoPESection: [3]int{11, 11, 10},
		Vision: ProductionVision(),
	}
	for i := range c.NumLayers {
		k := LinearAttention
		if i%4 == 3 { // every 4th layer is full attention
			k = FullAttention
		}
		c.Layers = append(c.Layers, k)
	}
	return c
}

// production are the fields a production checkpoint must match exactly.
var production = []struct {
	field string
	get   func(*Config) int
}{
	{"vocab_size", func(c *Config) int { return c.VocabSize }},
	{"num_hidden_layers", func(c *Config) int { return c.NumLayers }},
	{"num_attention_heads", func(c *Config) int { return c.NumHeads }},
	{"num_key_value_heads", func(c *Config) int { return c.NumKVHeads }},
	{"head_dim", func(c *Config) int { return c.HeadDim }},
	{"linear_num_key_heads", func(c *Config) int { return c.LinearKeyHeads }},
	{"linear_num_value_heads", func(c *Config) int { return c.LinearValueHeads }},
	{"linear_key_head_dim", func(c *Config) int { return c.LinearKeyDim }},
	{"linear_value_head_dim", func(c *Config) int { return c.LinearValueDim }},
	{"linear_conv_kernel_dim", func(c *Config) int { return c.ConvKernel }},
	{"num_experts", func(c *Config) int { return c.NumExperts }},
	{"num_experts_per_tok", func(c *Config) int { return c.TopK }},
	{"moe_intermediate_size", func(c *Config) int { return c.MoEIntermediate }},
	{"shared_expert_intermediate_size", func(c *Config) int { return c.SharedIntermed }},
	{"rotary dim (head_dim × partial_rotary_factor)", func(c *Config) int { return c.RotaryDim }},
}

// Test-family limits: small enough for tests and the embedded demo, same kernels' assumptions.
const maxTestHidden = 1024

func validate(c *Config, p string) error {
	switch {
	case c.HiddenSize == Production().HiddenSize:
		want := Production()
		c.Profile = ProfileProduction
		for _, f := range production {
			if got, w := f.get(c), f.get(want); got != w {
				return &FieldError{p + f.field, fmt.Sprintf("%d (Qwen3.6-35B-A3B)", w), fmt.Sprint(got)}
			}
		}
		for i, k := range c.Layers {
			if k != want.Layers[i] {
				return &FieldError{fmt.Sprintf("%slayer_types[%d]", p, i), want.Layers[i].String() + " (Qwen3.6-35B-A3B: every 4th layer is full attention)", k.String()}
			}
		}
		if c.RopeTheta != want.RopeTheta {
			return &FieldError{p + "rope_parameters.rope_theta", strconv.FormatFloat(want.RopeTheta, 'f', -1, 64) + " (Qwen3.6-35B-A3B)", fmt.Sprint(c.RopeTheta)}
		}
		if c.RMSNormEps != want.RMSNormEps {
			return &FieldError{p + "rms_norm_eps", fmt.Sprintf("%g (Qwen3.6-35B-A3B)", want.RMSNormEps), fmt.Sprint(c.RMSNormEps)}
		}
	case c.HiddenSize > 0 && c.HiddenSize <= maxTestHidden:
		c.Profile = ProfileTest
		checks := []struct {
			field string
			ok    bool
			want  string
			got   int
		}{
			{"hidden_size", c.HiddenSize%64 == 0, "a multiple of 64 (quantization group)", c.HiddenSize},
			{"vocab_size", c.VocabSize > 0 && c.VocabSize <= 1<<20, "1..1048576", c.VocabSize},
			{"num_hidden_layers", c.NumLayers > 0 && c.NumLayers <= 64, "1..64 (test family)", c.NumLayers},
			{"num_attention_heads", c.NumHeads > 0, "> 0", c.NumHeads},
			{"num_key_value_heads", c.NumKVHeads > 0 && c.NumHeads%max(c.NumKVHeads, 1) == 0, "a divisor of num_attention_heads", c.NumKVHeads},
			{"head_dim", c.HeadDim > 0 && c.HeadDim%2 == 0 && (c.NumHeads*c.HeadDim)%64 == 0, "even, with num_attention_heads × head_dim a multiple of 64", c.HeadDim},
			{"rotary dim (head_dim × partial_rotary_factor)", c.RotaryDim > 0 && c.RotaryDim%2 == 0 && c.RotaryDim <= c.HeadDim, "even and at most head_dim", c.RotaryDim},
			{"linear_num_key_heads", c.LinearKeyHeads > 0, "> 0", c.LinearKeyHeads},
			{"linear_num_value_heads", c.LinearValueHeads > 0 && c.LinearValueHeads%max(c.LinearKeyHeads, 1) == 0, "a multiple of linear_num_key_heads", c.LinearValueHeads},
			{"linear_key_head_dim", c.LinearKeyDim > 0 && c.LinearKeyDim%32 == 0, "a multiple of 32", c.LinearKeyDim},
			{"linear_value_head_dim", c.LinearValueDim > 0 && c.LinearValueDim%32 == 0 && (c.LinearValueHeads*c.LinearValueDim)%64 == 0, "a multiple of 32, with value heads × value dim a multiple of 64", c.LinearValueDim},
			{"linear_conv_kernel_dim", c.ConvKernel == 4, "4", c.ConvKernel},
			{"num_experts", c.NumExperts > 0 && c.NumExperts <= 512, "1..512", c.NumExperts},
			{"num_experts_per_tok", c.TopK > 0 && c.TopK <= c.NumExperts, "1..num_experts", c.TopK},
			{"moe_intermediate_size", c.MoEIntermediate > 0 && c.MoEIntermediate%64 == 0, "a multiple of 64", c.MoEIntermediate},
			{"shared_expert_intermediate_size", c.SharedIntermed > 0 && c.SharedIntermed%64 == 0, "a multiple of 64", c.SharedIntermed},
		}
		for _, ch := range checks {
			if !ch.ok {
				return &FieldError{p + ch.field, ch.want, fmt.Sprint(ch.got)}
			}
		}
		if !(c.RMSNormEps > 0 && c.RMSNormEps < 1e-2) {
			return &FieldError{p + "rms_norm_eps", "a small positive number", fmt.Sprint(c.RMSNormEps)}
		}
		if !(c.RopeTheta > 1) {
			return &FieldError{p + "rope_parameters.rope_theta", "> 1", fmt.Sprint(c.RopeTheta)}
		}
	default:
		return &FieldError{p + "hidden_size", fmt.Sprintf("2048 (Qwen3.6-35B-A3B) or a test-family size ≤ %d", maxTestHidden), fmt.Sprint(c.HiddenSize)}
	}
	q := c.Quant
	if q.Mode != "affine" {
		return &FieldError{"quantization.mode", `"affine"`, fmt.Sprintf("%q", q.Mode)}
	}
	if q.Bits != 4 {
		return &FieldError{"quantization.bits", "4", fmt.Sprint(q.Bits)}
	}
	if q.GroupSize != 64 {
		return &FieldError{"quantization.group_size", "64", fmt.Sprint(q.GroupSize)}
	}
	for path, o := range q.Overrides {
		if o.GroupSize != 64 {
			return &FieldError{fmt.Sprintf("quantization[%q].group_size", path), "64", fmt.Sprint(o.GroupSize)}
		}
		if o.Bits != 4 && o.Bits != 8 {
			return &FieldError{fmt.Sprintf("quantization[%q].bits", path), "4 or 8", fmt.Sprint(o.Bits)}
		}
	}
	return nil
}

func layerKinds(text map[string]any, p string, n int) ([]LayerKind, error) {
	kinds := make([]LayerKind, n)
	raw, ok := text["layer_types"]
	if !ok {
		// HF derives layer_types from full_attention_interval when absent.
		r := &reader{obj: text, prefix: p}
		interval := r.optInt("full_attention_interval", 4)
		if err := r.err(); err != nil {
			return nil, err
		}
		if interval <= 0 {
			return nil, &FieldError{p + "full_attention_interval", "> 0", fmt.Sprint(interval)}
		}
		for i := range kinds {
			if (i+1)%interval == 0 {
				kinds[i] = FullAttention
			}
		}
		return kinds, nil
	}
	list, ok := raw.([]any)
	if !ok || len(list) != n {
		return nil, &FieldError{p + "layer_types", fmt.Sprintf("a list of num_hidden_layers (%d) entries", n), describe(raw)}
	}
	for i, v := range list {
		switch v {
		case "linear_attention":
			kinds[i] = LinearAttention
		case "full_attention":
			kinds[i] = FullAttention
		default:
			return nil, &FieldError{fmt.Sprintf("%slayer_types[%d]", p, i), `"linear_attention" or "full_attention"`, describe(v)}
		}
	}
	return kinds, nil
}

func rope(text map[string]any, p string, c *Config) error {
	params, ok := text["rope_parameters"].(map[string]any)
	r := &reader{obj: params, prefix: p + "rope_parameters."}
	if !ok { // older configs keep rope_theta / partial_rotary_factor at the top level
		r = &reader{obj: text, prefix: p}
		params = text
	}
	if t, ok := params["rope_type"]; ok && t != "default" {
		return &FieldError{r.prefix + "rope_type", `"default"`, describe(t)}
	}
	c.RopeTheta = r.float("rope_theta")
	if err := mropeSection(params, r.prefix, c); err != nil {
		return err
	}
	factor := 1.0
	if _, ok := params["partial_rotary_factor"]; ok {
		factor = r.float("partial_rotary_factor")
	} else if _, ok := text["partial_rotary_factor"]; ok {
		factor = (&reader{obj: text, prefix: p}).float("partial_rotary_factor")
	}
	if err := r.err(); err != nil {
		return err
	}
	rot := float64(c.HeadDim) * factor
	if rot != math.Trunc(rot) || factor <= 0 || factor > 1 {
		return &FieldError{r.prefix + "partial_rotary_factor", "a factor in (0,1] giving a whole rotary dimension", fmt.Sprint(factor)}
	}
	c.RotaryDim = int(rot)
	return nil
}

func quantization(top map[string]any) (Quant, error) {
	raw, ok := top["quantization"]
	field := "quantization"
	if !ok {
		raw, ok = top["quantization_config"]
		field = "quantization_config"
	}
	obj, isObj := raw.(map[string]any)
	if !ok || !isObj {
		return Quant{}, &FieldError{"quantization", "an MLX affine quantization block (bits 4, group_size 64)", describe(raw)}
	}
	q := Quant{Mode: "affine", Overrides: map[string]QuantParams{}}
	r := &reader{obj: obj, prefix: field + "."}
	q.Bits = r.int("bits")
	q.GroupSize = r.int("group_size")
	if m, ok := obj["mode"]; ok {
		s, isStr := m.(string)
		if !isStr {
			return Quant{}, &FieldError{field + ".mode", "a string", describe(m)}
		}
		q.Mode = s
	}
	for k, v := range obj {
		sub, isObj := v.(map[string]any)
		if !isObj {
			continue
		}
		sr := &reader{obj: sub, prefix: fmt.Sprintf("%s[%q].", field, k)}
		q.Overrides[k] = QuantParams{Bits: sr.int("bits"), GroupSize: sr.optInt("group_size", q.GroupSize)}
		if err := sr.err(); err != nil {
			return Quant{}, err
		}
	}
	return q, r.err()
}

// tokenIDs reads obj["eos_token_id"]: absent, one id, or a list of ids.
func tokenIDs(obj map[string]any, field string) ([]int, error) {
	v, ok := obj["eos_token_id"]
	if !ok || v == nil {
		return nil, nil
	}
	var out []int
	add := func(x any) error {
		f, isNum := x.(float64)
		if !isNum || f != math.Trunc(f) || f < 0 {
			return &FieldError{field, "a token id or a list of token ids", describe(v)}
		}
		out = append(out, int(f))
		return nil
	}
	if list, isList := v.([]any); isList {
		for _, x := range list {
			if err := add(x); err != nil {
				return nil, err
			}
		}
		return out, nil
	}
	return out, add(v)
}

func unionSorted(a, b []int) []int {
	seen := map[int]bool{}
	var out []int
	for _, x := range append(append([]int{}, a...), b...) {
		if !seen[x] {
			seen[x] = true
			out = append(out, x)
		}
	}
	sort.Ints(out)
	return out
}

// reader pulls typed fields out of a JSON object, remembering the first problem.
type reader struct {
	obj    map[string]any
	prefix string
	first  error
}

func (r *reader) fail(e error) {
	if r.first == nil {
		r.first = e
	}
}

func (r *reader) err() error { return r.first }

func (r *reader) int(key string) int {
	v, ok := r.obj[key]
	if !ok {
		r.fail(&FieldError{r.prefix + key, "an integer", "nothing (missing)"})
		return 0
	}
	f, isNum := v.(float64)
	if !isNum || f != math.Trunc(f) || math.Abs(f) > 1<<40 {
		r.fail(&FieldError{r.prefix + key, "an integer", describe(v)})
		return 0
	}
	return int(f)
}

func (r *reader) optInt(key string, def int) int {
	if _, ok := r.obj[key]; !ok {
		return def
	}
	return r.int(key)
}

func (r *reader) float(key string) float64 {
	v, ok := r.obj[key]
	if !ok {
		r.fail(&FieldError{r.prefix + key, "a number", "nothing (missing)"})
		return 0
	}
	f, isNum := v.(float64)
	if !isNum {
		r.fail(&FieldError{r.prefix + key, "a number", describe(v)})
	}
	return f
}

func (r *reader) wantString(key, want string, required bool) {
	v, ok := r.obj[key]
	if !ok && !required {
		return
	}
	if s, _ := v.(string); s != want {
		r.fail(&FieldError{r.prefix + key, fmt.Sprintf("%q", want), describe(v)})
	}
}

// wantBool checks an optional boolean; `also` is a second object (the wrapper) that may carry it too.
func (r *reader) wantBool(key string, want bool, also map[string]any) {
	check := func(obj map[string]any, prefix string) {
		v, ok := obj[key]
		if !ok {
			return
		}
		if b, isBool := v.(bool); !isBool || b != want {
			r.fail(&FieldError{prefix + key, fmt.Sprint(want), describe(v)})
		}
	}
	check(r.obj, r.prefix)
	if also != nil {
		check(also, "")
	}
}

func describe(v any) string {
	if v == nil {
		return "nothing (missing or null)"
	}
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	s := string(b)
	if len(s) > 80 {
		s = s[:77] + "..."
	}
	return s
}
