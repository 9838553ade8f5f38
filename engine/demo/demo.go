// Package demo builds Lily's demo checkpoint: a small random model of the Qwen3.5/3.6-MoE
// architecture, with a small random vision tower, a real tokenizer and chat template, so the
// whole API can be tried anywhere. Its answers are random text; its plumbing (templates,
// streaming, tools, images, caching) is real.
package demo

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"

	"github.com/lilyformac/lily/engine/quant"
	"github.com/lilyformac/lily/engine/safetensors"
)

// Shape of the demo model: small enough to build in about a second, big enough to exercise every
// layer kind (GDN with value heads = 2 × key heads, gated attention, routed + shared experts).
var shape = struct {
	hidden, layers, heads, kvHeads, headDim, kHeads, vHeads, kDim, vDim, experts, topK, moeI, sharedI int
}{128, 4, 2, 1, 64, 1, 2, 64, 64, 8, 2, 64, 64}

// Files are the inputs copied into the checkpoint as they are.
type Files struct {
	TokenizerJSON []byte // tokenizer.json
	ChatTemplate  []byte // chat_template.jinja
	VocabSize     int    // ids the tokenizer defines
	EOSTokenIDs   []int
	// VisionTokens are the tokenizer's image pad, video pad, vision start and vision end ids; the
	// model gets a vision tower when they are set.
	VisionTokens [4]int
}

// tower is the demo tower's shape: the real one's patch, merge and layout, small widths.
var tower = struct{ depth, hidden, heads, intermediate, positions int }{2, 64, 4, 128, 36}

// version changes when the checkpoint's layout does, so an old built demo is not reused.
const version = "demo 2: wrapper config with a vision tower"

// Ensure returns a directory holding the demo checkpoint under root, building it on first use.
// The directory name carries a hash of the inputs, so a changed tokenizer or template rebuilds.
func Ensure(root string, f Files) (string, error) {
	h := sha256.New()
	h.Write(f.TokenizerJSON)
	h.Write(f.ChatTemplate)
	fmt.Fprint(h, f.VocabSize, f.EOSTokenIDs, f.VisionTokens, shape, tower, version)
	dir := filepath.Join(root, "demo-"+hex.EncodeToString(h.Sum(nil))[:16])
	if _, err := os.Stat(filepath.Join(dir, "config.json")); err == nil {
		return dir, nil
	}
	if err := os.MkdirAll(root, 0o755); err != nil {
		return "", err
	}
	tmp, err := os.MkdirTemp(root, ".demo-build-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp)
	if err := build(tmp, f); err != nil {
		return "", err
	}
	if err := os.Rename(tmp, dir); err != nil {
		if _, statErr := os.Stat(filepath.Join(dir, "config.json")); statErr == nil {
			return dir, nil // another process built it first
		}
		return "", err
	}
	return dir, nil
}

func build(dir string, f Files) error {
	s := shape
	vocab := (f.VocabSize + 63) / 64 * 64 // embedding rows padded like the real model
	layerTypes := make([]string, s.layers)
	for i := range layerTypes {
		layerTypes[i] = "linear_attention"
		if i%2 == 1 {
			layerTypes[i] = "full_attention"
		}
	}
	text := map[string]any{
		"model_type": "qwen3_5_moe_text", "vocab_size": vocab, "hidden_size": s.hidden, "num_hidden_layers": s.layers, "layer_types": layerTypes,
		"num_attention_heads": s.heads, "num_key_value_heads": s.kvHeads, "head_dim": s.headDim,
		"linear_num_key_heads": s.kHeads, "linear_num_value_heads": s.vHeads,
		"linear_key_head_dim": s.kDim, "linear_value_head_dim": s.vDim, "linear_conv_kernel_dim": 4,
		"num_experts": s.experts, "num_experts_per_tok": s.topK, "moe_intermediate_size": s.moeI,
		"shared_expert_intermediate_size": s.sharedI, "hidden_act": "silu", "rms_norm_eps": 1e-6,
		"max_position_embeddings": 32768, "tie_word_embeddings": false, "eos_token_id": f.EOSTokenIDs,
		"rope_parameters": map[string]any{"rope_type": "default", "rope_theta": 1e7, "partial_rotary_factor": 0.25,
			"mrope_section": []int{3, 3, 2}, "mrope_interleaved": true},
	}
	quantization := map[string]any{"group_size": 64, "bits": 4, "mode": "affine"}
	cfg := map[string]any{
		"model_type": "qwen3_5_moe", "architectures": []string{"Qwen3_5MoeForConditionalGeneration"},
		"text_config": text, "tie_word_embeddings": false, "quantization": quantization,
	}
	w := &writer{rng: rand.New(rand.NewPCG(1, 2)), quant: quantization}
	w.linear("language_model.model.embed_tokens", vocab, s.hidden, 1, 4)
	w.linear("language_model.lm_head", vocab, s.hidden, 2, 4)
	w.norm("language_model.model.norm.weight", s.hidden)
	for i, lt := range layerTypes {
		p := fmt.Sprintf("language_model.model.layers.%d.", i)
		w.norm(p+"input_layernorm.weight", s.hidden)
		w.norm(p+"post_attention_layernorm.weight", s.hidden)
		if lt == "linear_attention" {
			ch := 2*s.kHeads*s.kDim + s.vHeads*s.vDim
			w.linear(p+"linear_attn.in_proj_qkv", ch, s.hidden, 1, 4)
			w.linear(p+"linear_attn.in_proj_z", s.vHeads*s.vDim, s.hidden, 1, 4)
			w.linear(p+"linear_attn.in_proj_b", s.vHeads, s.hidden, 1, 4)
			w.linear(p+"linear_attn.in_proj_a", s.vHeads, s.hidden, 1, 4)
			w.linear(p+"linear_attn.out_proj", s.hidden, s.vHeads*s.vDim, 1, 4)
			w.bf16(p+"linear_attn.conv1d.weight", []int{ch, 4, 1}, 0.5, 0)
			w.bf16(p+"linear_attn.dt_bias", []int{s.vHeads}, 1, 0)
			w.bf16(p+"linear_attn.A_log", []int{s.vHeads}, 0.5, 1)
			w.bf16(p+"linear_attn.norm.weight", []int{s.vDim}, 0.1, 1)
		} else {
			w.linear(p+"self_attn.q_proj", s.heads*s.headDim*2, s.hidden, 1, 4)
			w.linear(p+"self_attn.k_proj", s.kvHeads*s.headDim, s.hidden, 1, 4)
			w.linear(p+"self_attn.v_proj", s.kvHeads*s.headDim, s.hidden, 1, 4)
			w.linear(p+"self_attn.o_proj", s.hidden, s.heads*s.headDim, 1, 4)
			w.norm(p+"self_attn.q_norm.weight", s.headDim)
			w.norm(p+"self_attn.k_norm.weight", s.headDim)
		}
		w.linear(p+"mlp.gate", s.experts, s.hidden, 2, 8)
		w.linear(p+"mlp.switch_mlp.gate_proj", s.experts*s.moeI, s.hidden, 1, 4, s.experts)
		w.linear(p+"mlp.switch_mlp.up_proj", s.experts*s.moeI, s.hidden, 1, 4, s.experts)
		w.linear(p+"mlp.switch_mlp.down_proj", s.experts*s.hidden, s.moeI, 1, 4, s.experts)
		w.linear(p+"mlp.shared_expert.gate_proj", s.sharedI, s.hidden, 1, 4)
		w.linear(p+"mlp.shared_expert.up_proj", s.sharedI, s.hidden, 1, 4)
		w.linear(p+"mlp.shared_expert.down_proj", s.hidden, s.sharedI, 1, 4)
		w.linear(p+"mlp.shared_expert_gate", 1, s.hidden, 1, 8)
	}
	files := map[string][]byte{"tokenizer.json": f.TokenizerJSON, "chat_template.jinja": f.ChatTemplate}
	if f.VisionTokens != [4]int{} {
		w.visionTower()
		visionConfig(cfg, files, f.VisionTokens)
	}
	if err := safetensors.WriteFile(filepath.Join(dir, "model.safetensors"), w.tensors, map[string]string{"format": "mlx"}); err != nil {
		return err
	}
	raw, err := json.MarshalIndent(cfg, "", "  ")
	if err != nil {
		return err
	}
	files["config.json"] = raw
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// writer accumulates random tensors in the MLX layout.
type writer struct {
	rng     *rand.Rand
	tensors []safetensors.WriteTensor
	quant   map[string]any
}

// linear adds a quantized [rows, cols] matrix (stacked as [experts, rows/experts, cols] when
// experts is given) with N(0, gain²/cols) entries.
func (w *writer) linear(name string, rows, cols int, gain float64, bits int, experts ...int) {
	vals := make([]float32, rows*cols)
	for i := range vals {
		vals[i] = float32(w.rng.NormFloat64() * gain / math.Sqrt(float64(cols)))
	}
	m := quant.Quantize(vals, rows, cols, bits)
	lead := []int{rows}
	if len(experts) == 1 {
		lead = []int{experts[0], rows / experts[0]}
	}
	shape := func(last int) []int { return append(append([]int{}, lead...), last) }
	w.tensors = append(w.tensors,
		safetensors.WriteTensor{Name: name + ".weight", DType: safetensors.U32, Shape: shape(cols * bits / 32), Data: u32Bytes(m.Words)},
		safetensors.WriteTensor{Name: name + ".scales", DType: safetensors.BF16, Shape: shape(cols / 64), Data: u16Bytes(m.Scales)},
		safetensors.WriteTensor{Name: name + ".biases", DType: safetensors.BF16, Shape: shape(cols / 64), Data: u16Bytes(m.Biases)})
	if bits != 4 {
		w.quant[name] = map[string]any{"group_size": 64, "bits": bits}
	}
}

// visionConfig adds the tower's configuration, image token ids and image processor settings.
func visionConfig(cfg map[string]any, files map[string][]byte, ids [4]int) {
	cfg["image_token_id"], cfg["video_token_id"], cfg["vision_start_token_id"], cfg["vision_end_token_id"] = ids[0], ids[1], ids[2], ids[3]
	cfg["vision_config"] = map[string]any{"model_type": "qwen3_5_moe", "depth": tower.depth, "hidden_size": tower.hidden,
		"num_heads": tower.heads, "intermediate_size": tower.intermediate, "hidden_act": "gelu_pytorch_tanh",
		"patch_size": 16, "temporal_patch_size": 2, "spatial_merge_size": 2, "in_channels": 3,
		"out_hidden_size": shape.hidden, "num_position_embeddings": tower.positions, "deepstack_visual_indexes": []int{}}
	// Up to 1 MP (1,024 tokens): the demo's answers are random, its images need not be large.
	files["preprocessor_config.json"] = []byte(`{"size": {"shortest_edge": 4096, "longest_edge": 1048576}, "patch_size": 16, "temporal_patch_size": 2, "merge_size": 2, "image_mean": [0.5, 0.5, 0.5], "image_std": [0.5, 0.5, 0.5]}`)
}

// visionTower adds the vision tower's tensors as mlx-vlm writes them: under vision_tower., bfloat16,
// the patch weight channels-last [hidden, 2, 16, 16, 3].
func (w *writer) visionTower() {
	v, out := tower, shape.hidden
	D, M := v.hidden, 4*v.hidden
	dense := func(name string, rows, cols int, gain float64) {
		w.bf16("vision_tower."+name+".weight", []int{rows, cols}, gain/math.Sqrt(float64(cols)), 0)
		w.bf16("vision_tower."+name+".bias", []int{rows}, 0.1, 0)
	}
	layerNorm := func(name string) {
		w.bf16("vision_tower."+name+".weight", []int{D}, 0.1, 1)
		w.bf16("vision_tower."+name+".bias", []int{D}, 0.1, 0)
	}
	w.bf16("vision_tower.patch_embed.proj.weight", []int{D, 2, 16, 16, 3}, 1/math.Sqrt(2*16*16*3), 0)
	w.bf16("vision_tower.patch_embed.proj.bias", []int{D}, 0.1, 0)
	w.bf16("vision_tower.pos_embed.weight", []int{v.positions, D}, 0.5, 0)
	for i := range v.depth {
		b := fmt.Sprintf("blocks.%d.", i)
		layerNorm(b + "norm1")
		layerNorm(b + "norm2")
		dense(b+"attn.qkv", 3*D, D, 1)
		dense(b+"attn.proj", D, D, 1)
		dense(b+"mlp.linear_fc1", v.intermediate, D, 1)
		dense(b+"mlp.linear_fc2", D, v.intermediate, 1)
	}
	layerNorm("merger.norm")
	dense("merger.linear_fc1", M, M, 1)
	dense("merger.linear_fc2", out, M, 1)
}

// norm adds a zero-centred RMSNorm gain as MLX stores it (1 + w).
func (w *writer) norm(name string, n int) { w.bf16(name, []int{n}, 0.1, 1) }

func (w *writer) bf16(name string, shape []int, scale, offset float64) {
	n := 1
	for _, d := range shape {
		n *= d
	}
	vals := make([]uint16, n)
	for i := range vals {
		vals[i] = quant.F32ToBF16(float32(offset + w.rng.NormFloat64()*scale))
	}
	w.tensors = append(w.tensors, safetensors.WriteTensor{Name: name, DType: safetensors.BF16, Shape: shape, Data: u16Bytes(vals)})
}

func u32Bytes(v []uint32) []byte {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], x)
	}
	return b
}

func u16Bytes(v []uint16) []byte {
	b := make([]byte, 2*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint16(b[2*i:], x)
	}
	return b
}
