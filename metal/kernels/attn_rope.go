package kernels

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/lilyformac/lily/engine/f32"
	"github.com/lilyformac/lily/engine/quant"
)

// attn_qk_rope_kv function constant indices (attn_rope.metal). attn_decode.metal uses the same
// indices for the shape constants it shares.
const (
	AttnHeads     = 0 // uint ATTN_NQ
	AttnKVHeads   = 1 // uint ATTN_NKV
	AttnHeadDim   = 2 // uint ATTN_HD
	AttnRotaryDim = 3 // uint ATTN_ROT
	AttnMaxCtx    = 4 // uint ATTN_MAX_CTX
	AttnEps       = 5 // float ATTN_EPS
	AttnKVBits    = 7 // uint ATTN_KV_BITS: the cache format
	AttnPage      = 8 // uint ATTN_PAGE: positions per page of the pool
	AttnPool      = 9 // uint ATTN_POOL: rows per kv head in the pool
	// AttnSeqRows (bool ATTN_SEQ_ROWS, attn_qk_rope_kv only) makes grid y index the sequences of a
	// multi-row decode step, each at its own position with its own block table, instead of a
	// chunk's tokens; unset, every existing dispatch keeps its pipeline.
	AttnSeqRows = 11
	// AttnMRoPE (bool ATTN_MROPE, attn_qk_rope_kv only) takes each token's (row's) three rotary
	// positions (time, height, width) as its cache slot plus the offsets in buffer 11, [T or R][3]
	// uint32 two's complement (RopeOffsets), and each frequency's axis from buffer 12
	// (MRoPEAxes). Unset, neither buffer is an argument.
	AttnMRoPE = 12
)

// KV cache formats (AttnShape.KVBits). An 8-bit cache holds int8 codes, then a binary16 scale
// per block of KVBlock dims of a row: x ≈ code · scale, scale = max|x| / 127 over the block.
const (
	KVBF16  = 16
	KV8     = 8
	KVBlock = 32
)

// AttnRopeThreads is attn_qk_rope_kv's production threadgroup size (one thread per dim of a
// 256-dim head); any size up to 1024 works.
const AttnRopeThreads = 256

// AttnShape is a full-attention layer's head layout and KV cache (the model: 16 query heads, 2 kv
// heads, head_dim 256, rotary 64). The cache is a pool of Pages pages of PageSize positions
// ([KVHeads][Pages·PageSize] rows); a sequence of up to MaxCtx positions finds position p in
// pool row table[p/PageSize]·PageSize + p%PageSize (a block table of TableLen pages). PageSize 0
// is one page of MaxCtx positions (table {0}).
type AttnShape struct {
	Heads, KVHeads, HeadDim, RotaryDim int
	MaxCtx                             int // positions a sequence holds
	KVBits                             int // cache format: KVBF16 (also 0) or KV8
	PageSize, Pages                    int // the pool (0, 0: one page of MaxCtx)
}

// Validate reports whether attn_qk_rope_kv and the decode kernels support the shape.
func (s AttnShape) Validate() error {
	switch {
	case s.Heads <= 0 || s.KVHeads <= 0 || s.Heads%s.KVHeads != 0:
		return fmt.Errorf("attn: %d query heads are not a positive multiple of %d kv heads", s.Heads, s.KVHeads)
	case s.Heads/s.KVHeads > 32:
		return fmt.Errorf("attn: %d query heads per kv head; at most 32", s.Heads/s.KVHeads)
	case s.HeadDim <= 0 || s.HeadDim%32 != 0 || s.HeadDim > 256:
		return fmt.Errorf("attn: head dim %d: want a multiple of 32, at most 256", s.HeadDim)
	case s.RotaryDim < 0 || s.RotaryDim%2 != 0 || s.RotaryDim > s.HeadDim:
		return fmt.Errorf("attn: rotary dim %d: want even and at most the head dim %d", s.RotaryDim, s.HeadDim)
	case s.MaxCtx <= 0:
		return fmt.Errorf("attn: cache of %d positions", s.MaxCtx)
	case s.PageSize < 0 || s.PageSize > 0 && (s.PageSize%AttnTile != 0 || s.Pages <= 0):
		return fmt.Errorf("attn: %d pages of %d positions: want a positive number of pages of a multiple of %d", s.Pages, s.PageSize, AttnTile)
	case s.KVBits != 0 && s.KVBits != KVBF16 && s.KVBits != KV8:
		return fmt.Errorf("attn: KV cache of %d bits: want 16 or 8", s.KVBits)
	case s.KVBits == KV8 && KVBlock%(s.HeadDim/32) != 0:
		// attn_decode_partial's lanes hold HeadDim/32 dims each, which must lie in one block
		return fmt.Errorf("attn: an 8-bit KV cache needs head dim 32, 64, 128 or 256, not %d", s.HeadDim)
	}
	return nil
}

// Constants returns the function constants attn_qk_rope_kv (and, with AttnDecodeConstants,
// the decode kernels) are specialised with.
func (s AttnShape) Constants(eps float32) map[int]any {
	return map[int]any{AttnHeads: s.Heads, AttnKVHeads: s.KVHeads, AttnHeadDim: s.HeadDim, AttnRotaryDim: s.RotaryDim, AttnMaxCtx: s.MaxCtx, AttnEps: eps, AttnKVBits: s.bits(),
		AttnPage: s.Page(), AttnPool: s.PoolRows()}
}

// Page is the positions per page.
func (s AttnShape) Page() int {
	if s.PageSize == 0 {
		return s.MaxCtx
	}
	return s.PageSize
}

// PoolRows is the rows per kv head in the pool.
func (s AttnShape) PoolRows() int {
	if s.PageSize == 0 {
		return s.MaxCtx
	}
	return s.Pages * s.PageSize
}

// TableLen is the block table's length: the pages of a sequence of MaxCtx positions.
func (s AttnShape) TableLen() int { return (s.MaxCtx + s.Page() - 1) / s.Page() }

// Row is the pool row of position pos under table.
func (s AttnShape) Row(table []uint32, pos int) int {
	return int(table[pos/s.Page()])*s.Page() + pos%s.Page()
}

// IdentityTable maps page i to pool page i.
func (s AttnShape) IdentityTable() []uint32 {
	t := make([]uint32, s.TableLen())
	for i := range t {
		t[i] = uint32(i)
	}
	return t
}

func (s AttnShape) bits() int {
	if s.KVBits == KV8 {
		return KV8
	}
	return KVBF16
}

// RowBytes is what one position of one kv head takes in a K (or V) cache: its values, and in an
// 8-bit cache its block scales.
func (s AttnShape) RowBytes() int {
	if s.bits() == KV8 {
		return s.HeadDim + s.HeadDim/KVBlock*2
	}
	return 2 * s.HeadDim
}

// CacheBytes is one layer's K (or V) pool, [KVHeads][PoolRows] rows (in an 8-bit cache the
// codes of every row, then the scales of every row).
func (s AttnShape) CacheBytes() int { return s.KVHeads * s.PoolRows() * s.RowBytes() }

// CacheSpans calls f with the byte spans of a K (or V) pool that hold pool rows [from, from+n)
// of every kv head (two per head in an 8-bit cache: codes and scales).
func (s AttnShape) CacheSpans(from, n int, f func(off, len int64)) {
	for h := range s.KVHeads {
		r := int64(h*s.PoolRows() + from)
		if s.bits() == KVBF16 {
			f(r*int64(2*s.HeadDim), int64(n*2*s.HeadDim))
			continue
		}
		sb := int64(s.HeadDim / KVBlock * 2)
		f(r*int64(s.HeadDim), int64(n*s.HeadDim))
		f(int64(s.KVHeads*s.PoolRows()*s.HeadDim)+r*sb, int64(n)*sb)
	}
}

// SeqSpans calls f with the byte spans of a K (or V) pool holding a sequence's positions
// [from, from+n), found through table, in CacheSpans' order: per kv head its values page piece by
// page piece, then (8-bit) its scales likewise. With the identity table these are CacheSpans' spans
// cut at page boundaries.
func (s AttnShape) SeqSpans(table []uint32, from, n int, f func(off, len int64)) {
	pieces := func(h int, base, per int64) {
		for p := from; p < from+n; {
			k := min(from+n, (p/s.Page()+1)*s.Page()) - p
			f(base+int64(h*s.PoolRows()+s.Row(table, p))*per, int64(k)*per)
			p += k
		}
	}
	for h := range s.KVHeads {
		if s.bits() == KVBF16 {
			pieces(h, 0, int64(2*s.HeadDim))
			continue
		}
		pieces(h, 0, int64(s.HeadDim))
		pieces(h, int64(s.KVHeads*s.PoolRows()*s.HeadDim), int64(s.HeadDim/KVBlock*2))
	}
}

// StoreKV writes x into pool row prow of kv head kvh of a K (or V) cache, as attn_qk_rope_kv does.
func (s AttnShape) StoreKV(cache []byte, kvh, prow int, x []float32) {
	row := kvh*s.PoolRows() + prow
	hd := s.HeadDim
	if s.bits() == KVBF16 {
		for d, v := range x[:hd] {
			binary.LittleEndian.PutUint16(cache[2*(row*hd+d):], quant.F32ToBF16(v))
		}
		return
	}
	scales := cache[s.KVHeads*s.PoolRows()*hd:]
	for b := 0; b < hd; b += KVBlock {
		var amax float32
		for _, v := range x[b : b+KVBlock] {
			amax = max(amax, float32(math.Abs(float64(v))))
		}
		sc := quant.F32ToF16(amax / 127)
		binary.LittleEndian.PutUint16(scales[2*(row*hd/KVBlock+b/KVBlock):], sc)
		f := quant.F16ToF32(sc)
		for d := b; d < b+KVBlock; d++ {
			var q float32
			if f > 0 {
				q = min(max(float32(math.RoundToEven(float64(x[d]/f))), -127), 127)
			}
			cache[row*hd+d] = byte(int8(q))
		}
	}
}

// LoadKV reads pool row prow of kv head kvh of a K (or V) cache into dst, as attn_decode_partial
// does.
func (s AttnShape) LoadKV(cache []byte, kvh, prow int, dst []float32) {
	row := kvh*s.PoolRows() + prow
	hd := s.HeadDim
	if s.bits() == KVBF16 {
		for d := range dst[:hd] {
			dst[d] = quant.BF16ToF32(binary.LittleEndian.Uint16(cache[2*(row*hd+d):]))
		}
		return
	}
	scales := cache[s.KVHeads*s.PoolRows()*hd:]
	for d := range dst[:hd] {
		f := quant.F16ToF32(binary.LittleEndian.Uint16(scales[2*(row*hd/KVBlock+d/KVBlock):]))
		dst[d] = float32(int8(cache[row*hd+d])) * f
	}
}

// RopeInvFreq is the RoPE inverse-frequency table attn_qk_rope_kv reads (buffer 5): rot/2 values
// computed as engine/cpu computes them (float32 exponent, float64 pow, float32 reciprocal).
func RopeInvFreq(rot int, theta float64) []float32 {
	var f []float32
	for i := 0; i < rot; i += 2 {
		e := float32(i) / float32(rot)
		f = append(f, 1/float32(math.Pow(theta, float64(e))))
	}
	return f
}

// AttnRopeParams are a layer's norm gains and the RoPE table.
type AttnRopeParams struct {
	QNorm, KNorm []float32 // [HeadDim]
	InvFreq      []float32 // RopeInvFreq(RotaryDim, theta)
	Eps          float32
}

// MRoPEAxes is attn_qk_rope_kv's axis table (buffer 12) for half rotary frequencies: axis(i)
// (0 time, 1 height, 2 width), the model config's MRoPEAxis.
func MRoPEAxes(half int, axis func(i int) int) []uint32 {
	a := make([]uint32, half)
	for i := range a {
		a[i] = uint32(axis(i))
	}
	return a
}

// AttnQKRopeKV is the Go reference of attn_qk_rope_kv for the token at pos: engine/cpu's q and k
// RMSNorm and RoPE with the same float32 operations. qg is the q projection ([Heads][2·HeadDim]:
// query ‖ gate per head), k and v the kv projections; it returns the rotated queries
// ([Heads·HeadDim]) and writes K (normalised, rotated) and V into the caches at pos's pool row
// under table (when pos < MaxCtx), in the shape's format.
func AttnQKRopeKV(s AttnShape, p AttnRopeParams, pos int, qg, k, v []float32, kCache, vCache []byte, table []uint32) []float32 {
	return AttnQKRopeKVMulti(s, p, pos, [3]int{pos, pos, pos}, nil, qg, k, v, kCache, vCache, table)
}

// AttnQKRopeKVMulti is AttnQKRopeKV with multimodal rotary positions (ATTN_MROPE): the cache
// slot is pos, and frequency i turns by ropePos[axes[i]] (axes nil: axis 0 throughout).
func AttnQKRopeKVMulti(s AttnShape, p AttnRopeParams, pos int, ropePos [3]int, axes []uint32, qg, k, v []float32, kCache, vCache []byte, table []uint32) []float32 {
	hd := s.HeadDim
	q := make([]float32, s.Heads*hd)
	for h := range s.Heads {
		qh := q[h*hd : (h+1)*hd]
		copy(qh, qg[h*2*hd:h*2*hd+hd])
		f32.RMSNorm(qh, qh, p.QNorm, p.Eps)
		ropeRotate(qh, p.InvFreq, ropePos, axes)
	}
	kh := make([]float32, hd)
	for j := range s.KVHeads {
		copy(kh, k[j*hd:(j+1)*hd])
		f32.RMSNorm(kh, kh, p.KNorm, p.Eps)
		ropeRotate(kh, p.InvFreq, ropePos, axes)
		if pos >= s.MaxCtx {
			continue // as the kernel: no cache write past the end
		}
		s.StoreKV(kCache, j, s.Row(table, pos), kh)
		s.StoreKV(vCache, j, s.Row(table, pos), v[j*hd:(j+1)*hd])
	}
	return q
}

// AttnQKRopeKVBuffers are attn_qk_rope_kv's buffers, by role. For AttnQKRopeKVRowsCall, QG, K, V
// and QOut hold a row per sequence, Step [rows]{pos, token} and Table [rows][TableLen].
type AttnQKRopeKVBuffers[B any] struct {
	QG      B // 0: [Heads][2·HeadDim] the q projection, query ‖ gate per head
	K, V    B // 1, 2: [KVHeads·HeadDim] the kv projections
	QNorm   B // 3: [HeadDim] float32
	KNorm   B // 4: [HeadDim] float32
	InvFreq B // 5: [RotaryDim/2] RopeInvFreq
	Step    B // 6: the step buffer {pos, token}
	QOut    B // 7: [Heads·HeadDim] the rotated queries
	KCache  B // 8: the K pool, written at pos's row
	VCache  B // 9: the V pool, likewise
	Table   B // 10: [TableLen] the block table
}

// AttnQKRopeKVCall is attn_qk_rope_kv for the step's token: a threadgroup of threads per query
// and per kv head (AttnRopeThreads in production).
func AttnQKRopeKVCall[B any](s AttnShape, eps float32, threads int, b AttnQKRopeKVBuffers[B]) Call[B] {
	return Call[B]{
		Kernel: "attn_qk_rope_kv", Constants: s.Constants(eps),
		Buffers: map[int]B{0: b.QG, 1: b.K, 2: b.V, 3: b.QNorm, 4: b.KNorm, 5: b.InvFreq, 6: b.Step, 7: b.QOut,
			8: b.KCache, 9: b.VCache, 10: b.Table},
		Threadgroups: grid(s.Heads + s.KVHeads), Group: grid(threads),
	}
}

// AttnQKRopeKVChunkCall is attn_qk_rope_kv for tokens tokens of a prefill chunk at positions
// step.pos .. step.pos+tokens-1: a row of threadgroups per token; QG, K, V and QOut hold a row per
// token, bfloat as the chunk mode stores its activations (BF16Acts).
func AttnQKRopeKVChunkCall[B any](s AttnShape, eps float32, threads, tokens int, b AttnQKRopeKVBuffers[B]) Call[B] {
	c := BF16Acts(AttnQKRopeKVCall(s, eps, threads, b), true, true)
	c.Threadgroups[1] = tokens
	return c
}

// AttnQKRopeKVChunk is the Go reference of a chunk's attn_qk_rope_kv: AttnQKRopeKV for each of
// the tokens rows of qg ([tokens][Heads·2·HeadDim]), k and v ([tokens][KVHeads·HeadDim]) at
// positions pos0, pos0+1, ...; it returns the rotated queries, a row per token.
func AttnQKRopeKVChunk(s AttnShape, p AttnRopeParams, pos0, tokens int, qg, k, v []float32, kCache, vCache []byte, table []uint32) []float32 {
	return AttnQKRopeKVChunkMulti(s, p, pos0, tokens, nil, nil, qg, k, v, kCache, vCache, table)
}

// AttnQKRopeKVChunkMulti is AttnQKRopeKVChunk with multimodal rotary positions: token t's are
// its slot plus ropeOff[3t:3t+3] (RopeOffsets) under axes (ropeOff nil: the slot).
func AttnQKRopeKVChunkMulti(s AttnShape, p AttnRopeParams, pos0, tokens int, ropeOff, axes []uint32, qg, k, v []float32, kCache, vCache []byte, table []uint32) []float32 {
	var q []float32
	qd, kd := s.Heads*2*s.HeadDim, s.KVHeads*s.HeadDim
	for t := range tokens {
		q = append(q, AttnQKRopeKVMulti(s, p, pos0+t, ropeAt(ropeOff, t, pos0+t), axes, qg[t*qd:(t+1)*qd], k[t*kd:(t+1)*kd], v[t*kd:(t+1)*kd], kCache, vCache, table)...)
	}
	return q
}

// ropeAt is token (row) t's three rotary positions: slot plus its offsets in ropeOff (none when
// ropeOff is nil).
func ropeAt(ropeOff []uint32, t, slot int) [3]int {
	if ropeOff == nil {
		return [3]int{slot, slot, slot}
	}
	at := func(a int) int { return slot + int(int32(ropeOff[3*t+a])) }
	return [3]int{at(0), at(1), at(2)}
}

// RopeOffsets is attn_qk_rope_kv's offsets buffer (ATTN_MROPE) for tokens at slots start,
// start+1, ... whose rotary positions are pos ([3][n], backend.Positions): [n][3] position −
// slot, as uint32 two's complement (an image leaves the text after it behind its slots).
func RopeOffsets(start int, pos [3][]int) []uint32 {
	n := len(pos[0])
	out := make([]uint32, 3*n)
	for t := range n {
		for a := range 3 {
			out[3*t+a] = uint32(int32(pos[a][t] - (start + t)))
		}
	}
	return out
}

// AttnQKRopeKVRowsCall is attn_qk_rope_kv for the rows sequences of a multi-row decode step
// (ATTN_SEQ_ROWS): a row of threadgroups per sequence, row r at its own position steps[r].pos
// through its own block table (row r of Table) into the shared pool. Each row is bit-identical to
// AttnQKRopeKVCall on that row alone.
func AttnQKRopeKVRowsCall[B any](s AttnShape, eps float32, threads, rows int, b AttnQKRopeKVBuffers[B]) Call[B] {
	c := AttnQKRopeKVCall(s, eps, threads, b)
	c.Constants[AttnSeqRows] = true
	c.Threadgroups[1] = attnRows(rows)
	return c
}

// AttnQKRopeKVMRoPE is c (an attn_qk_rope_kv call of any form) with multimodal rotary
// positions: ATTN_MROPE set, ropeOff ([tokens or rows][3] offsets from the slot, RopeOffsets) at
// buffer 11 and the axis table (MRoPEAxes) at buffer 12.
func AttnQKRopeKVMRoPE[B any](c Call[B], ropeOff, axes B) Call[B] {
	c.Constants[AttnMRoPE] = true
	c.Buffers[11], c.Buffers[12] = ropeOff, axes
	return c
}

// attnRows is rows, checked: a multi-row dispatch has at least one.
func attnRows(rows int) int {
	if rows < 1 {
		panic(fmt.Sprintf("kernels: attention over %d rows", rows))
	}
	return rows
}

// AttnQKRopeKVRows is the Go reference of AttnQKRopeKVRowsCall: AttnQKRopeKV for each sequence r
// of steps ([rows]{pos, token}) on its rows of qg, k and v at its pos under its table (row r of
// tables, [rows][TableLen]); it returns the rotated queries, a row per sequence.
func AttnQKRopeKVRows(s AttnShape, p AttnRopeParams, steps []uint32, qg, k, v []float32, kCache, vCache []byte, tables []uint32) []float32 {
	return AttnQKRopeKVRowsMulti(s, p, steps, nil, nil, qg, k, v, kCache, vCache, tables)
}

// AttnQKRopeKVRowsMulti is AttnQKRopeKVRows with multimodal rotary positions: row r's are its
// pos plus ropeOff[3r:3r+3] under axes (ropeOff nil: its pos).
func AttnQKRopeKVRowsMulti(s AttnShape, p AttnRopeParams, steps, ropeOff, axes []uint32, qg, k, v []float32, kCache, vCache []byte, tables []uint32) []float32 {
	var q []float32
	qd, kd, tl := s.Heads*2*s.HeadDim, s.KVHeads*s.HeadDim, s.TableLen()
	for r := range len(steps) / 2 {
		pos := int(steps[2*r])
		q = append(q, AttnQKRopeKVMulti(s, p, pos, ropeAt(ropeOff, r, pos), axes, qg[r*qd:(r+1)*qd], k[r*kd:(r+1)*kd], v[r*kd:(r+1)*kd], kCache, vCache, tables[r*tl:(r+1)*tl])...)
	}
	return q
}

// ropeRotate is engine/cpu's rope with the inverse-frequency table and the axis of each frequency
// passed in (axes nil: axis 0).
func ropeRotate(x, invFreq []float32, pos [3]int, axes []uint32) {
	half := len(invFreq)
	for i, f := range invFreq {
		p := pos[0]
		if axes != nil {
			p = pos[axes[i]]
		}
		theta := float64(float32(p) * f)
		cos, sin := float32(math.Cos(theta)), float32(math.Sin(theta))
		a, b := x[i], x[i+half]
		x[i] = a*cos - b*sin
		x[i+half] = b*cos + a*sin
	}
}
