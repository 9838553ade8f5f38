package config

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// productionJSON is the multimodal wrapper config of mlx-community/Qwen3.6-35B-A3B-4bit at the
// pinned revision: text_config with the model's numbers, quantization with the 8-bit router and
// shared-expert gate overrides (layer_types omitted: derived from full_attention_interval).
func productionJSON() map[string]any {
	q := map[string]any{"group_size": 64.0, "bits": 4.0, "mode": "affine"}
	for i := range 40 {
		for _, m := range []string{"mlp.gate", "mlp.shared_expert_gate"} {
			q["language_model.model.layers."+itoa(i)+"."+m] = map[string]any{"group_size": 64.0, "bits": 8.0}
		}
	}
	return map[string]any{
		"architectures": []any{"Qwen3_5MoeForConditionalGeneration"},
		"model_type":    "qwen3_5_moe",
		"text_config": map[string]any{
			"model_type": "qwen3_5_moe_text", "hidden_size": 2048.0, "num_hidden_layers": 40.0,
			"full_attention_interval": 4.0, "num_attention_heads": 16.0, "num_key_value_heads": 2.0,
			"head_dim": 256.0, "linear_num_key_heads": 16.0, "linear_num_value_heads": 32.0,
			"linear_key_head_dim": 128.0, "linear_value_head_dim": 128.0, "linear_conv_kernel_dim": 4.0,
			"num_experts": 256.0, "num_experts_per_tok": 8.0, "moe_intermediate_size": 512.0,
			"shared_expert_intermediate_size": 512.0, "vocab_size": 248320.0, "rms_norm_eps": 1e-6,
			"hidden_act": "silu", "max_position_embeddings": 262144.0, "eos_token_id": 248044.0,
			"attn_output_gate": true, "tie_word_embeddings": false,
			"rope_parameters": map[string]any{"rope_type": "default", "rope_theta": 1e7, "partial_rotary_factor": 0.25, "mrope_section": []any{11.0, 11.0, 10.0}},
		},
		"tie_word_embeddings": false,
		"quantization":        q,
		"quantization_config": q,
	}
}

func itoa(i int) string { b, _ := json.Marshal(i); return string(b) }

func parse(t *testing.T, obj map[string]any) (*Config, error) {
	t.Helper()
	raw, err := json.Marshal(obj)
	if err != nil {
		t.Fatal(err)
	}
	return Parse(raw)
}

func text(obj map[string]any) map[string]any { return obj["text_config"].(map[string]any) }

func TestProductionConfig(t *testing.T) {
	c, err := parse(t, productionJSON())
	if err != nil {
		t.Fatal(err)
	}
	if c.Profile != ProfileProduction || !c.Wrapper {
		t.Errorf("profile %q wrapper %v", c.Profile, c.Wrapper)
	}
	full := 0
	for i, k := range c.Layers {
		if k == FullAttention {
			full++
			if i%4 != 3 {
				t.Errorf("layer %d is full attention", i)
			}
		}
	}
	if full != 10 || c.RotaryDim != 64 || c.RopeTheta != 1e7 || c.MaxPositions != 262144 {
		t.Errorf("full layers %d, rotary %d, theta %g, ctx %d", full, c.RotaryDim, c.RopeTheta, c.MaxPositions)
	}
	if p := c.Quant.For("language_model.model.layers.7.mlp.gate"); p.Bits != 8 {
		t.Errorf("router override: %+v", p)
	}
	if p := c.Quant.For("language_model.model.layers.7.mlp.switch_mlp.up_proj"); p.Bits != 4 || p.GroupSize != 64 {
		t.Errorf("default quant: %+v", p)
	}
	if len(c.EOSTokenIDs) != 1 || c.EOSTokenIDs[0] != 248044 {
		t.Errorf("eos %v", c.EOSTokenIDs)
	}
}

// TestRejections: each bad value gets an error naming the field, the expected and the found value.
func TestRejections(t *testing.T) {
	cases := []struct {
		name            string
		edit            func(m map[string]any)
		field, expected string
		found           string
	}{
		{"layers", func(m map[string]any) { text(m)["num_hidden_layers"] = 39.0 }, "text_config.num_hidden_layers", "40", "39"},
		{"experts", func(m map[string]any) { text(m)["num_experts"] = 128.0 }, "text_config.num_experts", "256", "128"},
		{"head dim", func(m map[string]any) { text(m)["head_dim"] = 128.0 }, "text_config.head_dim", "256", "128"},
		{"hidden size", func(m map[string]any) { text(m)["hidden_size"] = 4096.0 }, "text_config.hidden_size", "2048", "4096"},
		{"missing field", func(m map[string]any) { delete(text(m), "num_experts_per_tok") }, "text_config.num_experts_per_tok", "an integer", "missing"},
		{"non-integer", func(m map[string]any) { text(m)["vocab_size"] = "big" }, "text_config.vocab_size", "an integer", `"big"`},
		{"model type", func(m map[string]any) { m["model_type"] = "llama" }, "model_type", "qwen3_5_moe", `"llama"`},
		{"activation", func(m map[string]any) { text(m)["hidden_act"] = "gelu" }, "text_config.hidden_act", `"silu"`, `"gelu"`},
		{"tied embeddings", func(m map[string]any) { m["tie_word_embeddings"] = true }, "tie_word_embeddings", "false", "true"},
		{"layer pattern", func(m map[string]any) {
			lt := make([]any, 40)
			for i := range lt {
				lt[i] = "linear_attention"
				if i%4 == 3 {
					lt[i] = "full_attention"
				}
			}
			lt[5] = "full_attention"
			text(m)["layer_types"] = lt
		}, "text_config.layer_types[5]", "linear_attention", "full_attention"},
		{"layer type name", func(m map[string]any) {
			lt := make([]any, 40)
			for i := range lt {
				lt[i] = "sliding_attention"
			}
			text(m)["layer_types"] = lt
		}, "text_config.layer_types[0]", "full_attention", "sliding_attention"},
		{"rope theta", func(m map[string]any) {
			text(m)["rope_parameters"].(map[string]any)["rope_theta"] = 1e6
		}, "text_config.rope_parameters.rope_theta", "10000000", "1e+06"},
		{"rope type", func(m map[string]any) {
			text(m)["rope_parameters"].(map[string]any)["rope_type"] = "yarn"
		}, "text_config.rope_parameters.rope_type", "default", "yarn"},
		{"no quantization", func(m map[string]any) { delete(m, "quantization"); delete(m, "quantization_config") }, "quantization", "MLX affine", "missing"},
		{"quant bits", func(m map[string]any) { m["quantization"].(map[string]any)["bits"] = 3.0 }, "quantization.bits", "4", "3"},
		{"quant mode", func(m map[string]any) { m["quantization"].(map[string]any)["mode"] = "mxfp4" }, "quantization.mode", "affine", "mxfp4"},
		{"quant group", func(m map[string]any) { m["quantization"].(map[string]any)["group_size"] = 32.0 }, "quantization.group_size", "64", "32"},
		{"override bits", func(m map[string]any) {
			m["quantization"].(map[string]any)["language_model.model.layers.0.mlp.gate"] = map[string]any{"group_size": 64.0, "bits": 6.0}
		}, `quantization["language_model.model.layers.0.mlp.gate"].bits`, "4 or 8", "6"},
		{"eos out of range", func(m map[string]any) { m["eos_token_id"] = []any{248046.0, 300000.0} }, "eos_token_id", "[0, 248320)", "300000"},
		{"test family bad dims", func(m map[string]any) {
			tc := text(m)
			tc["hidden_size"], tc["num_experts"], tc["num_experts_per_tok"] = 128.0, 4.0, 8.0
		}, "text_config.num_experts_per_tok", "1..num_experts", "8"},
		{"test family conv", func(m map[string]any) {
			tc := text(m)
			tc["hidden_size"], tc["linear_conv_kernel_dim"] = 128.0, 3.0
		}, "text_config.linear_conv_kernel_dim", "4", "3"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			obj := productionJSON()
			c.edit(obj)
			_, err := parse(t, obj)
			var fe *FieldError
			if !errors.As(err, &fe) {
				t.Fatalf("got %v, want a FieldError", err)
			}
			if fe.Field != c.field || !strings.Contains(fe.Expected, c.expected) || !strings.Contains(fe.Found, c.found) {
				t.Fatalf("got field %q expected %q found %q; want %q / %q / %q", fe.Field, fe.Expected, fe.Found, c.field, c.expected, c.found)
			}
			if !strings.Contains(err.Error(), c.field) {
				t.Errorf("message %q does not name the field", err)
			}
		})
	}
}

func TestBadJSON(t *testing.T) {
	if _, err := Parse([]byte(`{"model_type": `)); err == nil || !strings.Contains(err.Error(), "invalid JSON") {
		t.Fatalf("got %v", err)
	}
}

func TestFlatConfigAndGenerationConfig(t *testing.T) {
	obj := productionJSON()
	flat := text(obj)
	flat["quantization_config"] = obj["quantization"] // only the HF-style name present
	flat["eos_token_id"] = []any{248046.0, 248044.0}
	dir := t.TempDir()
	raw, _ := json.Marshal(flat)
	os.WriteFile(filepath.Join(dir, "config.json"), raw, 0o644)
	os.WriteFile(filepath.Join(dir, "generation_config.json"), []byte(`{"eos_token_id": [248046, 248044, 248045]}`), 0o644)
	c, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if c.Wrapper || c.Profile != ProfileProduction {
		t.Errorf("wrapper %v profile %q", c.Wrapper, c.Profile)
	}
	if want := []int{248044, 248045, 248046}; len(c.EOSTokenIDs) != 3 || c.EOSTokenIDs[0] != want[0] || c.EOSTokenIDs[2] != want[2] {
		t.Errorf("eos %v, want %v", c.EOSTokenIDs, want)
	}
}

func TestGoldenConfigsAreTestFamily(t *testing.T) {
	for _, name := range []string{"tiny-a", "tiny-b"} {
		c, err := Load(filepath.Join("../../testdata/golden", name))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if c.Profile != ProfileTest {
			t.Errorf("%s: profile %q", name, c.Profile)
		}
	}
}
