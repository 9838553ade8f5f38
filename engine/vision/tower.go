package vision

import (
	"fmt"

	"github.com/lilyformac/lily/engine/config"
	"github.com/lilyformac/lily/engine/model"
)

// Tower is the vision tower's float32 CPU reference: transformers' Qwen3_5MoeVisionModel
// forward pass for one still image, with float32 copies of the weights (bfloat16 widens
// exactly, so nothing is lost by copying).
type Tower struct {
	cfg        config.Vision
	patch      dense
	pos        []float32 // [Side·Side][Hidden]
	blocks     []towerBlock
	mergerNorm norm
	fc1, fc2   dense
}

// towerBlock is one pre-LayerNorm transformer block.
type towerBlock struct {
	norm1, norm2        norm
	qkv, proj, fc1, fc2 dense
}

// NewTower copies the tower's weights to float32. It panics when a weight's size disagrees
// with its declared shape (the loader checks shapes; this guards hand-built weights).
func NewTower(v *config.Vision, w *model.Vision) *Tower {
	t := &Tower{
		cfg:        *v,
		patch:      newDense(w.Patch),
		pos:        w.PosEmbed.Float32(),
		mergerNorm: newNorm(w.MergerNorm),
		fc1:        newDense(w.MergerFC1),
		fc2:        newDense(w.MergerFC2),
	}
	if len(t.pos) != v.Side*v.Side*v.Hidden {
		panic(fmt.Sprintf("vision: position table has %d values, expected %d×%d", len(t.pos), v.Side*v.Side, v.Hidden))
	}
	for _, b := range w.Blocks {
		t.blocks = append(t.blocks, towerBlock{
			norm1: newNorm(b.Norm1), norm2: newNorm(b.Norm2),
			qkv: newDense(b.QKV), proj: newDense(b.Proj), fc1: newDense(b.FC1), fc2: newDense(b.FC2),
		})
	}
	return t
}

func newDense(l model.Linear) dense {
	d := dense{w: l.W.Float32(), b: l.B.Float32(), out: l.W.Rows, in: l.W.Cols}
	if len(d.w) != d.out*d.in || len(d.b) != d.out {
		panic(fmt.Sprintf("vision: linear layer [%d, %d] has %d weights and %d biases", d.out, d.in, len(d.w), len(d.b)))
	}
	return d
}

func newNorm(n model.LayerNorm) norm { return norm{w: n.W.Float32(), b: n.B.Float32()} }

// Encode runs the tower on one image: px.Tokens() rows of OutHidden values, one per merged
// block in block-major order. It panics on pixels that do not fit the configuration: the
// preprocessing produces them, so a mismatch is a programming error.
func (t *Tower) Encode(px *Pixels) [][]float32 {
	t.check(px)
	c := &t.cfg
	h := t.patch.apply(px.Rows)
	pos := positionEmbeddings(t.pos, c.Side, c.Hidden, px.GridH, px.GridW, c.Merge)
	for p := range h {
		for d := range h[p] {
			h[p][d] += pos[p][d]
		}
	}
	rt := newRotary(px.GridH, px.GridW, c.Merge, c.HeadDim(), c.RopeTheta)
	for i := range t.blocks {
		t.blocks[i].forward(h, rt, c.Heads, c.Eps)
	}
	return t.merge(h)
}

func (t *Tower) check(px *Pixels) {
	c := &t.cfg
	m := c.Merge
	switch {
	case px.Merge != m:
		panic(fmt.Sprintf("vision: pixels merged by %d, the tower by %d", px.Merge, m))
	case px.GridH < m || px.GridW < m || px.GridH%m != 0 || px.GridW%m != 0:
		panic(fmt.Sprintf("vision: grid %d×%d is not a positive multiple of %d", px.GridH, px.GridW, m))
	case len(px.Rows) != px.GridH*px.GridW:
		panic(fmt.Sprintf("vision: %d rows for a %d×%d grid", len(px.Rows), px.GridH, px.GridW))
	}
	for i, r := range px.Rows {
		if len(r) != c.PatchInputs() {
			panic(fmt.Sprintf("vision: row %d has %d values, expected %d", i, len(r), c.PatchInputs()))
		}
	}
}

// forward updates h in place: h += proj(attention(LN1(h))); h += fc2(gelu(fc1(LN2(h)))).
func (b *towerBlock) forward(h [][]float32, rt *rotary, heads int, eps float32) {
	a := attention(b.qkv.apply(b.norm1.apply(h, eps)), rt, heads, queryBlock)
	addInto(h, b.proj.apply(a))
	f := b.fc1.apply(b.norm2.apply(h, eps))
	for _, row := range f {
		for i, x := range row {
			row[i] = geluTanh(x)
		}
	}
	addInto(h, b.fc2.apply(f))
}

func addInto(h, d [][]float32) {
	for p := range h {
		for i := range h[p] {
			h[p][i] += d[p][i]
		}
	}
}

// merge is the patch merger: LayerNorm per patch, each block's Merge² consecutive rows joined
// into one vector, then FC1, exact GELU and FC2 to the text model's width.
func (t *Tower) merge(h [][]float32) [][]float32 {
	y := t.mergerNorm.apply(h, t.cfg.Eps)
	group := t.cfg.Merge * t.cfg.Merge
	joined := matrix(len(y)/group, group*t.cfg.Hidden)
	for i, row := range joined {
		for g := range group {
			copy(row[g*t.cfg.Hidden:], y[i*group+g])
		}
	}
	f := t.fc1.apply(joined)
	for _, row := range f {
		for i, x := range row {
			row[i] = geluErf(x)
		}
	}
	return t.fc2.apply(f)
}
