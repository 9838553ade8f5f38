package cases

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/lilyformac/lily/engine/config"
	"github.com/lilyformac/lily/engine/quant"
	"github.com/lilyformac/lily/metal/kernels"
)

// ropeTol: the rotated queries relative to max|q|: 2e-6 on the emulator; Metal's fast sin/cos of
// angles up to a few hundred radians (the kernel asks for precise ones) and rsqrt: 1e-4. K must
// be within ropeKSteps bf16 steps (8-bit: codes of the block's scale) of the reference, V exact,
// and nothing outside the token's rows written.
var ropeTol = Tol{Emu: 2e-6, Metal: 1e-4}

// ropeKSteps is how far K may be from the reference: one step on the emulator, two on Metal.
func ropeKSteps(k Kind) int {
	if k == Emu {
		return 1
	}
	return 2
}

type ropeShape struct {
	s                   kernels.AttnShape
	pos, tokens, thread int
	chunk               bool
	table               []uint32
	why                 string
}

func ropeCases() []Case {
	as := attnShapeOf
	bf, k8 := kernels.KVBF16, kernels.KV8
	shapes := []ropeShape{
		{s: as(4, 2, 64, 16, 8, bf, 0, 0), pos: 0, thread: 64},
		{s: as(4, 2, 64, 16, 8, bf, 0, 0), pos: 7, thread: 40, why: "a partial simdgroup"},
		{s: as(4, 2, 64, 16, 70001, bf, 0, 0), pos: 70000, thread: 32},
		{s: as(2, 1, 256, 64, 3, bf, 0, 0), pos: 1, thread: kernels.AttnRopeThreads},
		{s: as(2, 1, 256, 64, 3, bf, 0, 0), pos: 2, thread: 96, why: "several dims per thread"},
		{s: as(2, 1, 256, 64, 3, bf, 0, 0), pos: 5000, thread: 1024, why: "pos past the cache: queries only"},
		{s: as(3, 3, 32, 32, 2, bf, 0, 0), pos: 1, thread: 7, why: "rotary over the whole head, fewer threads than a simdgroup"},
		{s: as(2, 2, 32, 0, 2, bf, 0, 0), pos: 1, thread: 32, why: "no rotary dims"},
		{s: as(4, 2, 64, 16, 8, k8, 0, 0), pos: 0, thread: 64},
		{s: as(4, 2, 64, 16, 8, k8, 0, 0), pos: 7, thread: 40, why: "blocks span simdgroups"},
		{s: as(2, 1, 256, 64, 3, k8, 0, 0), pos: 2, thread: 96},
		{s: as(2, 1, 256, 64, 3, k8, 0, 0), pos: 5000, thread: 1024, why: "pos past the cache"},
		{s: as(3, 3, 32, 32, 2, k8, 0, 0), pos: 1, thread: 7},
		{s: as(4, 2, 64, 16, 100, bf, 16, 9), pos: 37, thread: 64, why: "pages of 16, position 37 in the table's third"},
		{s: as(4, 2, 64, 16, 100, k8, 32, 5), pos: 99, thread: 64, why: "the last position, 8-bit pages"},
		{s: as(4, 2, 64, 16, 6, bf, 0, 0), pos: 5, thread: 40, why: "the last cache row"},
		{s: as(2, 1, 256, 64, 2, bf, 0, 0), pos: 0, thread: 256},
		{s: as(4, 2, 64, 16, 6, k8, 0, 0), pos: 5, thread: 40, why: "the last rows of codes and scales"},
		{s: as(4, 2, 64, 16, 40, k8, 16, 3), pos: 39, thread: 64},
	}
	for _, bits := range []int{bf, k8} {
		// The model's shape at a short and a long position, and the selftest's table out of order.
		for _, pos := range []int{3, 4099} {
			shapes = append(shapes, ropeShape{s: as(16, 2, 256, 64, 4100, bits, 256, 20), pos: pos, thread: kernels.AttnRopeThreads, why: "the model's heads"})
		}
		s := attnSelftest
		s.KVBits = bits
		shapes = append(shapes, ropeShape{s: s, pos: 300, thread: kernels.AttnRopeThreads, table: attnSelftestTable, why: "the model's heads, a table out of order"})
		// A prefill chunk's tokens in one dispatch (a row of threadgroups per token) across a page
		// boundary of a shuffled table: positions 13..19, pages 0 and 1.
		shapes = append(shapes, ropeShape{s: as(4, 2, 64, 16, 100, bits, 16, 9), pos: 13, tokens: 7, thread: 64, chunk: true, why: "a chunk across a page boundary"})
	}
	var out []Case
	for _, r := range shapes {
		out = append(out, ropeCase(r))
	}
	return append(append(out, ropeBatchCases()...), mropeCases()...)
}

// ropeCase runs attn_qk_rope_kv for one token at pos (or a chunk of tokens from pos) and
// compares with AttnQKRopeKV(Chunk).
func ropeCase(rs ropeShape) Case {
	s, tokens := rs.s, max(rs.tokens, 1)
	kernel, tag := "attn_qk_rope_kv", fmt.Sprintf("%s_rot%d_pos%d_tg%d", attnTag(s), s.RotaryDim, rs.pos, rs.thread)
	if rs.chunk {
		kernel += "+chunk"
		tag += fmt.Sprintf("_t%d", tokens)
		rs.why += ", qg, k, v and q bfloat"
	}
	shape := fmt.Sprintf("%s, rotary %d, %d token(s) from pos %d, threadgroups of %d", attnShape(s), s.RotaryDim, tokens, rs.pos, rs.thread)
	if rs.why != "" {
		shape += " (" + rs.why + ")"
	}
	return Case{
		Name: "attn_qk_rope_kv/" + tag, Kernels: []string{kernel}, Shape: shape, Tol: ropeTol,
		Run: func(c *Ctx) error {
			if err := s.Validate(); err != nil {
				return err
			}
			r := c.R
			p := ropeParams(r, s)
			qg := RandFloats(r, tokens*s.Heads*2*s.HeadDim, 1)
			k, v := RandFloats(r, tokens*s.KVHeads*s.HeadDim, 1), RandFloats(r, tokens*s.KVHeads*s.HeadDim, 1)
			if rs.chunk { // the chunk form's activations are bfloat
				qg, k, v = kernels.BF16Round(qg), kernels.BF16Round(k), kernels.BF16Round(v)
			}
			table := attnTable(r, s, rs.table)
			kWant, vWant := make([]byte, s.CacheBytes()), make([]byte, s.CacheBytes())
			for i := range kWant {
				kWant[i], vWant[i] = 0xFF, 0xFF
			}
			bs := kernels.AttnQKRopeKVBuffers[int]{QG: c.inAct("qg", qg, rs.chunk), K: c.inAct("k", k, rs.chunk), V: c.inAct("v", v, rs.chunk), QNorm: c.In("q_norm", p.QNorm), KNorm: c.In("k_norm", p.KNorm),
				InvFreq: c.In("inv_freq", p.InvFreq), Step: c.In("step", []uint32{uint32(rs.pos), 7}), QOut: c.outAct("q_rot", tokens*s.Heads*s.HeadDim, rs.chunk),
				KCache: c.InOut("k_cache", kWant), VCache: c.InOut("v_cache", vWant), Table: c.In("table", table)}
			var qWant []float32
			if rs.chunk {
				c.Add(kernels.AttnQKRopeKVChunkCall(s, p.Eps, rs.thread, tokens, bs), false)
				qWant = kernels.AttnQKRopeKVChunk(s, p, rs.pos, tokens, qg, k, v, kWant, vWant, table)
			} else {
				c.Add(kernels.AttnQKRopeKVCall(s, p.Eps, rs.thread, bs), false)
				qWant = kernels.AttnQKRopeKV(s, p, rs.pos, qg, k, v, kWant, vWant, table)
			}
			if err := c.Step(); err != nil {
				return err
			}
			c.relAct("q", bs.QOut, qWant, rs.chunk)
			var writes []ropeWrite
			for t := range tokens {
				if pos := rs.pos + t; pos < s.MaxCtx {
					writes = append(writes, ropeWrite{pos: pos, row: s.Row(table, pos)})
				}
			}
			return ropeCheckCaches(c, s, writes, c.Bytes(bs.KCache), c.Bytes(bs.VCache), kWant, vWant)
		},
	}
}

// ropeParams are random norm gains around 1 and the model's RoPE table (theta 1e7).
func ropeParams(r *rand.Rand, s kernels.AttnShape) kernels.AttnRopeParams {
	p := kernels.AttnRopeParams{QNorm: make([]float32, s.HeadDim), KNorm: make([]float32, s.HeadDim), InvFreq: kernels.RopeInvFreq(s.RotaryDim, 1e7), Eps: eps}
	for i := range p.QNorm {
		p.QNorm[i] = 1 + 0.2*float32(r.NormFloat64())
		p.KNorm[i] = 1 + 0.2*float32(r.NormFloat64())
	}
	return p
}

// ropeWrite is a position a dispatch writes into the cache and its pool row.
type ropeWrite struct{ pos, row int }

// ropeCheckCaches compares a dispatch's caches with the reference's: V exact, K within
// ropeKSteps at each written row, and no K byte outside the written rows touched.
func ropeCheckCaches(c *Ctx, s kernels.AttnShape, writes []ropeWrite, kGot, vGot, kWant, vWant []byte) error {
	inRows := make([]bool, len(kWant)) // bytes of the written rows
	for _, w := range writes {
		s.CacheSpans(w.row, 1, func(off, n int64) {
			for i := off; i < off+n; i++ {
				inRows[i] = true
			}
		})
	}
	for i := range vWant {
		if vGot[i] != vWant[i] {
			return fmt.Errorf("v_cache byte %d = %#x, want %#x", i, vGot[i], vWant[i])
		}
		if !inRows[i] && kGot[i] != 0xFF {
			return fmt.Errorf("k_cache byte %d written (%#x) outside the token's rows", i, kGot[i])
		}
	}
	for _, w := range writes {
		steps, err := kRowSteps(s, w.row, kGot, kWant)
		if err != nil {
			return fmt.Errorf("pos %d: %w", w.pos, err)
		}
		if steps > ropeKSteps(c.Kind) {
			return fmt.Errorf("pos %d: K off by %d steps, want ≤ %d", w.pos, steps, ropeKSteps(c.Kind))
		}
	}
	return nil
}

// kRowSteps is the largest distance between two caches' pool row: in bf16 steps, or for an 8-bit
// cache in codes of the larger of the two scales (which must agree to a binary16 step).
func kRowSteps(s kernels.AttnShape, row int, got, want []byte) (int, error) {
	worst := 0
	for j := range s.KVHeads {
		if s.KVBits != kernels.KV8 {
			base := 2 * (j*s.PoolRows() + row) * s.HeadDim
			for d := range s.HeadDim {
				a, b := bf16Line(binary.LittleEndian.Uint16(got[base+2*d:])), bf16Line(binary.LittleEndian.Uint16(want[base+2*d:]))
				worst = max(worst, a-b, b-a)
			}
			continue
		}
		g, w := make([]float32, s.HeadDim), make([]float32, s.HeadDim)
		s.LoadKV(got, j, row, g)
		s.LoadKV(want, j, row, w)
		scales := s.KVHeads * s.PoolRows() * s.HeadDim
		for b := 0; b < s.HeadDim; b += kernels.KVBlock {
			at := scales + 2*((j*s.PoolRows()+row)*s.HeadDim/kernels.KVBlock+b/kernels.KVBlock)
			sg, sw := quant.F16ToF32(binary.LittleEndian.Uint16(got[at:])), quant.F16ToF32(binary.LittleEndian.Uint16(want[at:]))
			if math.Abs(float64(sg-sw)) > math.Abs(float64(sw))/1024 {
				return 0, fmt.Errorf("kv head %d block %d scale %g, want %g", j, b/kernels.KVBlock, sg, sw)
			}
			for d := b; d < b+kernels.KVBlock; d++ {
				worst = max(worst, int(math.Round(math.Abs(float64(g[d]-w[d]))/float64(max(sg, sw)))))
			}
		}
	}
	return worst, nil
}

// bf16Line maps a bf16's sign-magnitude bits to a monotonic integer line (steps apart = ulps).
func bf16Line(h uint16) int {
	a := int(int16(h))
	if a < 0 {
		a = math.MinInt16 - a
	}
	return a
}

// mropeAxes is the production axis table: the config's interleaved sections [11, 11, 10].
func mropeAxes(s kernels.AttnShape) []uint32 {
	c := config.Config{MRoPESection: [3]int{11, 11, 10}}
	return kernels.MRoPEAxes(s.RotaryDim/2, c.MRoPEAxis)
}

// mropeCases run attn_qk_rope_kv with ATTN_MROPE (multimodal rotary positions) on the model's
// heads, in both KV formats: a chunk of image tokens, a chunk of text (checked bit for bit against
// the constant unset) and a multi-row decode step.
func mropeCases() []Case {
	var out []Case
	for _, bits := range []int{kernels.KVBF16, kernels.KV8} {
		// a pool of 5 pages of 16 positions: the chunk's slots 13..17 cross a page boundary.
		s := attnShapeOf(16, 2, 256, 64, 64, bits, 16, 5)
		out = append(out, mropeChunkCase(s, false), mropeChunkCase(s, true))
		b := attnBatchShape{s: attnShapeOf(16, 2, 256, 64, 64, bits, 16, 0), pos: []int{5, 40, 63}, threads: kernels.AttnRopeThreads}
		out = append(out, mropeRowsCase(b))
	}
	return out
}

// mropeChunkCase is a chunk of 5 tokens at slots 13..17. Image (!text): the tokens of a 2×3 grid
// whose positions start at 5 (an earlier image left the text 8 behind its slots: negative
// offsets), t = 5, h = 5 + row, w = 5 + column, against AttnQKRopeKVChunkMulti. Text: offsets 0,
// and the same dispatch with ATTN_MROPE unset into caches of its own must agree bit for bit.
func mropeChunkCase(s kernels.AttnShape, text bool) Case {
	const pos0, tokens = 13, 5
	kind, why := "image", "an image's 2×3 grid, positions from 5"
	if text {
		kind, why = "text", "text: equal positions, bit for bit against ATTN_MROPE unset"
	}
	return Case{
		Name:    fmt.Sprintf("attn_qk_rope_kv+chunk+mrope/%s_%s_t%d", kind, attnTag(s), tokens),
		Kernels: []string{"attn_qk_rope_kv+chunk+mrope"}, Tol: ropeTol,
		Shape: fmt.Sprintf("%s, rotary %d, %d tokens from slot %d (%s)", attnShape(s), s.RotaryDim, tokens, pos0, why),
		Run: func(c *Ctx) error {
			if err := s.Validate(); err != nil {
				return err
			}
			var pos [3][]int
			for t := range tokens {
				p := [3]int{5, 5 + t/3, 5 + t%3}
				if text {
					p = [3]int{pos0 + t, pos0 + t, pos0 + t}
				}
				for a := range pos {
					pos[a] = append(pos[a], p[a])
				}
			}
			return mropeChunkRun(c, s, pos0, tokens, kernels.RopeOffsets(pos0, pos), text)
		},
	}
}

// mropeChunkRun dispatches the chunk with ropeOff (and, for text, without ATTN_MROPE) and checks it.
func mropeChunkRun(c *Ctx, s kernels.AttnShape, pos0, tokens int, ropeOff []uint32, text bool) error {
	p, axes := ropeParams(c.R, s), mropeAxes(s)
	qg := kernels.BF16Round(RandFloats(c.R, tokens*s.Heads*2*s.HeadDim, 1))
	kd := tokens * s.KVHeads * s.HeadDim
	k, v := kernels.BF16Round(RandFloats(c.R, kd, 1)), kernels.BF16Round(RandFloats(c.R, kd, 1))
	table := attnTable(c.R, s, nil)
	poison := bytes.Repeat([]byte{0xFF}, s.CacheBytes())
	bufs := func(name string) kernels.AttnQKRopeKVBuffers[int] {
		return kernels.AttnQKRopeKVBuffers[int]{QG: c.inAct(name+"qg", qg, true), K: c.inAct(name+"k", k, true), V: c.inAct(name+"v", v, true),
			QNorm: c.In(name+"q_norm", p.QNorm), KNorm: c.In(name+"k_norm", p.KNorm), InvFreq: c.In(name+"inv_freq", p.InvFreq),
			Step: c.In(name+"step", []uint32{uint32(pos0), 7}), QOut: c.outAct(name+"q_rot", tokens*s.Heads*s.HeadDim, true),
			KCache: c.InOut(name+"k_cache", poison), VCache: c.InOut(name+"v_cache", poison), Table: c.In(name+"table", table)}
	}
	bs := bufs("")
	c.Add(kernels.AttnQKRopeKVMRoPE(kernels.AttnQKRopeKVChunkCall(s, p.Eps, kernels.AttnRopeThreads, tokens, bs), c.In("rope_off", ropeOff), c.In("rope_axis", axes)), false)
	var plain kernels.AttnQKRopeKVBuffers[int]
	if text {
		plain = bufs("plain.")
		c.Add(kernels.AttnQKRopeKVChunkCall(s, p.Eps, kernels.AttnRopeThreads, tokens, plain), false)
	}
	if err := c.Step(); err != nil {
		return err
	}
	kWant, vWant := bytes.Clone(poison), bytes.Clone(poison)
	c.relAct("q", bs.QOut, kernels.AttnQKRopeKVChunkMulti(s, p, pos0, tokens, ropeOff, axes, qg, k, v, kWant, vWant, table), true)
	var writes []ropeWrite
	for t := range tokens {
		writes = append(writes, ropeWrite{pos: pos0 + t, row: s.Row(table, pos0+t)})
	}
	if err := ropeCheckCaches(c, s, writes, c.Bytes(bs.KCache), c.Bytes(bs.VCache), kWant, vWant); err != nil || !text {
		return err
	}
	return mropeSame(c, bs, plain)
}

// mropeSame requires two dispatches' queries and caches to be bit-identical.
func mropeSame(c *Ctx, a, b kernels.AttnQKRopeKVBuffers[int]) error {
	if !bytes.Equal(c.Bytes(a.QOut), c.Bytes(b.QOut)) {
		return fmt.Errorf("q differs from the dispatch without ATTN_MROPE")
	}
	if !bytes.Equal(c.Bytes(a.KCache), c.Bytes(b.KCache)) || !bytes.Equal(c.Bytes(a.VCache), c.Bytes(b.VCache)) {
		return fmt.Errorf("the caches differ from the dispatch without ATTN_MROPE")
	}
	return nil
}

// mropeRowsCase is a multi-row decode step (ATTN_SEQ_ROWS) whose rows sit at slots b.pos with
// deltas 0, −7 and 100: row 0 text (three equal offsets, the delta), rows 1 and 2 with distinct
// offsets per axis, against AttnQKRopeKVRowsMulti.
func mropeRowsCase(b attnBatchShape) Case {
	s, R := b.pool(), b.rows()
	kernel := fmt.Sprintf("attn_qk_rope_kv+rows%d+mrope", R)
	return Case{
		Name: fmt.Sprintf("%s/%s_rot%d_tg%d", kernel, attnTag(s), s.RotaryDim, b.threads), Kernels: []string{kernel}, Tol: ropeTol,
		Shape: fmt.Sprintf("%s, rotary %d, threadgroups of %d, deltas 0, −7, 100", b.describe(s), s.RotaryDim, b.threads),
		Run: func(c *Ctx) error {
			if err := s.Validate(); err != nil {
				return err
			}
			p, axes := ropeParams(c.R, s), mropeAxes(s)
			qd, kd := s.Heads*2*s.HeadDim, s.KVHeads*s.HeadDim
			qg, k, v := RandFloats(c.R, R*qd, 1), RandFloats(c.R, R*kd, 1), RandFloats(c.R, R*kd, 1)
			tables, steps := attnBatchTables(c.R, s, R, false), attnBatchSteps(b.pos)
			ropeOff := make([]uint32, 3*R)
			for r, d := range []int{0, -7, 100}[:R] {
				ropeOff[3*r], ropeOff[3*r+1], ropeOff[3*r+2] = uint32(int32(d)), uint32(int32(d+r)), uint32(int32(d+2*r))
			}
			poison := bytes.Repeat([]byte{0xFF}, s.CacheBytes())
			norms := kernels.AttnQKRopeKVBuffers[int]{QNorm: c.In("q_norm", p.QNorm), KNorm: c.In("k_norm", p.KNorm), InvFreq: c.In("inv_freq", p.InvFreq)}
			all := ropeBatchBufs(c, s, R, "", qg, k, v, steps, tables, norms, c.InOut("k_cache", poison), c.InOut("v_cache", poison))
			c.Add(kernels.AttnQKRopeKVMRoPE(kernels.AttnQKRopeKVRowsCall(s, p.Eps, b.threads, R, all), c.In("rope_off", ropeOff), c.In("rope_axis", axes)), false)
			if err := c.Step(); err != nil {
				return err
			}
			kWant, vWant := bytes.Clone(poison), bytes.Clone(poison)
			c.Rel("q", c.F32(all.QOut)[:R*s.Heads*s.HeadDim], kernels.AttnQKRopeKVRowsMulti(s, p, steps, ropeOff, axes, qg, k, v, kWant, vWant, tables))
			var writes []ropeWrite
			for r, pos := range b.pos {
				writes = append(writes, ropeWrite{pos: pos, row: s.Row(attnBatchTable(s, tables, r), pos)})
			}
			return ropeCheckCaches(c, s, writes, c.Bytes(all.KCache), c.Bytes(all.VCache), kWant, vWant)
		},
	}
}
