//go:build linux

package kernels

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/lilyformac/lily/engine/model"
	"github.com/lilyformac/lily/engine/quant"
	"github.com/lilyformac/lily/metal/emu"
)

// TestMoEChunkRouting: moe_topk over a chunk's tokens routes each as MoERoute does, and
// moe_sort groups the chunk's pairs by expert (then token) with a block map within its bound,
// as MoESort; tokens that pick the same experts, experts nobody picks and experts with more
// than a block's pairs included.
func TestMoEChunkRouting(t *testing.T) {
	lib := library(t, emu.Options{}, "moe.metal")
	r := rand.New(rand.NewPCG(91, 92))
	for _, c := range []struct {
		s      MoEShape
		tokens int
	}{
		{MoEShape{H: 64, E: 16, K: 4, I: 64, SI: 64}, 1},
		{MoEShape{H: 64, E: 16, K: 4, I: 64, SI: 64}, 45}, // 180 pairs over 16 experts: several blocks each
		{MoEShape{H: 2048, E: 256, K: 8, I: 512, SI: 512}, 70},
	} {
		for _, order := range emu.Orders {
			for _, bm := range QMMTileHeights {
				t.Run(fmt.Sprintf("e%d_k%d_t%d_b%d_%v", c.s.E, c.s.K, c.tokens, bm, order), func(t *testing.T) {
					s, n := c.s, c.tokens
					logits := make([]float32, n*s.E)
					for i := range logits {
						logits[i] = float32(r.NormFloat64() * 2)
					}
					if n > 1 {
						copy(logits[s.E:2*s.E], logits[:s.E]) // two tokens with the same choice
					}
					shared := randFloats(r, n, 1)
					var ids []uint32
					var weights []float32
					for tk := range n {
						i, w := MoERoute(logits[tk*s.E:(tk+1)*s.E], shared[tk], s.K)
						ids, weights = append(ids, i...), append(weights, w...)
					}
					bIDs, bW := emu.NewBuffer(4*n*s.K), emu.NewBuffer(4*n*(s.K+1))
					mustDispatch(t, lib, MoETopKChunkCall(s, n, MoETopKBuffers[*emu.Buffer]{Logits: emu.BufferOf(logits), Shared: emu.BufferOf(shared), IDs: bIDs, Weights: bW}), order, 1)
					if !slices.Equal(bIDs.Uint32s(), ids) {
						t.Fatalf("ids %v, MoERoute %v", bIDs.Uint32s()[:min(16, len(ids))], ids[:min(16, len(ids))])
					}
					for i, w := range weights {
						if math.Abs(float64(bW.Float32s()[i]-w)) > 1e-6 {
							t.Fatalf("weight %d: %g, MoERoute %g", i, bW.Float32s()[i], w)
						}
					}
					want := MoESort(s, ids, bW.Float32s(), n, bm)
					nb := s.MoEBlocks(n, bm)
					offs, tok, w, blocks, pos := emu.NewBuffer(4*(s.E+1)), emu.NewBuffer(4*n*s.K), emu.NewBuffer(4*n*s.K), emu.NewBuffer(16*nb), emu.NewBuffer(4*n*s.K)
					for _, b := range []*emu.Buffer{offs, tok, w, blocks, pos} {
						b.Fill(0xEE)
					}
					mustDispatch(t, lib, MoESortCall(s, n, bm, MoESortBuffers[*emu.Buffer]{IDs: bIDs, Weights: bW, Offs: offs, Tok: tok, W: w, Blocks: blocks, Pos: pos}), order, 2)
					if !slices.Equal(offs.Uint32s(), want.Offs) || !slices.Equal(tok.Uint32s(), want.Tok) || !slices.Equal(w.Float32s(), want.W) || !slices.Equal(pos.Uint32s(), want.Pos) {
						t.Fatalf("sorted pairs differ from MoESort's")
					}
					used := 0
					for i, b := range want.Blocks {
						got := [4]uint32(blocks.Uint32s()[4*i : 4*i+4])
						if got != b {
							t.Fatalf("block %d: %v, MoESort %v", i, got, b)
						}
						if b[0] != 0xffffffff {
							used++
						}
					}
					if len(want.Blocks) != nb || used > nb {
						t.Fatalf("%d blocks used of a bound of %d", used, nb)
					}
				})
			}
		}
	}
}

// TestMoESortASan runs moe_sort through the AddressSanitizer helper process.
func TestMoESortASan(t *testing.T) {
	lib := library(t, emu.Options{ASan: true}, "moe.metal")
	s, n := MoEShape{H: 64, E: 16, K: 4, I: 64, SI: 64}, 40
	ids, weights := make([]uint32, n*s.K), make([]float32, n*(s.K+1))
	for i := range ids {
		ids[i] = uint32((i*7 + i/4) % s.E)
	}
	offs, tok, w, blocks := emu.NewBuffer(4*(s.E+1)), emu.NewBuffer(4*n*s.K), emu.NewBuffer(4*n*s.K), emu.NewBuffer(16*s.MoEBlocks(n, 8))
	mustDispatch(t, lib, MoESortCall(s, n, 8, MoESortBuffers[*emu.Buffer]{IDs: emu.BufferOf(ids), Weights: emu.BufferOf(weights), Offs: offs, Tok: tok, W: w, Blocks: blocks, Pos: emu.NewBuffer(4 * n * s.K)}), emu.Reverse, 1)
	want := MoESort(s, ids, weights, n, 8)
	if !slices.Equal(tok.Uint32s(), want.Tok) || !slices.Equal(blocks.Uint32s(), want.BlockWords()) {
		t.Fatal("sorted tokens or blocks differ from MoESort's")
	}
}

// TestMoEGateUpMM: the grouped gate/up GEMM over moe_sort's blocks equals each pair's expert
// gate/up product with SwiGLU (MoEGateUpSorted): experts with several blocks, experts with none,
// blocks past the map's end, an intermediate size that is not a multiple of the tile width; every
// tile height in every order.
func TestMoEGateUpMM(t *testing.T) {
	lib := library(t, emu.Options{}, "qmm.metal")
	r := rand.New(rand.NewPCG(93, 94))
	for _, c := range []struct {
		s      MoEShape
		tokens int
	}{
		{MoEShape{H: 128, E: 16, K: 4, I: 48, SI: 64}, 45},
		{MoEShape{H: 256, E: 8, K: 2, I: 64, SI: 64}, 3},
	} {
		for _, order := range emu.Orders {
			for _, bm := range QMMTileHeights {
				t.Run(fmt.Sprintf("e%d_k%d_t%d_b%d_%v", c.s.E, c.s.K, c.tokens, bm, order), func(t *testing.T) {
					s, n := c.s, c.tokens
					ids, weights := make([]uint32, n*s.K), make([]float32, n*(s.K+1))
					for tk := range n {
						for k, e := range r.Perm(s.E - 2)[:s.K] { // distinct per token; the last two experts get nobody
							ids[tk*s.K+k] = uint32(e)
						}
					}
					sorted := MoESort(s, ids, weights, n, bm)
					gate := quantize(r, s.E*s.I, s.H)
					up := quantize(r, s.E*s.I, s.H)
					x := randFloats(r, n*s.H, 1)
					want := MoEGateUpSorted(gate, up, s.I, sorted, x)
					blocks := sorted.BlockWords()
					pairs := n * s.K
					act := emu.NewBuffer(4 * pairs * s.I)
					act.Fill(0xFF)
					mustDispatch(t, lib, MoEGateUpMMCall(s.H, s.I, pairs, len(sorted.Blocks), bm, MoEGateUpMMBuffers[*emu.Buffer]{
						Gate: qbufsOf(gate), Up: qbufsOf(up), X: emu.BufferOf(x), Tok: emu.BufferOf(sorted.Tok), Blocks: emu.BufferOf(blocks), Act: act,
					}), order, 5)
					if e := relErr(act.Float32s(), want); !(e <= 2e-6) {
						t.Fatalf("relative error %.2g", e)
					}
				})
			}
		}
	}
}

// TestMoEGateUpMMASan runs the grouped GEMM through the AddressSanitizer helper process.
func TestMoEGateUpMMASan(t *testing.T) {
	lib := library(t, emu.Options{ASan: true}, "qmm.metal")
	r := rand.New(rand.NewPCG(95, 96))
	s, n := MoEShape{H: 64, E: 4, K: 2, I: 40, SI: 64}, 20
	ids := make([]uint32, n*s.K)
	for tk := range n {
		ids[tk*s.K], ids[tk*s.K+1] = uint32(tk%4), uint32((tk+1)%4)
	}
	sorted := MoESort(s, ids, make([]float32, n*(s.K+1)), n, 8)
	gate, up, x := quantize(r, s.E*s.I, s.H), quantize(r, s.E*s.I, s.H), randFloats(r, n*s.H, 1)
	blocks := sorted.BlockWords()
	act := emu.NewBuffer(4 * n * s.K * s.I)
	mustDispatch(t, lib, MoEGateUpMMCall(s.H, s.I, n*s.K, len(sorted.Blocks), 8, MoEGateUpMMBuffers[*emu.Buffer]{
		Gate: qbufsOf(gate), Up: qbufsOf(up), X: emu.BufferOf(x), Tok: emu.BufferOf(sorted.Tok), Blocks: emu.BufferOf(blocks), Act: act,
	}), emu.Reverse, 1)
	if e := relErr(act.Float32s(), MoEGateUpSorted(gate, up, s.I, sorted, x)); !(e <= 2e-6) {
		t.Fatalf("relative error %.2g", e)
	}
}

func quantize(r *rand.Rand, rows, cols int) *quant.Matrix {
	return quant.Quantize(randFloats(r, rows*cols, 0.05), rows, cols, 4)
}

func qbufsOf(m *quant.Matrix) qbufs {
	return qbufs{Words: emu.BufferOf(m.Words), Scales: emu.BufferOf(m.Scales), Biases: emu.BufferOf(m.Biases)}
}

// TestMoEChunk: a prefill chunk's whole MoE block on the GPU — moe_topk, moe_sort, the grouped
// gate/up and down GEMMs, the shared expert through the same kernels over an identity map, and
// moe_combine (or moe_combine_norm, whose normed rows are checked too) — adds to every token's
// residual what the decode block's reference (MoEGateUp + MoEDownCombine) adds for that token
// alone.
func TestMoEChunk(t *testing.T) {
	runMoEChunk(t, emu.Options{}, MoEShape{H: 128, E: 16, K: 4, I: 64, SI: 128}, 37, emu.Orders)
}

func TestMoEChunkASan(t *testing.T) {
	runMoEChunk(t, emu.Options{ASan: true}, MoEShape{H: 64, E: 4, K: 2, I: 64, SI: 64}, 9, []emu.Order{emu.Shuffle, emu.Reverse})
}

func runMoEChunk(t *testing.T, opts emu.Options, s MoEShape, n int, orders []emu.Order) {
	t.Helper()
	libQ, libM := library(t, opts, "qmm.metal"), library(t, opts, "moe.metal")
	r := rand.New(rand.NewPCG(97, 98))
	mo := &model.MoE{
		Gate: quantize(r, s.E*s.I, s.H), Up: quantize(r, s.E*s.I, s.H), Down: quantize(r, s.E*s.H, s.I),
		SharedGate: quantize(r, s.SI, s.H), SharedUp: quantize(r, s.SI, s.H), SharedDown: quantize(r, s.H, s.SI),
	}
	x, res := randFloats(r, n*s.H, 1), randFloats(r, n*s.H, 1)
	logits, shared := randFloats(r, n*s.E, 2), randFloats(r, n, 1)
	gain := randGain(r, s.H)
	want := append([]float32(nil), res...)
	for tk := range n {
		ids, w := MoERoute(logits[tk*s.E:(tk+1)*s.E], shared[tk], s.K)
		xt := x[tk*s.H : (tk+1)*s.H]
		MoEDownCombine(mo, s, ids, w, MoEGateUp(mo, s, ids, xt), want[tk*s.H:(tk+1)*s.H], false)
	}
	for i, order := range orders {
		for j, bm := range QMMTileHeights {
			pairs, nb := n*s.K, s.MoEBlocks(n, bm)
			ids, weights := emu.NewBuffer(4*pairs), emu.NewBuffer(4*n*(s.K+1))
			mustDispatch(t, libM, MoETopKChunkCall(s, n, MoETopKBuffers[*emu.Buffer]{Logits: emu.BufferOf(logits), Shared: emu.BufferOf(shared), IDs: ids, Weights: weights}), order, 1)
			sb := MoESortBuffers[*emu.Buffer]{IDs: ids, Weights: weights, Offs: emu.NewBuffer(4 * (s.E + 1)), Tok: emu.NewBuffer(4 * pairs),
				W: emu.NewBuffer(4 * pairs), Blocks: emu.NewBuffer(16 * nb), Pos: emu.NewBuffer(4 * pairs)}
			mustDispatch(t, libM, MoESortCall(s, n, bm, sb), order, 2)
			bx, act, y := emu.BufferOf(x), emu.NewBuffer(4*pairs*s.I), emu.NewBuffer(4*pairs*s.H)
			mustDispatch(t, libQ, MoEGateUpMMCall(s.H, s.I, pairs, nb, bm, MoEGateUpMMBuffers[*emu.Buffer]{Gate: qbufsOf(mo.Gate), Up: qbufsOf(mo.Up), X: bx, Tok: sb.Tok, Blocks: sb.Blocks, Act: act}), order, 3)
			mustDispatch(t, libQ, MoEDownMMCall(s.H, s.I, pairs, nb, bm, MoEDownMMBuffers[*emu.Buffer]{Down: qbufsOf(mo.Down), Act: act, W: sb.W, Blocks: sb.Blocks, Y: y}), order, 4)
			// the shared expert: one expert over the identity map, weight 1 (its gate comes in moe_combine)
			idBM := QMMTileRows(n)
			tokens, ones, idBlocks := MoEIdentity(n, idBM)
			shAct, sh := emu.NewBuffer(4*n*s.SI), emu.NewBuffer(4*n*s.H)
			mustDispatch(t, libQ, MoEGateUpMMCall(s.H, s.SI, n, len(idBlocks)/4, idBM, MoEGateUpMMBuffers[*emu.Buffer]{Gate: qbufsOf(mo.SharedGate), Up: qbufsOf(mo.SharedUp), X: bx, Tok: emu.BufferOf(tokens), Blocks: emu.BufferOf(idBlocks), Act: shAct}), order, 5)
			mustDispatch(t, libQ, MoEDownMMCall(s.H, s.SI, n, len(idBlocks)/4, idBM, MoEDownMMBuffers[*emu.Buffer]{Down: qbufsOf(mo.SharedDown), Act: shAct, W: emu.BufferOf(ones), Blocks: emu.BufferOf(idBlocks), Y: sh}), order, 6)
			// moe_combine, and moe_combine_norm (in every other order) with the next layer's norm
			bres := emu.BufferOf(res)
			cb := MoECombineBuffers[*emu.Buffer]{IDs: ids, Weights: weights, Pos: sb.Pos, Y: y, Shared: sh, Res: bres}
			norm := (i+j)%2 == 1
			if norm {
				cb.Gain, cb.Out = emu.BufferOf(gain), emu.NewBuffer(4*n*s.H)
				cb.Out.Fill(0xFF)
				mustDispatch(t, libM, MoECombineNormCall(s, n, 1e-6, cb), order, 7)
			} else {
				mustDispatch(t, libM, MoECombineCall(s, n, cb), order, 7)
			}
			// compare the MoE's contribution, relative to its largest element
			got, contrib := make([]float32, len(res)), make([]float32, len(res))
			for i := range res {
				got[i], contrib[i] = bres.Float32s()[i]-res[i], want[i]-res[i]
			}
			if e := relErr(got, contrib); !(e <= 5e-6) {
				t.Fatalf("%v, blocks of %d: the chunk's MoE output differs from the per-token reference by %.2g (of its max)", order, bm, e)
			}
			if norm { // the normed row is AddRMSNorm's of the residual the kernel wrote
				wantOut, zero := make([]float32, s.H), make([]float32, s.H)
				for tk := range n {
					row := bres.Float32s()[tk*s.H : (tk+1)*s.H]
					AddRMSNorm(make([]float32, s.H), wantOut, row, zero, gain, 1e-6)
					if e := relErr(cb.Out.Float32s()[tk*s.H:(tk+1)*s.H], wantOut); !(e <= 1e-6) {
						t.Fatalf("%v: token %d's normed row differs from AddRMSNorm's by %.2g", order, tk, e)
					}
				}
			}
		}
	}
}
