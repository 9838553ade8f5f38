package kernels

import (
	"math"

	"github.com/lilyformac/lily/engine/f32"
)

// AttnSplitsConst is the function constant index of ATTN_SPLITS (attn_decode.metal); the shape
// constants are attn_rope.metal's (AttnShape.Constants).
const AttnSplitsConst = 6

// Decode attention geometry (attn_decode.metal).
const (
	AttnTile           = 16  // K/V rows staged in threadgroup memory at a time
	AttnMinChunk       = 64  // fewest positions a non-empty split covers
	AttnMaxSplits      = 64  // AttnSplits' ceiling (splits per kv head)
	AttnCombineThreads = 256 // attn_decode_combine's threadgroup (one thread per dim of 256)
)

// AttnDecodeConstants returns the function constants of attn_decode_partial/combine.
func (s AttnShape) AttnDecodeConstants(splits int) map[int]any {
	c := s.Constants(0)
	c[AttnSplitsConst] = splits
	return c
}

// AttnSplits is the number of splits per kv head the plan sizes the grid with for a cache of
// maxCtx positions: enough that every split of a full cache has at least AttnMinChunk positions,
// at most AttnMaxSplits (2·64 = 128 threadgroups for the model's 2 kv heads).
func AttnSplits(maxCtx int) int {
	return max(1, min(AttnMaxSplits, (maxCtx+AttnMinChunk-1)/AttnMinChunk))
}

// AttnChunk is the number of positions per split when n positions (pos+1) are attended to with
// splits splits; AttnActiveSplits how many splits are non-empty. The kernels apply the same rule.
func AttnChunk(n, splits int) int {
	c := (n + splits - 1) / splits
	c = (c + AttnTile - 1) / AttnTile * AttnTile
	return max(c, AttnMinChunk)
}

// AttnActiveSplits is ceil(n / AttnChunk(n, splits)).
func AttnActiveSplits(n, splits int) int {
	c := AttnChunk(n, splits)
	return (n + c - 1) / c
}

// AttnPartialThreads is attn_decode_partial's threadgroup size: one simdgroup per query head of
// a kv head's group.
func (s AttnShape) AttnPartialThreads() int { return 32 * s.Heads / s.KVHeads }

// AttnPartialThreadgroupMem is attn_decode_partial's [[threadgroup(0)]] length in bytes: a K
// and a V tile of AttnTile rows (values, and block scales in an 8-bit cache).
func (s AttnShape) AttnPartialThreadgroupMem() int { return 2 * AttnTile * s.RowBytes() }

// AttnPartialLens are the lengths in floats of attn_decode_partial's outputs: o [Heads][splits]
// [HeadDim] and (max, sum) [Heads][splits][2] (per row of a multi-row dispatch).
func (s AttnShape) AttnPartialLens(splits int) (o, ml int) {
	return s.Heads * splits * s.HeadDim, s.Heads * splits * 2
}

// AttnDecode is the Go reference of attn_decode_partial + attn_decode_combine for the token at
// pos: engine/cpu's attention with the same float32 operations (scores, max-subtracted exp, sum,
// divide, gate) over the caches (pools in the shape's format, positions found through table, read
// with LoadKV). q holds the rotated queries ([Heads·HeadDim]), qg the q projection (the gates are
// its second halves).
func AttnDecode(s AttnShape, pos int, q, qg []float32, kCache, vCache []byte, table []uint32) []float32 {
	hd, g := s.HeadDim, s.Heads/s.KVHeads
	n := min(pos+1, s.MaxCtx)
	scale := f32.Rsqrt(float32(hd))
	out := make([]float32, s.Heads*hd)
	kj, vj := make([]float32, hd), make([]float32, hd)
	row := func(dst []float32, cache []byte, kvh, j int) { s.LoadKV(cache, kvh, s.Row(table, j), dst) }
	for head := range s.Heads {
		kvh := head / g
		qh := q[head*hd : (head+1)*hd]
		gate := qg[head*2*hd+hd : (head+1)*2*hd]
		scores := make([]float32, n)
		maxScore := float32(math.Inf(-1))
		for j := range n {
			row(kj, kCache, kvh, j)
			scores[j] = f32.Dot(qh, kj) * scale
			maxScore = max(maxScore, scores[j])
		}
		var sum float32
		for j := range scores {
			scores[j] = float32(math.Exp(float64(scores[j] - maxScore)))
			sum += scores[j]
		}
		o := out[head*hd : (head+1)*hd]
		for j, p := range scores {
			p /= sum
			row(vj, vCache, kvh, j)
			for d := range o {
				o[d] += p * vj[d]
			}
		}
		for d := range o {
			o[d] *= f32.Sigmoid(gate[d])
		}
	}
	return out
}

// AttnDecodeRows is the Go reference of a multi-row decode step's attention: AttnDecode for each
// sequence r of steps ([rows]{pos, token}) on its rows of q ([rows][Heads·HeadDim]) and qg at
// its pos under its table (row r of tables, [rows][TableLen]); a row of output per sequence.
func AttnDecodeRows(s AttnShape, steps []uint32, q, qg []float32, kCache, vCache []byte, tables []uint32) []float32 {
	var out []float32
	qd, tl := s.Heads*s.HeadDim, s.TableLen()
	for r := range len(steps) / 2 {
		out = append(out, AttnDecode(s, int(steps[2*r]), q[r*qd:(r+1)*qd], qg[2*r*qd:2*(r+1)*qd], kCache, vCache, tables[r*tl:(r+1)*tl])...)
	}
	return out
}

// AttnDecodePartialBuffers are attn_decode_partial's buffers, by role. A multi-row dispatch
// (AttnDecodePartialRowsCall) holds a row per sequence in each but the pools: Q [rows][...],
// Step [rows]{pos, token}, OPart and MLPart [rows][...], Table [rows][TableLen].
type AttnDecodePartialBuffers[B any] struct {
	Q      B // 0: [Heads·HeadDim] the rotated queries
	KCache B // 1: the K pool
	VCache B // 2: the V pool
	Step   B // 3: the step buffer {pos, token}
	OPart  B // 4: [Heads][splits][HeadDim] (AttnPartialLens)
	MLPart B // 5: [Heads][splits] (max, sum)
	Table  B // 6: [TableLen] the block table
}

// AttnDecodePartialCall is attn_decode_partial over splits splits per kv head: a threadgroup
// per (kv head, split), one simdgroup per query head of the group.
func AttnDecodePartialCall[B any](s AttnShape, splits int, b AttnDecodePartialBuffers[B]) Call[B] {
	return AttnDecodePartialRowsCall(s, splits, 1, b)
}

// AttnDecodePartialRowsCall is attn_decode_partial for the rows sequences of a multi-row decode
// step: AttnDecodePartialCall's threadgroups once per row (the grid's z), each row over its own
// positions and pages with the plan's splits, so bit-identical to the one-row call on it; rows 1
// is AttnDecodePartialCall.
func AttnDecodePartialRowsCall[B any](s AttnShape, splits, rows int, b AttnDecodePartialBuffers[B]) Call[B] {
	return Call[B]{
		Kernel: "attn_decode_partial", Constants: s.AttnDecodeConstants(splits),
		Buffers:      map[int]B{0: b.Q, 1: b.KCache, 2: b.VCache, 3: b.Step, 4: b.OPart, 5: b.MLPart, 6: b.Table},
		Threadgroups: [3]int{s.KVHeads, splits, attnRows(rows)}, Group: grid(s.AttnPartialThreads()),
		ThreadgroupMem: map[int]int{0: s.AttnPartialThreadgroupMem()},
	}
}

// AttnDecodeCombineBuffers are attn_decode_combine's buffers, by role (a row per sequence in
// each for AttnDecodeCombineRowsCall).
type AttnDecodeCombineBuffers[B any] struct {
	OPart, MLPart B // 0, 1: attn_decode_partial's outputs
	QG            B // 2: [Heads][2·HeadDim] the q projection (the gates are its second halves)
	Step          B // 3: the step buffer {pos, token}
	Out           B // 4: [Heads·HeadDim]
}

// AttnDecodeCombineCall is attn_decode_combine of splits splits: a threadgroup per query head.
func AttnDecodeCombineCall[B any](s AttnShape, splits int, b AttnDecodeCombineBuffers[B]) Call[B] {
	return AttnDecodeCombineRowsCall(s, splits, 1, b)
}

// AttnDecodeCombineRowsCall is attn_decode_combine for the rows sequences of a multi-row decode
// step: a row of threadgroups per sequence (the grid's y); rows 1 is AttnDecodeCombineCall.
func AttnDecodeCombineRowsCall[B any](s AttnShape, splits, rows int, b AttnDecodeCombineBuffers[B]) Call[B] {
	return Call[B]{
		Kernel: "attn_decode_combine", Constants: s.AttnDecodeConstants(splits),
		Buffers:      map[int]B{0: b.OPart, 1: b.MLPart, 2: b.QG, 3: b.Step, 4: b.Out},
		Threadgroups: [3]int{s.Heads, attnRows(rows), 1}, Group: grid(AttnCombineThreads),
	}
}
