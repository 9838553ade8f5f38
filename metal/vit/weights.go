package vit

import (
	"fmt"

	"github.com/lilyformac/lily/engine/model"
	"github.com/lilyformac/lily/metal/decode"
)

// Weight is one Weights buffer's contents: Mapped when Data is the checkpoint's own bytes (a
// bfloat tensor viewing the mapped file, which a device able to wrap host memory serves without
// a copy), else Go memory (the folded float32 patch weight, its bias widened to float32).
type Weight struct {
	Data   []byte
	Mapped bool
}

// WeightData is every Weights buffer's contents from the loaded tower w, by buffer name, each
// checked against the plan's size. The kernels read bfloat gains, tables and matrices: a
// checkpoint storing the tower in float32 is refused rather than rounded.
func (t *Tower) WeightData(w *model.Vision) (map[string]Weight, error) {
	if w == nil || len(w.Blocks) != t.Config.Depth {
		return nil, fmt.Errorf("vit: the checkpoint's tower does not have the plan's %d blocks", t.Config.Depth)
	}
	out := map[string]Weight{
		Prefix + "patch_embed.proj.weight": {Data: decode.BytesOf(w.Patch.W.Float32())},
		Prefix + "patch_embed.proj.bias":   {Data: decode.BytesOf(w.Patch.B.Float32())},
	}
	bf := map[string]model.Dense{"pos_embed.weight": w.PosEmbed}
	addNorm := func(p string, n model.LayerNorm) { bf[p+".weight"], bf[p+".bias"] = n.W, n.B }
	addLinear := func(p string, l model.Linear) { bf[p+".weight"], bf[p+".bias"] = l.W, l.B }
	for i, b := range w.Blocks {
		p := fmt.Sprintf("blocks.%d.", i)
		addNorm(p+"norm1", b.Norm1)
		addNorm(p+"norm2", b.Norm2)
		addLinear(p+"attn.qkv", b.QKV)
		addLinear(p+"attn.proj", b.Proj)
		addLinear(p+"mlp.linear_fc1", b.FC1)
		addLinear(p+"mlp.linear_fc2", b.FC2)
	}
	addNorm("merger.norm", w.MergerNorm)
	addLinear("merger.linear_fc1", w.MergerFC1)
	addLinear("merger.linear_fc2", w.MergerFC2)
	for name, d := range bf {
		if d.BF16 == nil {
			return nil, fmt.Errorf("vit: %s%s is not bfloat16 in the checkpoint: the tower's kernels read bfloat16", w.Prefix, name)
		}
		out[Prefix+name] = Weight{Data: decode.BytesOf(d.BF16), Mapped: true}
	}
	for name, i := range t.Weights {
		if got, want := int64(len(out[name].Data)), t.Plan.Buffers[i].Size; got != want {
			return nil, fmt.Errorf("vit: %s: %d bytes in the checkpoint, the plan expects %d", name, got, want)
		}
	}
	return out, nil
}
