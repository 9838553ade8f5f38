package kernels

import (
	"fmt"

	"github.com/lilyformac/lily/engine/f32"
	"github.com/lilyformac/lily/engine/quant"
)

// qmm function constant indices (qmm.metal).
const (
	QMMTokens = 0 // uint QMM_M: rows of X and Y
	QMMRows   = 1 // uint QMM_N: rows of W (output features)
	QMMCols   = 2 // uint QMM_K: columns of W (input features), a multiple of 64
	QMMRows1  = 3 // uint QMM_N1: rows of matrix 1 (0: none); QMMRows2, QMMRows3 the next
	QMMRows2  = 4
	QMMRows3  = 5
)

// qmm geometry: a threadgroup of QMMThreads computes a bm × QMMTileCols(bm) tile of Y, bm being
// one of QMMTileHeights.
const QMMThreads = 128

// QMMTileHeights are the tile heights qmm.metal is instanced for (BM: 32 is qmm_q4 and
// moe_gate_up_mm, 16 and 8 their _m16 and _m8 instances).
var QMMTileHeights = []int{32, 16, 8}

// QMMTileCols is the tile width for a tile height: the tile is always 1,024 elements.
func QMMTileCols(bm int) int { return 1024 / bm }

// QMMTileRows is the tile height for a GEMM over tokens rows: the smallest that holds them, up to
// 32, so a chunk of 8 pads to 8 rows, not 32.
func QMMTileRows(tokens int) int {
	switch {
	case tokens <= 8:
		return 8
	case tokens <= 16:
		return 16
	}
	return 32
}

// QMMKernel names qmm's instance for a bit width and tile height.
func QMMKernel(bits, bm int) string { return tileKernel(fmt.Sprintf("qmm_q%d", bits), bm) }

// tileKernel names a qmm.metal kernel's instance for a tile height: the name itself for 32 rows,
// else the name and _m16 or _m8.
func tileKernel(name string, bm int) string {
	if bm == 32 {
		return name
	}
	return fmt.Sprintf("%s_m%d", name, bm)
}

// QMM is the Go reference of qmm_q4/qmm_q8: engine/quant's matrix-vector product for each of the
// tokens' rows of x ([tokens][m.Cols]), giving y [tokens][m.Rows].
func QMM(m *quant.Matrix, x []float32, tokens int) []float32 {
	y := make([]float32, tokens*m.Rows)
	for t := range tokens {
		quant.MatVec(m, y[t*m.Rows:(t+1)*m.Rows], x[t*m.Cols:(t+1)*m.Cols])
	}
	return y
}

// QMMBuffers are qmm's buffers, by role: matrix j's at QMVMultiMatrix(j) (codes, scales,
// biases) and its output Y[j] after them, as qmv_multi binds them; X at QMVMultiX.
type QMMBuffers[B any] struct {
	W []QMatrixBuffers[B]
	Y []B // [tokens][rows[j]] float32
	X B   // [tokens][cols] float32
}

// QMMCall is qmm_q<bits>: Y[j] = x·W[j]ᵀ for tokens rows of x over 1 to 4 matrices of rows[j] ×
// cols, in tiles of QMMTileRows(tokens) rows. An absent matrix's slots are bound to matrix 0's
// buffers (never read).
func QMMCall[B any](bits, tokens, cols int, rows []int, b QMMBuffers[B]) Call[B] {
	if len(rows) < 1 || len(rows) > QMVMaxMatrices || len(b.W) != len(rows) || len(b.Y) != len(rows) {
		panic(fmt.Sprintf("kernels: qmm of %d matrices, %d weights, %d outputs", len(rows), len(b.W), len(b.Y)))
	}
	bm := QMMTileRows(tokens)
	c := map[int]any{QMMTokens: tokens, QMMCols: cols}
	bs := map[int]B{QMVMultiX: b.X}
	tiles := 0
	for j, idx := range []int{QMMRows, QMMRows1, QMMRows2, QMMRows3} {
		k, n := 0, 0 // an absent matrix: no rows, matrix 0's buffers
		if j < len(rows) {
			k, n = j, rows[j]
			tiles += groupsFor(n, QMMTileCols(bm))
		}
		c[idx] = n
		b.W[k].bind(bs, QMVMultiMatrix(j))
		bs[QMVMultiMatrix(j)+3] = b.Y[k]
	}
	return Call[B]{
		Kernel: QMMKernel(bits, bm), Constants: c, Buffers: bs,
		Threadgroups: [3]int{tiles, groupsFor(tokens, bm), 1}, Group: grid(QMMThreads),
	}
}

// SimdgroupLayout is the element (row, column) lane l holds first in an 8×8 simdgroup matrix
// (the second is at column+1): Apple GPUs' layout, as metal/emu implements it.
func SimdgroupLayout(l int) (row, col int) {
	return (l/4)&4 + (l/2)%4, (l/4)&2*2 + l%2*2
}

// LayoutProbeBuffers are simdgroup_layout_probe's buffers.
type LayoutProbeBuffers[B any] struct {
	Labels B // 0: [64] float32, element (r, c) = r·8 + c
	Out    B // 1: [32][2] float32, each lane's thread_elements()
}

// LayoutProbeCall is simdgroup_layout_probe over one simdgroup.
func LayoutProbeCall[B any](b LayoutProbeBuffers[B]) Call[B] {
	return Call[B]{Kernel: "simdgroup_layout_probe", Constants: map[int]any{QMMTokens: 1, QMMRows: 1, QMMCols: 64},
		Buffers: map[int]B{0: b.Labels, 1: b.Out}, Threadgroups: grid(1), Group: grid(32)}
}

// MoEGateUpSorted is the Go reference of moe_gate_up_mm: for each pair of sorted (moe_sort's
// grouping of a chunk's routing), act[pair] = silu(gate_e·x[tok]) · (up_e·x[tok]) over expert e's
// rows e·inter .. of the stacked gate and up tensors; x is [tokens][gate.Cols].
func MoEGateUpSorted(gate, up *quant.Matrix, inter int, sorted MoESorted, x []float32) []float32 {
	h := gate.Cols
	act := make([]float32, len(sorted.Tok)*inter)
	g, u := make([]float32, inter), make([]float32, inter)
	for e := range len(sorted.Offs) - 1 {
		ge, ue := gate.RowRange(e*inter, inter), up.RowRange(e*inter, inter)
		for p := sorted.Offs[e]; p < sorted.Offs[e+1]; p++ {
			xt := x[int(sorted.Tok[p])*h : (int(sorted.Tok[p])+1)*h]
			quant.MatVec(ge, g, xt)
			quant.MatVec(ue, u, xt)
			for r := range inter {
				act[int(p)*inter+r] = f32.Silu(g[r]) * u[r]
			}
		}
	}
	return act
}

// MoEGateUpMMBuffers are moe_gate_up_mm's buffers, by role.
type MoEGateUpMMBuffers[B any] struct {
	Gate, Up QMatrixBuffers[B] // 0-2, 3-5: stacked [E·I][H] 4-bit
	X        B                 // 6: [tokens][H] normed inputs
	Tok      B                 // 7: [pairs] each sorted pair's token (moe_sort)
	Blocks   B                 // 8: moe_sort's block map
	Act      B                 // 9: [pairs][I]
}

// MoEGateUpMMCall is moe_gate_up_mm over blocks blocks of a map of bm rows a block
// (MoEShape.BlockRows, MoEShape.MoEBlocks), inter intermediate rows per expert, hidden input
// features.
func MoEGateUpMMCall[B any](hidden, inter, pairs, blocks, bm int, b MoEGateUpMMBuffers[B]) Call[B] {
	bs := map[int]B{6: b.X, 7: b.Tok, 8: b.Blocks, 9: b.Act}
	b.Gate.bind(bs, 0)
	b.Up.bind(bs, 3)
	return Call[B]{
		Kernel: tileKernel("moe_gate_up_mm", bm), Constants: map[int]any{QMMTokens: pairs, QMMRows: inter, QMMCols: hidden}, Buffers: bs,
		Threadgroups: [3]int{groupsFor(inter, QMMTileCols(bm)), blocks, 1}, Group: grid(QMMThreads),
	}
}

// MoEDownSorted is the Go reference of moe_down_mm: for each sorted pair, y[pair] =
// w[pair]·(down_e·act[pair]) over expert e's rows e·hidden .. of the stacked down tensor.
func MoEDownSorted(down *quant.Matrix, hidden int, sorted MoESorted, act []float32) []float32 {
	inter := down.Cols
	y := make([]float32, len(sorted.Tok)*hidden)
	for e := range len(sorted.Offs) - 1 {
		de := down.RowRange(e*hidden, hidden)
		for p := sorted.Offs[e]; p < sorted.Offs[e+1]; p++ {
			row := y[int(p)*hidden : (int(p)+1)*hidden]
			quant.MatVec(de, row, act[int(p)*inter:(int(p)+1)*inter])
			for d := range row {
				row[d] *= sorted.W[p]
			}
		}
	}
	return y
}

// MoEDownMMBuffers are moe_down_mm's buffers, by role.
type MoEDownMMBuffers[B any] struct {
	Down   QMatrixBuffers[B] // 0-2: stacked [E·H][I] 4-bit
	Act    B                 // 3: [pairs][I] moe_gate_up_mm's
	W      B                 // 4: [pairs] the sorted pairs' routing weights
	Blocks B                 // 5: moe_sort's block map
	Y      B                 // 6: [pairs][H]
}

// MoEDownMMCall is moe_down_mm over blocks blocks of a map of bm rows a block, hidden output dims,
// inter input features per expert.
func MoEDownMMCall[B any](hidden, inter, pairs, blocks, bm int, b MoEDownMMBuffers[B]) Call[B] {
	bs := map[int]B{3: b.Act, 4: b.W, 5: b.Blocks, 6: b.Y}
	b.Down.bind(bs, 0)
	return Call[B]{
		Kernel: tileKernel("moe_down_mm", bm), Constants: map[int]any{QMMTokens: pairs, QMMRows: hidden, QMMCols: inter}, Buffers: bs,
		Threadgroups: [3]int{groupsFor(hidden, QMMTileCols(bm)), blocks, 1}, Group: grid(QMMThreads),
	}
}
