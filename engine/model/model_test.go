package model_test

import (
	"encoding/binary"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lilyformac/lily/engine/model"
	"github.com/lilyformac/lily/engine/safetensors"
)

const goldenB = "../../testdata/golden/tiny-b" // flat config, single file, `model.` names

// fixture copies tiny-b's tensors into memory so each test can damage its own copy.
type fixture struct {
	config  map[string]any
	tensors map[string]safetensors.WriteTensor
}

func loadFixture(t *testing.T) *fixture {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(goldenB, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{tensors: map[string]safetensors.WriteTensor{}}
	if err := json.Unmarshal(raw, &f.config); err != nil {
		t.Fatal(err)
	}
	ck, err := safetensors.OpenDir(goldenB)
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	for _, n := range ck.Names() {
		tt, _ := ck.Tensor(n)
		f.tensors[n] = safetensors.WriteTensor{Name: n, DType: tt.DType, Shape: append([]int(nil), tt.Shape...), Data: append([]byte(nil), tt.Data...)}
	}
	return f
}

// write saves the fixture as a checkpoint directory and returns its path.
func (f *fixture) write(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	raw, err := json.Marshal(f.config)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "config.json"), raw, 0o644); err != nil {
		t.Fatal(err)
	}
	var list []safetensors.WriteTensor
	for _, tt := range f.tensors {
		list = append(list, tt)
	}
	if err := safetensors.WriteFile(filepath.Join(dir, "model.safetensors"), list, map[string]string{"format": "mlx"}); err != nil {
		t.Fatal(err)
	}
	return dir
}

func expectError(t *testing.T, dir string, wants ...string) {
	t.Helper()
	w, err := model.Load(dir)
	if err == nil {
		w.Close()
		t.Fatalf("Load succeeded, want an error mentioning %q", wants)
	}
	for _, want := range wants {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
}

func TestLoadGoldenCheckpoints(t *testing.T) {
	for _, dir := range []string{"../../testdata/golden/tiny-a", goldenB} {
		w, err := model.Load(dir)
		if err != nil {
			t.Fatalf("%s: %v", dir, err)
		}
		c := w.Config
		if len(w.Layers) != c.NumLayers {
			t.Errorf("%s: %d layers, want %d", dir, len(w.Layers), c.NumLayers)
		}
		for i, l := range w.Layers {
			if (l.GDN == nil) == (l.Attn == nil) || l.Kind != c.Layers[i] {
				t.Errorf("%s: layer %d has the wrong mixer", dir, i)
			}
			if l.MoE.Router.Bits != 8 || l.MoE.SharedExpertGate.Bits != 8 || l.MoE.Gate.Bits != 4 {
				t.Errorf("%s: layer %d bits: router %d, shared gate %d, experts %d", dir, i, l.MoE.Router.Bits, l.MoE.SharedExpertGate.Bits, l.MoE.Gate.Bits)
			}
			if l.MoE.Gate.Rows != c.NumExperts*c.MoEIntermediate || l.MoE.Down.Rows != c.NumExperts*c.HiddenSize {
				t.Errorf("%s: layer %d expert stacks are %d and %d rows", dir, i, l.MoE.Gate.Rows, l.MoE.Down.Rows)
			}
		}
		if err := w.Close(); err != nil {
			t.Error(err)
		}
	}
}

func TestBadCheckpoints(t *testing.T) {
	const router = "model.layers.0.mlp.gate"
	cases := []struct {
		name   string
		damage func(t *testing.T, f *fixture, dir string) string // returns the dir to load
		wants  []string
	}{
		{"truncated file", func(t *testing.T, f *fixture, _ string) string {
			dir := f.write(t)
			p := filepath.Join(dir, "model.safetensors")
			st, _ := os.Stat(p)
			if err := os.Truncate(p, st.Size()-1000); err != nil {
				t.Fatal(err)
			}
			return dir
		}, []string{"model.safetensors", "truncated"}},
		{"header offsets past EOF", func(t *testing.T, f *fixture, _ string) string {
			dir := f.write(t)
			p := filepath.Join(dir, "model.safetensors")
			raw, _ := os.ReadFile(p)
			n := binary.LittleEndian.Uint64(raw)
			var header map[string]json.RawMessage
			if err := json.Unmarshal(raw[8:8+n], &header); err != nil {
				t.Fatal(err)
			}
			var entry struct {
				DType   string `json:"dtype"`
				Shape   []int  `json:"shape"`
				Offsets []int  `json:"data_offsets"`
			}
			json.Unmarshal(header["model.norm.weight"], &entry)
			size := entry.Offsets[1] - entry.Offsets[0]
			entry.Offsets = []int{len(raw) + 4096, len(raw) + 4096 + size}
			header["model.norm.weight"], _ = json.Marshal(entry)
			h, _ := json.Marshal(header)
			for len(h)%8 != 0 {
				h = append(h, ' ')
			}
			out := binary.LittleEndian.AppendUint64(nil, uint64(len(h)))
			out = append(append(out, h...), raw[8+n:]...)
			os.WriteFile(p, out, 0o644)
			return dir
		}, []string{"model.norm.weight", "past"}},
		{"bad config JSON", func(t *testing.T, f *fixture, _ string) string {
			dir := f.write(t)
			os.WriteFile(filepath.Join(dir, "config.json"), []byte(`{"model_type": "qwen3_5_moe_text",`), 0o644)
			return dir
		}, []string{"config.json", "invalid JSON"}},
		{"wrong dtype", func(t *testing.T, f *fixture, _ string) string {
			tt := f.tensors["model.layers.0.input_layernorm.weight"]
			tt.DType = safetensors.F16
			f.tensors[tt.Name] = tt
			return f.write(t)
		}, []string{"model.layers.0.input_layernorm.weight", "dtype F16", "BF16"}},
		{"wrong scales dtype", func(t *testing.T, f *fixture, _ string) string {
			tt := f.tensors["model.layers.1.self_attn.q_proj.scales"]
			tt.DType, tt.Shape = safetensors.F32, []int{tt.Shape[0], tt.Shape[1] / 2}
			f.tensors[tt.Name] = tt
			return f.write(t)
		}, []string{"model.layers.1.self_attn.q_proj.scales", "dtype F32"}},
		{"wrong shape", func(t *testing.T, f *fixture, _ string) string {
			tt := f.tensors["model.norm.weight"]
			tt.Shape = []int{tt.Shape[0] / 2, 2}
			f.tensors[tt.Name] = tt
			return f.write(t)
		}, []string{"model.norm.weight", "shape [128 2]", "expected [256]"}},
		{"wrong quantized shape", func(t *testing.T, f *fixture, _ string) string {
			for _, s := range []string{".weight", ".scales", ".biases"} {
				tt := f.tensors["model.layers.0.linear_attn.in_proj_z"+s]
				tt.Shape = []int{tt.Shape[0] / 2, tt.Shape[1] * 2}
				f.tensors[tt.Name] = tt
			}
			return f.write(t)
		}, []string{"model.layers.0.linear_attn.in_proj_z", "expected [512 4]"}},
		{"missing tensor", func(t *testing.T, f *fixture, _ string) string {
			delete(f.tensors, "model.layers.2.linear_attn.A_log")
			return f.write(t)
		}, []string{"missing tensor model.layers.2.linear_attn.A_log"}},
		{"unknown tensor", func(t *testing.T, f *fixture, _ string) string {
			f.tensors["model.layers.0.mlp.extra_bias"] = safetensors.WriteTensor{Name: "model.layers.0.mlp.extra_bias", DType: safetensors.F32, Shape: []int{2}, Data: make([]byte, 8)}
			return f.write(t)
		}, []string{"unknown tensors", "model.layers.0.mlp.extra_bias"}},
		{"wrong bit width", func(t *testing.T, f *fixture, _ string) string {
			// Replace the 8-bit router by a 4-bit one of the same logical shape.
			wt := f.tensors[router+".weight"]
			wt.Shape = []int{wt.Shape[0], wt.Shape[1] / 2}
			wt.Data = wt.Data[:len(wt.Data)/2]
			f.tensors[wt.Name] = wt
			return f.write(t)
		}, []string{router, "bit width", "4 bits", "expects 8-bit"}},
		{"config disagrees with tensor bits", func(t *testing.T, f *fixture, _ string) string {
			q := f.config["quantization"].(map[string]any)
			delete(q, router)
			return f.write(t)
		}, []string{router, "bit width", "8 bits", "expects 4-bit"}},
		{"ignored tensors are fine", func(t *testing.T, f *fixture, _ string) string {
			f.tensors["mtp.fc.weight"] = safetensors.WriteTensor{Name: "mtp.fc.weight", DType: safetensors.BF16, Shape: []int{2}, Data: make([]byte, 4)}
			f.tensors["vision_tower.blocks.0.w"] = safetensors.WriteTensor{Name: "vision_tower.blocks.0.w", DType: safetensors.BF16, Shape: []int{2}, Data: make([]byte, 4)}
			return f.write(t)
		}, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := loadFixture(t)
			dir := c.damage(t, f, "")
			if c.wants == nil {
				w, err := model.Load(dir)
				if err != nil {
					t.Fatalf("Load: %v", err)
				}
				w.Close()
				return
			}
			expectError(t, dir, c.wants...)
		})
	}
}
