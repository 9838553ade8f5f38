package config

import (
	"strings"
	"testing"
)

// productionVision is the pinned checkpoint's vision_config and image ids.
func withVision(obj map[string]any) map[string]any {
	obj["vision_config"] = map[string]any{
		"deepstack_visual_indexes": []any{}, "depth": 27.0, "hidden_act": "gelu_pytorch_tanh", "hidden_size": 1152.0,
		"in_channels": 3.0, "intermediate_size": 4304.0, "model_type": "qwen3_5_moe", "num_heads": 16.0,
		"num_position_embeddings": 2304.0, "out_hidden_size": 2048.0, "patch_size": 16.0,
		"spatial_merge_size": 2.0, "temporal_patch_size": 2.0,
	}
	obj["image_token_id"], obj["video_token_id"] = 248056.0, 248057.0
	obj["vision_start_token_id"], obj["vision_end_token_id"] = 248053.0, 248054.0
	return obj
}

func TestProductionVision(t *testing.T) {
	c, err := parse(t, withVision(productionJSON()))
	if err != nil {
		t.Fatal(err)
	}
	if c.Vision == nil {
		t.Fatalf("vision off: %s", c.VisionOff)
	}
	if *c.Vision != *ProductionVision() || c.Vision.HeadDim() != 72 || c.Vision.Side != 48 || c.Vision.Factor() != 32 {
		t.Errorf("vision %+v", *c.Vision)
	}
	if c.MRoPESection != [3]int{11, 11, 10} {
		t.Errorf("mrope %v", c.MRoPESection)
	}
	// Frequency j reads axis j mod 3 for the production sections (32 frequencies).
	for j := range 32 {
		if got := c.MRoPEAxis(j); got != j%3 {
			t.Errorf("axis of frequency %d: %d", j, got)
		}
	}
}

func TestVisionOff(t *testing.T) {
	cases := []struct {
		name string
		edit func(map[string]any)
		want string
	}{
		{"no vision_config", func(o map[string]any) { delete(o, "vision_config") }, "no vision_config"},
		{"wrong depth", func(o map[string]any) { o["vision_config"].(map[string]any)["depth"] = 26.0 }, "vision_config.depth: expected 27"},
		{"deepstack", func(o map[string]any) { o["vision_config"].(map[string]any)["deepstack_visual_indexes"] = []any{8.0} }, "deepstack"},
		{"activation", func(o map[string]any) { o["vision_config"].(map[string]any)["hidden_act"] = "gelu" }, "hidden_act"},
		{"image id", func(o map[string]any) { o["image_token_id"] = 300000.0 }, "image_token_id"},
	}
	for _, tc := range cases {
		obj := withVision(productionJSON())
		tc.edit(obj)
		c, err := parse(t, obj)
		if err != nil {
			t.Fatalf("%s: the text model must still load: %v", tc.name, err)
		}
		if c.Vision != nil || !strings.Contains(c.VisionOff, tc.want) {
			t.Errorf("%s: vision %v, off %q, want it to say %q", tc.name, c.Vision, c.VisionOff, tc.want)
		}
	}
}

func TestMRoPESections(t *testing.T) {
	obj := productionJSON()
	text(obj)["rope_parameters"].(map[string]any)["mrope_section"] = []any{3.0, 3.0, 2.0}
	c, err := parse(t, obj)
	if err != nil {
		t.Fatal(err)
	}
	// transformers: axis 1 at 1, 4, 7 (< 9), axis 2 at 2, 5 (< 6), the rest axis 0.
	want := []int{0, 1, 2, 0, 1, 2, 0, 1, 0, 0, 0}
	for j, w := range want {
		if got := c.MRoPEAxis(j); got != w {
			t.Errorf("frequency %d: axis %d, want %d", j, got, w)
		}
	}
	text(obj)["rope_parameters"].(map[string]any)["mrope_interleaved"] = false
	if _, err := parse(t, obj); err == nil || !strings.Contains(err.Error(), "mrope_interleaved") {
		t.Errorf("non-interleaved sections: %v", err)
	}
}
