package cases

import (
	"bytes"
	"fmt"
	"math/rand/v2"

	"github.com/lilyformac/lily/metal/kernels"
)

// The multi-row decode step's attention: R sequences, each at its own position with its own
// block table into one shared page pool, through one attn_qk_rope_kv (ATTN_SEQ_ROWS) and one
// attn_decode_partial/combine pair. Every case checks each row against the reference on that
// row alone and, bit for bit, against the one-row dispatch on it (today's calls; for the rope
// kernel with ATTN_SEQ_ROWS unset), the other rows holding different positions, pages and data.

// attnBatchPos are the rows' positions: row r of an R-row case is at attnBatchPos[r] in the small
// shapes (320 positions in pages of 64, 5 splits): 300 (five splits active), 17 and 1 (one), 64 (a
// page's first position), 257, 400 (past the cache: all of it attended to, nothing written), 130
// and 0.
var attnBatchPos = []int{300, 17, 1, 64, 257, 400, 130, 0}

// attnBatchProdPos are the production shape's rows' positions (1,024 positions in pages of 256,
// the grid of a 32k cache): both sides of a page boundary and the last position among them.
var attnBatchProdPos = []int{1, 17, 300, 700, 256, 5, 1023, 255}

// attnBatchShape is one multi-row case: s's pool is sized by the case to hold every row's table.
type attnBatchShape struct {
	s       kernels.AttnShape
	pos     []int // a position per row
	splits  int   // attn_decode: the plan's splits per kv head
	threads int   // attn_qk_rope_kv: the threadgroup
	shared  bool  // every row's first page is one pool page (a cached prefix; attn_decode only)
	heavy   bool
	why     string
}

func (b attnBatchShape) rows() int { return len(b.pos) }

// pool is b.s with a pool of a table's pages per row and one spare page that no table maps.
func (b attnBatchShape) pool() kernels.AttnShape {
	s := b.s
	s.Pages = b.rows()*s.TableLen() + 1
	return s
}

func (b attnBatchShape) describe(s kernels.AttnShape) string {
	out := fmt.Sprintf("%d rows at positions %v, %s, a table each (pages interleaved)", b.rows(), b.pos, attnShape(s))
	if b.shared {
		out += ", the first page shared"
	}
	if b.why != "" {
		out += " (" + b.why + ")"
	}
	return out
}

// attnBatchShapes are a small shape per row count R and KV format, and the model's heads at R = 8
// in each format.
func attnBatchShapes(threads, prodThreads, prodSplits int) []attnBatchShape {
	var out []attnBatchShape
	for _, bits := range []int{kernels.KVBF16, kernels.KV8} {
		for _, r := range qmvBatches {
			out = append(out, attnBatchShape{s: attnShapeOf(4, 2, 64, 16, 320, bits, 64, 0), pos: attnBatchPos[:r],
				splits: kernels.AttnSplits(320), threads: threads})
		}
		out = append(out, attnBatchShape{s: attnShapeOf(16, 2, 256, 64, 1024, bits, 256, 0), pos: attnBatchProdPos,
			splits: prodSplits, threads: prodThreads, heavy: true, why: "the model's heads"})
	}
	return out
}

// attnBatchSteps is the step buffer of a multi-row step: [R]{pos, token}.
func attnBatchSteps(pos []int) []uint32 {
	steps := make([]uint32, 2*len(pos))
	for r, p := range pos {
		steps[2*r], steps[2*r+1] = uint32(p), uint32(3+r)
	}
	return steps
}

// attnBatchTables are the rows' block tables, [R][TableLen]: the pool's pages shuffled and dealt
// to the rows in turn (row r's page i is perm[i·R + r]), so the rows' pages interleave in the pool;
// shared maps every row's first page to row 0's, as running sequences share a cached prefix.
func attnBatchTables(r *rand.Rand, s kernels.AttnShape, rows int, shared bool) []uint32 {
	perm, tl := r.Perm(s.Pages), s.TableLen()
	t := make([]uint32, rows*tl)
	for row := range rows {
		for i := range tl {
			t[row*tl+i] = uint32(perm[i*rows+row])
		}
		if shared {
			t[row*tl] = t[0]
		}
	}
	return t
}

// attnBatchTable is row r's block table.
func attnBatchTable(s kernels.AttnShape, tables []uint32, r int) []uint32 {
	tl := s.TableLen()
	return tables[r*tl : (r+1)*tl]
}

// attnBatchCache fills each row's positions 0..pos (those in the cache) through its table with
// N(0, 1) values, every other byte 0xFF (NaN), so a row reading past its position, or a page no
// table maps, poisons its output.
func attnBatchCache(r *rand.Rand, s kernels.AttnShape, tables []uint32, pos []int) []byte {
	c := bytes.Repeat([]byte{0xFF}, s.CacheBytes())
	x := make([]float32, s.HeadDim)
	for row, p := range pos {
		for kvh := range s.KVHeads {
			for j := range min(p+1, s.MaxCtx) {
				for d := range x {
					x[d] = float32(r.NormFloat64())
				}
				s.StoreKV(c, kvh, s.Row(attnBatchTable(s, tables, row), j), x)
			}
		}
	}
	return c
}

// attnNotInvariant wraps a bit-for-bit difference from the one-row dispatch.
func attnNotInvariant(err error) error {
	return fmt.Errorf("not batch-invariant (want the one-row dispatch on the row alone): %w", err)
}

// ---- attn_decode_partial / attn_decode_combine ------------------------------------------------

func attnBatchDecodeCases() []Case {
	var out []Case
	shapes := attnBatchShapes(0, 0, kernels.AttnSplits(32768))
	// Rows reading one shared prefix page (its last writer's values, the same for every row).
	for _, x := range []struct{ bits, rows int }{{kernels.KVBF16, 4}, {kernels.KV8, 8}} {
		shapes = append(shapes, attnBatchShape{s: attnShapeOf(4, 2, 64, 16, 320, x.bits, 64, 0), pos: attnBatchPos[:x.rows],
			splits: kernels.AttnSplits(320), shared: true, why: "a cached prefix"})
	}
	for _, b := range shapes {
		out = append(out, attnBatchDecodeCase(b))
	}
	return out
}

// attnDecodeBufs are one dispatch pair's buffers.
type attnDecodeBufs struct {
	p kernels.AttnDecodePartialBuffers[int]
	c kernels.AttnDecodeCombineBuffers[int]
}

// newAttnDecodeBufs declares the buffers of a partial/combine pair over rows rows of q, qg, steps
// and tables, on the shared pools kb and vb, its names prefixed with name.
func newAttnDecodeBufs(c *Ctx, s kernels.AttnShape, splits, rows int, name string, q, qg []float32, steps, tables []uint32, kb, vb int) attnDecodeBufs {
	oLen, mlLen := s.AttnPartialLens(splits)
	step := c.In(name+"step", steps)
	o, ml := c.Out(name+"o_part", 4*rows*oLen), c.Out(name+"ml_part", 4*rows*mlLen)
	return attnDecodeBufs{
		p: kernels.AttnDecodePartialBuffers[int]{Q: c.In(name+"q", q), KCache: kb, VCache: vb, Step: step, OPart: o, MLPart: ml, Table: c.In(name+"table", tables)},
		c: kernels.AttnDecodeCombineBuffers[int]{OPart: o, MLPart: ml, QG: c.In(name+"qg", qg), Step: step, Out: c.Out(name+"out", 4*rows*s.Heads*s.HeadDim)},
	}
}

// attnBatchDecodeCase runs R rows through one partial/combine pair (AttnDecode*RowsCall) and each
// row alone through today's pair (AttnDecode*Call), and checks each row's output against
// AttnDecode on its position and table, and its output and partials bit for bit against the
// one-row pair's.
func attnBatchDecodeCase(b attnBatchShape) Case {
	s, R := b.pool(), b.rows()
	partial, combine := fmt.Sprintf("attn_decode_partial+rows%d", R), fmt.Sprintf("attn_decode_combine+rows%d", R)
	tag := fmt.Sprintf("%s_s%d", attnTag(s), b.splits)
	if b.shared {
		tag += "_shared"
	}
	return Case{
		Name: partial + "/" + tag, Kernels: []string{partial, combine},
		Shape: fmt.Sprintf("%s, %d splits", b.describe(s), b.splits), Tol: attnTol, Heavy: b.heavy,
		Run: func(c *Ctx) error {
			if err := s.Validate(); err != nil {
				return err
			}
			qd := s.Heads * s.HeadDim
			tables, steps := attnBatchTables(c.R, s, R, b.shared), attnBatchSteps(b.pos)
			kc, vc := attnBatchCache(c.R, s, tables, b.pos), attnBatchCache(c.R, s, tables, b.pos)
			q, qg := RandFloats(c.R, R*qd, 2.5), RandFloats(c.R, R*2*qd, 1)
			kb, vb := c.In("k_cache", kc), c.In("v_cache", vc)
			all := newAttnDecodeBufs(c, s, b.splits, R, "", q, qg, steps, tables, kb, vb)
			c.Add(kernels.AttnDecodePartialRowsCall(s, b.splits, R, all.p), false)
			c.Add(kernels.AttnDecodeCombineRowsCall(s, b.splits, R, all.c), true)
			one := make([]attnDecodeBufs, R)
			for r := range R {
				one[r] = newAttnDecodeBufs(c, s, b.splits, 1, fmt.Sprintf("row%d.", r), q[r*qd:(r+1)*qd], qg[2*r*qd:2*(r+1)*qd],
					steps[2*r:2*r+2], attnBatchTable(s, tables, r), kb, vb)
				c.Add(kernels.AttnDecodePartialCall(s, b.splits, one[r].p), false)
				c.Add(kernels.AttnDecodeCombineCall(s, b.splits, one[r].c), true)
			}
			if err := c.Step(); err != nil {
				return err
			}
			return attnBatchDecodeCheck(c, s, b.splits, all, one, kernels.AttnDecodeRows(s, steps, q, qg, kc, vc, tables))
		},
	}
}

// attnBatchDecodeCheck compares each row of the R-row pair's output with want and, with its
// partials, bit for bit with the one-row pair's.
func attnBatchDecodeCheck(c *Ctx, s kernels.AttnShape, splits int, all attnDecodeBufs, one []attnDecodeBufs, want []float32) error {
	R, qd := len(one), s.Heads*s.HeadDim
	oLen, mlLen := s.AttnPartialLens(splits)
	got, o, ml := c.F32(all.c.Out), c.F32(all.p.OPart), c.F32(all.p.MLPart)
	for r := range R {
		what := fmt.Sprintf("row %d of %d: ", r, R)
		c.Rel(what+"out", got[r*qd:(r+1)*qd], want[r*qd:(r+1)*qd])
		for _, p := range []struct {
			name      string
			got, want []float32
		}{
			{"out", got[r*qd : (r+1)*qd], c.F32(one[r].c.Out)},
			{"o_part", o[r*oLen : (r+1)*oLen], c.F32(one[r].p.OPart)},
			{"ml_part", ml[r*mlLen : (r+1)*mlLen], c.F32(one[r].p.MLPart)},
		} {
			if err := Bits(what+p.name, p.got, p.want); err != nil {
				return attnNotInvariant(err)
			}
		}
	}
	return nil
}

// ---- attn_qk_rope_kv ----------------------------------------------------------------------------

func ropeBatchCases() []Case {
	var out []Case
	for _, b := range attnBatchShapes(64, kernels.AttnRopeThreads, 0) {
		out = append(out, ropeBatchCase(b))
	}
	return out
}

// ropeBatchBufs declares attn_qk_rope_kv's buffers for rows rows of qg, k, v, steps and tables,
// the norms and RoPE table shared, into the caches kc and vc, its names prefixed with name.
func ropeBatchBufs(c *Ctx, s kernels.AttnShape, rows int, name string, qg, k, v []float32, steps, tables []uint32, norms kernels.AttnQKRopeKVBuffers[int], kc, vc int) kernels.AttnQKRopeKVBuffers[int] {
	b := norms
	b.QG, b.K, b.V = c.In(name+"qg", qg), c.In(name+"k", k), c.In(name+"v", v)
	b.Step, b.Table = c.In(name+"step", steps), c.In(name+"table", tables)
	b.QOut, b.KCache, b.VCache = c.Out(name+"q_rot", 4*rows*s.Heads*s.HeadDim), kc, vc
	return b
}

// ropeBatchCase runs R rows through one attn_qk_rope_kv dispatch with ATTN_SEQ_ROWS
// (AttnQKRopeKVRowsCall) and each row alone through today's dispatch (AttnQKRopeKVCall, the
// constant unset) into caches of their own, and checks each row's queries and cache rows against
// AttnQKRopeKV on its position and table, and the queries and both whole caches bit for bit
// against the one-row dispatches'.
func ropeBatchCase(b attnBatchShape) Case {
	s, R := b.pool(), b.rows()
	kernel := fmt.Sprintf("attn_qk_rope_kv+rows%d", R)
	return Case{
		Name: fmt.Sprintf("%s/%s_rot%d_tg%d", kernel, attnTag(s), s.RotaryDim, b.threads), Kernels: []string{kernel},
		Shape: fmt.Sprintf("%s, rotary %d, threadgroups of %d", b.describe(s), s.RotaryDim, b.threads), Tol: ropeTol, Heavy: b.heavy,
		Run: func(c *Ctx) error {
			if err := s.Validate(); err != nil {
				return err
			}
			p := ropeParams(c.R, s)
			qd, kd := s.Heads*2*s.HeadDim, s.KVHeads*s.HeadDim
			qg, k, v := RandFloats(c.R, R*qd, 1), RandFloats(c.R, R*kd, 1), RandFloats(c.R, R*kd, 1)
			tables, steps := attnBatchTables(c.R, s, R, false), attnBatchSteps(b.pos)
			poison := bytes.Repeat([]byte{0xFF}, s.CacheBytes())
			norms := kernels.AttnQKRopeKVBuffers[int]{QNorm: c.In("q_norm", p.QNorm), KNorm: c.In("k_norm", p.KNorm), InvFreq: c.In("inv_freq", p.InvFreq)}
			all := ropeBatchBufs(c, s, R, "", qg, k, v, steps, tables, norms, c.InOut("k_cache", poison), c.InOut("v_cache", poison))
			c.Add(kernels.AttnQKRopeKVRowsCall(s, p.Eps, b.threads, R, all), false)
			kOne, vOne := c.InOut("row.k_cache", poison), c.InOut("row.v_cache", poison)
			one := make([]kernels.AttnQKRopeKVBuffers[int], R)
			for r := range R {
				one[r] = ropeBatchBufs(c, s, 1, fmt.Sprintf("row%d.", r), qg[r*qd:(r+1)*qd], k[r*kd:(r+1)*kd], v[r*kd:(r+1)*kd],
					steps[2*r:2*r+2], attnBatchTable(s, tables, r), norms, kOne, vOne)
				c.Add(kernels.AttnQKRopeKVCall(s, p.Eps, b.threads, one[r]), false)
			}
			if err := c.Step(); err != nil {
				return err
			}
			kWant, vWant := bytes.Clone(poison), bytes.Clone(poison)
			qWant := kernels.AttnQKRopeKVRows(s, p, steps, qg, k, v, kWant, vWant, tables)
			return ropeBatchCheck(c, s, b.pos, tables, all, one, qWant, kWant, vWant)
		},
	}
}

// ropeBatchCheck compares each row's queries with qWant and bit for bit with its one-row
// dispatch's, the caches with the reference's (ropeCheckCaches) and byte for byte with the
// one-row dispatches'.
func ropeBatchCheck(c *Ctx, s kernels.AttnShape, pos []int, tables []uint32, all kernels.AttnQKRopeKVBuffers[int], one []kernels.AttnQKRopeKVBuffers[int], qWant []float32, kWant, vWant []byte) error {
	qd := s.Heads * s.HeadDim
	q := c.F32(all.QOut)
	var writes []ropeWrite
	for r, p := range pos {
		what := fmt.Sprintf("row %d of %d: q", r, len(pos))
		c.Rel(what, q[r*qd:(r+1)*qd], qWant[r*qd:(r+1)*qd])
		if err := Bits(what, q[r*qd:(r+1)*qd], c.F32(one[r].QOut)); err != nil {
			return attnNotInvariant(err)
		}
		if p < s.MaxCtx {
			writes = append(writes, ropeWrite{pos: p, row: s.Row(attnBatchTable(s, tables, r), p)})
		}
	}
	if err := ropeCheckCaches(c, s, writes, c.Bytes(all.KCache), c.Bytes(all.VCache), kWant, vWant); err != nil {
		return err
	}
	for _, cache := range []struct {
		name     string
		got, one int
	}{{"k_cache", all.KCache, one[0].KCache}, {"v_cache", all.VCache, one[0].VCache}} {
		if i := attnFirstDiff(c.Bytes(cache.got), c.Bytes(cache.one)); i >= 0 {
			return attnNotInvariant(fmt.Errorf("%s byte %d = %#x, %#x bit for bit", cache.name, i, c.Bytes(cache.got)[i], c.Bytes(cache.one)[i]))
		}
	}
	return nil
}

// attnFirstDiff is the first index where a and b (of one length) differ, or -1.
func attnFirstDiff(a, b []byte) int {
	for i := range a {
		if a[i] != b[i] {
			return i
		}
	}
	return -1
}
