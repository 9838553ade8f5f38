package model

import (
	"fmt"
	"strings"

	"github.com/lilyformac/lily/engine/config"
	"github.com/lilyformac/lily/engine/quant"
	"github.com/lilyformac/lily/engine/safetensors"
)

// Dense is an unquantized tensor seen as a [Rows, Cols] matrix (a vector has Rows 1): bfloat16
// bits viewing the mapped file, or float32 values. The tower is stored unquantized.
type Dense struct {
	Rows, Cols int
	BF16       []uint16
	F32        []float32
}

// Float32 is a float32 copy of the values (bfloat16 widens exactly).
func (d Dense) Float32() []float32 {
	if d.F32 != nil {
		return append([]float32(nil), d.F32...)
	}
	return quant.BF16sToF32(d.BF16)
}

// Bytes is the tensor's size as stored.
func (d Dense) Bytes() int64 {
	if d.F32 != nil {
		return 4 * int64(len(d.F32))
	}
	return 2 * int64(len(d.BF16))
}

// Linear is a dense layer with a bias: y = x·Wᵀ + b, W [out, in].
type Linear struct {
	W, B Dense
}

// LayerNorm is a LayerNorm's gain and shift.
type LayerNorm struct {
	W, B Dense
}

// Vision is the vision tower's weights (transformers' Qwen3_5MoeVisionModel).
type Vision struct {
	// Patch is the patch embedding for a still image: [hidden, 3·P·P] over inputs [c][y][x], the
	// two temporal halves of the stored Conv3d weight summed (a still image repeats its frame, so
	// both halves see the same pixels), in float32.
	Patch    Linear
	PosEmbed Dense // [NumPositions, hidden]
	Blocks   []VisionBlock
	// Merger: LayerNorm per patch, then each 2×2 block's four rows as one vector through FC1,
	// GELU (exact erf) and FC2 to the text width.
	MergerNorm    LayerNorm
	MergerFC1     Linear // [4·hidden, 4·hidden]
	MergerFC2     Linear // [out, 4·hidden]
	Prefix        string // the names' prefix in the checkpoint
	PatchStoredAs string // "mlx" ([D, T, P, P, 3]) or "hf" ([D, 3, T, P, P])
}

// VisionBlock is one pre-LayerNorm transformer block of the tower.
type VisionBlock struct {
	Norm1, Norm2 LayerNorm
	QKV          Linear // [3·hidden, hidden]: q | k | v, each head-major
	Proj         Linear // [hidden, hidden]
	FC1          Linear // [intermediate, hidden], then tanh-GELU
	FC2          Linear // [hidden, intermediate]
}

// Bytes is the tower's weight memory as stored (the patch weight as folded).
func (v *Vision) Bytes() int64 {
	n := v.Patch.W.Bytes() + v.Patch.B.Bytes() + v.PosEmbed.Bytes()
	n += v.MergerNorm.W.Bytes() + v.MergerNorm.B.Bytes()
	for _, l := range []Linear{v.MergerFC1, v.MergerFC2} {
		n += l.W.Bytes() + l.B.Bytes()
	}
	for _, b := range v.Blocks {
		for _, l := range []Linear{b.QKV, b.Proj, b.FC1, b.FC2} {
			n += l.W.Bytes() + l.B.Bytes()
		}
		n += b.Norm1.W.Bytes() + b.Norm1.B.Bytes() + b.Norm2.W.Bytes() + b.Norm2.B.Bytes()
	}
	return n
}

// visionPrefixes are where checkpoints keep the tower: mlx-vlm's conversions (the pinned one)
// under vision_tower., transformers' under model.visual., and older files under the others.
var visionPrefixes = []string{"vision_tower.", "model.visual.", "model.language_model.visual.", "language_model.model.visual.", "visual.", "language_model.vision_tower."}

// vision loads the tower named by cfg.Vision. A checkpoint with no tower tensors at all turns
// vision off (with the reason) rather than failing: the text model still serves.
func (l *loader) vision(w *Weights) {
	v := l.cfg.Vision
	if v == nil {
		return
	}
	prefix := ""
	for _, p := range visionPrefixes {
		if has(l.ck, p+"patch_embed.proj.weight") {
			prefix = p
			break
		}
	}
	if prefix == "" {
		l.cfg.Vision, l.cfg.VisionOff = nil, "the checkpoint has no vision tower tensors (vision_tower.patch_embed.proj.weight or model.visual.…)"
		return
	}
	D, F, M := v.Hidden, v.Intermediate, v.Hidden*v.Merge*v.Merge
	vw := &Vision{Prefix: prefix}
	vw.Patch.W, vw.PatchStoredAs = l.patch(prefix+"patch_embed.proj.weight", v)
	vw.Patch.B = l.dense(prefix+"patch_embed.proj.bias", 1, D)
	vw.PosEmbed = l.dense(prefix+"pos_embed.weight", v.NumPositions, D)
	for i := range v.Depth {
		p := fmt.Sprintf("%sblocks.%d.", prefix, i)
		vw.Blocks = append(vw.Blocks, VisionBlock{
			Norm1: l.layerNorm(p+"norm1", D), Norm2: l.layerNorm(p+"norm2", D),
			QKV: l.dense2(p+"attn.qkv", 3*D, D), Proj: l.dense2(p+"attn.proj", D, D),
			FC1: l.dense2(p+"mlp.linear_fc1", F, D), FC2: l.dense2(p+"mlp.linear_fc2", D, F),
		})
	}
	vw.MergerNorm = l.layerNorm(prefix+"merger.norm", D)
	vw.MergerFC1 = l.dense2(prefix+"merger.linear_fc1", M, M)
	vw.MergerFC2 = l.dense2(prefix+"merger.linear_fc2", v.OutHidden, M)
	if l.err == nil {
		w.Vision = vw
	}
}

func (l *loader) dense2(module string, rows, cols int) Linear {
	return Linear{W: l.dense(module+".weight", rows, cols), B: l.dense(module+".bias", 1, rows)}
}

func (l *loader) layerNorm(module string, n int) LayerNorm {
	return LayerNorm{W: l.dense(module+".weight", 1, n), B: l.dense(module+".bias", 1, n)}
}

// dense views an unquantized bf16 (or float32) tensor of rows×cols values ([cols] when rows is 1).
func (l *loader) dense(name string, rows, cols int) Dense {
	t := l.tensor(name, safetensors.BF16, safetensors.F32)
	if l.err != nil {
		return Dense{}
	}
	want := []int{rows, cols}
	if rows == 1 {
		want = []int{cols}
	}
	if !shapeEq(t.Shape, want) {
		l.fail("tensor %s: shape %v, expected %v", name, t.Shape, want)
		return Dense{}
	}
	d := Dense{Rows: rows, Cols: cols}
	if t.DType == safetensors.F32 {
		d.F32 = t.Float32s()
	} else {
		d.BF16 = t.Uint16s()
	}
	return d
}

// patch loads the Conv3d patch weight, stored channels-last by mlx-vlm ([D, T, P, P, 3]) or as
// transformers has it ([D, 3, T, P, P]), and folds its temporal halves into [D][c][y][x].
func (l *loader) patch(name string, v *config.Vision) (Dense, string) {
	t := l.tensor(name, safetensors.BF16, safetensors.F32)
	if l.err != nil {
		return Dense{}, ""
	}
	D, T, P := v.Hidden, v.TemporalPatch, v.PatchSize
	mlx, hf := []int{D, T, P, P, 3}, []int{D, 3, T, P, P}
	var at func(d, c, t, y, x int) int // the stored index of W[d][c][t][y][x]
	layout := ""
	switch {
	case shapeEq(t.Shape, mlx):
		layout = "mlx"
		at = func(d, c, tt, y, x int) int { return (((d*T+tt)*P+y)*P+x)*3 + c }
	case shapeEq(t.Shape, hf):
		layout = "hf"
		at = func(d, c, tt, y, x int) int { return (((d*3+c)*T+tt)*P+y)*P + x }
	default:
		l.fail("tensor %s: shape %v, expected %v (mlx-vlm, channels last) or %v (transformers)", name, t.Shape, mlx, hf)
		return Dense{}, ""
	}
	var src []float32
	if t.DType == safetensors.F32 {
		src = t.Float32s()
	} else {
		src = quant.BF16sToF32(t.Uint16s())
	}
	out := make([]float32, D*3*P*P)
	for d := range D {
		for c := range 3 {
			for y := range P {
				for x := range P {
					var s float32
					for tt := range T {
						s += src[at(d, c, tt, y, x)]
					}
					out[((d*3+c)*P+y)*P+x] = s
				}
			}
		}
	}
	return Dense{Rows: D, Cols: 3 * P * P, F32: out}, layout
}

// visionIgnored says whether a tensor belongs to a tower that is not loaded.
func visionIgnored(name string) bool {
	for _, p := range visionPrefixes {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	return false
}
