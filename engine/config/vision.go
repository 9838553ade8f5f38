package config

import (
	"fmt"
	"math"
)

// Vision is the vision tower's configuration and the token ids that place images in a prompt.
type Vision struct {
	Depth, Hidden, Heads, Intermediate int
	PatchSize, TemporalPatch, Merge    int // pixels per patch side, frames per patch, merge side
	OutHidden                          int // the merger's output width: the text model's hidden size
	NumPositions                       int // learned position table, a Side×Side grid
	Side                               int
	Eps                                float32 // LayerNorm epsilon (fixed in the reference)
	RopeTheta                          float64 // the tower's 2-D rotary base (fixed in the reference)

	ImageToken, VideoToken, StartToken, EndToken int
}

// HeadDim is the width of one attention head.
func (v *Vision) HeadDim() int { return v.Hidden / v.Heads }

// PatchInputs is one patch's pixel values for a still image, its two temporal halves folded:
// [channel][y][x].
func (v *Vision) PatchInputs() int { return 3 * v.PatchSize * v.PatchSize }

// Factor is the pixel multiple an image's sides are resized to: a merged patch's side.
func (v *Vision) Factor() int { return v.PatchSize * v.Merge }

// ProductionVision is Qwen3.6-35B-A3B's tower, the one place its numbers are written.
func ProductionVision() *Vision {
	return &Vision{
		Depth: 27, Hidden: 1152, Heads: 16, Intermediate: 4304, PatchSize: 16, TemporalPatch: 2, Merge: 2,
		OutHidden: 2048, NumPositions: 2304, Side: 48, Eps: 1e-6, RopeTheta: 10000,
		ImageToken: 248056, VideoToken: 248057, StartToken: 248053, EndToken: 248054,
	}
}

// vision reads the wrapper's vision_config and image token ids. Fields it lacks take
// transformers' defaults (those of the published model), as transformers would load them. A
// config that has no tower, or one Lily cannot run, leaves vision off with the reason: the text
// model still serves, and images become placeholders.
func vision(top map[string]any, c *Config) (*Vision, string) {
	raw, ok := top["vision_config"]
	if !ok || !c.Wrapper {
		return nil, "the checkpoint has no vision_config"
	}
	obj, isObj := raw.(map[string]any)
	if !isObj {
		return nil, (&FieldError{"vision_config", "an object", describe(raw)}).Error()
	}
	d := ProductionVision()
	r := &reader{obj: obj, prefix: "vision_config."}
	v := &Vision{
		Depth: r.optInt("depth", d.Depth), Hidden: r.optInt("hidden_size", d.Hidden),
		Heads: r.optInt("num_heads", d.Heads), Intermediate: r.optInt("intermediate_size", d.Intermediate),
		PatchSize: r.optInt("patch_size", d.PatchSize), TemporalPatch: r.optInt("temporal_patch_size", d.TemporalPatch),
		Merge: r.optInt("spatial_merge_size", d.Merge), OutHidden: r.optInt("out_hidden_size", d.OutHidden),
		NumPositions: r.optInt("num_position_embeddings", d.NumPositions), Eps: d.Eps, RopeTheta: d.RopeTheta,
	}
	if _, ok := obj["hidden_act"]; ok {
		r.wantString("hidden_act", "gelu_pytorch_tanh", true)
	}
	if in := r.optInt("in_channels", 3); in != 3 {
		r.fail(&FieldError{"vision_config.in_channels", "3", fmt.Sprint(in)})
	}
	if ds, ok := obj["deepstack_visual_indexes"]; ok {
		if list, isList := ds.([]any); !isList || len(list) > 0 {
			r.fail(&FieldError{"vision_config.deepstack_visual_indexes", "[] (Qwen3.5/3.6 has no deepstack)", describe(ds)})
		}
	}
	t := &reader{obj: top}
	v.ImageToken = t.optInt("image_token_id", d.ImageToken)
	v.VideoToken = t.optInt("video_token_id", d.VideoToken)
	v.StartToken = t.optInt("vision_start_token_id", d.StartToken)
	v.EndToken = t.optInt("vision_end_token_id", d.EndToken)
	for _, e := range []error{r.err(), t.err(), validateVision(v, c)} {
		if e != nil {
			return nil, e.Error()
		}
	}
	return v, ""
}

func validateVision(v *Vision, c *Config) error {
	v.Side = int(math.Round(math.Sqrt(float64(v.NumPositions))))
	if c.Profile == ProfileProduction {
		want := ProductionVision()
		for _, f := range []struct {
			field     string
			got, want int
		}{
			{"depth", v.Depth, want.Depth}, {"hidden_size", v.Hidden, want.Hidden}, {"num_heads", v.Heads, want.Heads},
			{"intermediate_size", v.Intermediate, want.Intermediate}, {"out_hidden_size", v.OutHidden, want.OutHidden},
			{"num_position_embeddings", v.NumPositions, want.NumPositions},
		} {
			if f.got != f.want {
				return &FieldError{"vision_config." + f.field, fmt.Sprintf("%d (Qwen3.6-35B-A3B)", f.want), fmt.Sprint(f.got)}
			}
		}
	}
	checks := []struct {
		field string
		ok    bool
		want  string
		got   int
	}{
		{"vision_config.patch_size", v.PatchSize == 16, "16", v.PatchSize},
		{"vision_config.temporal_patch_size", v.TemporalPatch == 2, "2", v.TemporalPatch},
		{"vision_config.spatial_merge_size", v.Merge == 2, "2", v.Merge},
		{"vision_config.depth", v.Depth > 0 && v.Depth <= 64, "1..64", v.Depth},
		{"vision_config.num_heads", v.Heads > 0 && v.Hidden%max(v.Heads, 1) == 0, "a divisor of hidden_size", v.Heads},
		{"vision_config.hidden_size", v.Hidden > 0 && v.Hidden%max(v.Heads, 1) == 0 && (v.Hidden/max(v.Heads, 1))%4 == 0, "heads × a multiple of 4 (the 2-D rotary splits each head in four)", v.Hidden},
		{"vision_config.intermediate_size", v.Intermediate > 0, "> 0", v.Intermediate},
		{"vision_config.out_hidden_size", v.OutHidden == c.HiddenSize, fmt.Sprintf("the text hidden size %d", c.HiddenSize), v.OutHidden},
		{"vision_config.num_position_embeddings", v.Side >= 2 && v.Side*v.Side == v.NumPositions, "a square of a side ≥ 2", v.NumPositions},
	}
	for _, ch := range checks {
		if !ch.ok {
			return &FieldError{ch.field, ch.want, fmt.Sprint(ch.got)}
		}
	}
	ids := []struct {
		field string
		id    int
	}{{"image_token_id", v.ImageToken}, {"video_token_id", v.VideoToken}, {"vision_start_token_id", v.StartToken}, {"vision_end_token_id", v.EndToken}}
	for _, f := range ids {
		if f.id < 0 || f.id >= c.VocabSize {
			return &FieldError{f.field, fmt.Sprintf("an id in [0, %d)", c.VocabSize), fmt.Sprint(f.id)}
		}
	}
	return nil
}

// mropeSection reads the text rotary's interleaved multimodal sections: frequency j rotates by the
// position on axis 1 (height) when j ≡ 1 (mod 3) and j < 3·section[1], on axis 2 (width) when
// j ≡ 2 (mod 3) and j < 3·section[2], else on axis 0 (time). Absent, transformers' default.
func mropeSection(params map[string]any, prefix string, c *Config) error {
	c.MRoPESection = [3]int{11, 11, 10}
	raw, ok := params["mrope_section"]
	if !ok {
		return nil
	}
	list, isList := raw.([]any)
	if !isList || len(list) != 3 {
		return &FieldError{prefix + "mrope_section", "three integers", describe(raw)}
	}
	for i, x := range list {
		f, isNum := x.(float64)
		if !isNum || f != math.Trunc(f) || f < 0 || f > 1<<20 {
			return &FieldError{prefix + "mrope_section", "three non-negative integers", describe(raw)}
		}
		c.MRoPESection[i] = int(f)
	}
	if il, ok := params["mrope_interleaved"]; ok && il != true {
		return &FieldError{prefix + "mrope_interleaved", "true (Qwen3.5/3.6 interleaves the sections)", describe(il)}
	}
	return nil
}

// MRoPEAxis is the position axis (0 time, 1 height, 2 width) that rotary frequency j reads.
func (c *Config) MRoPEAxis(j int) int {
	s := c.MRoPESection
	switch {
	case j%3 == 1 && j < 3*s[1]:
		return 1
	case j%3 == 2 && j < 3*s[2]:
		return 2
	}
	return 0
}
