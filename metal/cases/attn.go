package cases

import (
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/lilyformac/lily/metal/kernels"
)

// attnTol: the attention output relative to max|out| against the Go reference (AttnDecode,
// AttnPrefill token by token): 1e-5 on the emulator — the reference sums n float32 terms in
// sequence, the kernels in tiles and splits; on the emulator attn_decode must also be within
// 2e-6 of the float64 attention. Metal's fast exp: 1e-4.
var attnTol = Tol{Emu: 1e-5, Metal: 1e-4}

const attnExactTol = 2e-6

// attnTensorTol and attnTensorTol8 are attn_prefill_tensor's tolerances against AttnPrefill on
// the same q rounded to bfloat, relative to max|out|, for a bf16 and an 8-bit cache; u = 2⁻⁹ is
// bfloat's unit roundoff. An output is out = σ(g)·o, o = Σ_j w_j v_j over softmax weights w_j;
// R = max σ(g)·|v_j − o| / max|out| is under 3 on the cases' inputs (N(0, 1) values and gates;
// 1.5 to 2.6 seen).
//   - P rounded to bfloat scales each weight by 1 + ε_j, |ε_j| ≤ u, and l sums the rounded P, so
//     the weights still sum to 1 and o moves by Σ_j w_j (ε_j − ε̄)(v_j − o): at most 2u·R·max|out|
//     = 6u, taken as 8u = 2⁻⁶. That is all for a bf16 cache (K and V exact in bfloat).
//   - An 8-bit cache's code·scale rounded to bfloat: V's adds at most u·σ(g)|v_j| ≤ u(R + 1) = 4u;
//     K's moves each score by Δs_j = Σ_d q_d Δk_d / √HD, independent roundings of std ≈
//     u·rms(q)·rms(k)/√3 ≈ 1.5u here (q of std 2.5, k of 1), which moves o by Σ_j w_j (Δs_j −
//     Δs̄)(v_j − o): std ≤ 1.5u·R, 4σ = 18u. 8u + 4u + 18u = 30u, taken as 32u = 2⁻⁴.
//
// Seen on the emulator: 1e-3 (bf16) and 8e-3 (8-bit). Metal's fast exp moves o by ~1e-6, nothing
// here. Planted bugs give errors of 1 to 2.5: O's rescale taking the next row's correction (in
// every case of more than one key tile), scores without 1/√HD (in every case).
var attnTensorTol, attnTensorTol8 = Tol{Emu: 1.0 / 64, Metal: 1.0 / 64}, Tol{Emu: 1.0 / 16, Metal: 1.0 / 16}

// attnSelftest is the selftest's shape: the model's heads, 512 positions in pages of 256, a
// table out of order with pool page 1 unused.
var (
	attnSelftest      = kernels.AttnShape{Heads: 16, KVHeads: 2, HeadDim: 256, RotaryDim: 64, MaxCtx: 512, PageSize: 256, Pages: 3}
	attnSelftestTable = []uint32{2, 0}
)

// attnShapeOf is an AttnShape: heads, kv heads, head dim, rotary dim, positions, KV format,
// page size and pages.
func attnShapeOf(heads, kvHeads, headDim, rotary, maxCtx, bits, pageSize, pages int) kernels.AttnShape {
	return kernels.AttnShape{Heads: heads, KVHeads: kvHeads, HeadDim: headDim, RotaryDim: rotary, MaxCtx: maxCtx, KVBits: bits, PageSize: pageSize, Pages: pages}
}

// attnHeavy: a case that attends over more than 8 M head elements (positions × heads × head
// dim × tokens) runs in one thread order in go test.
func attnHeavy(s kernels.AttnShape, positions, tokens int) bool {
	return s.Heads*s.HeadDim*positions*tokens > 8<<20
}

func kvBits(s kernels.AttnShape) int {
	if s.KVBits == kernels.KV8 {
		return kernels.KV8
	}
	return kernels.KVBF16
}

func attnTag(s kernels.AttnShape) string {
	tag := fmt.Sprintf("%d_%d_%d_max%d_kv%d", s.Heads, s.KVHeads, s.HeadDim, s.MaxCtx, kvBits(s))
	if s.PageSize > 0 {
		tag += fmt.Sprintf("_pages%dx%d", s.Pages, s.PageSize)
	}
	return tag
}

func attnShape(s kernels.AttnShape) string {
	out := fmt.Sprintf("%d/%d heads × %d, %d-bit KV", s.Heads, s.KVHeads, s.HeadDim, kvBits(s))
	if s.PageSize > 0 {
		out += fmt.Sprintf(", a pool of %d pages of %d", s.Pages, s.PageSize)
	}
	return out
}

// attnTable is table, or a random one: a sequence's pages mapped to distinct pool pages in a
// random order (the identity for a single-page pool).
func attnTable(r *rand.Rand, s kernels.AttnShape, table []uint32) []uint32 {
	if table != nil {
		return table
	}
	if s.PageSize == 0 {
		return s.IdentityTable()
	}
	perm := r.Perm(s.Pages)
	t := make([]uint32, s.TableLen())
	for i := range t {
		t[i] = uint32(perm[i]) // a shape with fewer pages than its table fails here
	}
	return t
}

// attnCache fills positions 0..n-1 of a cache with N(0, 1) values (in the shape's format) and
// the rest with 0xFF bytes (NaN in bf16 values and in 8-bit scales), so reading past pos
// poisons the output.
func attnCache(r *rand.Rand, s kernels.AttnShape, table []uint32, n int) []byte {
	c := make([]byte, s.CacheBytes())
	for i := range c {
		c[i] = 0xFF
	}
	x := make([]float32, s.HeadDim)
	for kvh := range s.KVHeads {
		for j := range n {
			for d := range x {
				x[d] = float32(r.NormFloat64())
			}
			s.StoreKV(c, kvh, s.Row(table, j), x)
		}
	}
	return c
}

type attnDecodeShape struct {
	s      kernels.AttnShape
	splits int // 0: AttnSplits(s.MaxCtx)
	n      int // positions attended to: pos = n-1
	table  []uint32
	why    string
}

func attnCases() []Case {
	var ds []attnDecodeShape
	for _, s := range []kernels.AttnShape{attnShapeOf(4, 2, 64, 16, 200, kernels.KVBF16, 0, 0), attnShapeOf(2, 1, 256, 64, 200, kernels.KVBF16, 0, 0),
		attnShapeOf(6, 2, 96, 0, 200, kernels.KVBF16, 0, 0), attnShapeOf(4, 2, 64, 16, 200, kernels.KV8, 0, 0), attnShapeOf(2, 1, 256, 64, 200, kernels.KV8, 0, 0)} {
		for _, n := range []int{1, 2, 63, 64, 65, 200} {
			ds = append(ds, attnDecodeShape{s: s, n: n})
		}
	}
	ds = append(ds,
		attnDecodeShape{s: attnShapeOf(4, 2, 64, 16, 64, kernels.KVBF16, 0, 0), n: 64, why: "a single split"},
		attnDecodeShape{s: attnShapeOf(4, 2, 64, 16, 5000, kernels.KVBF16, 0, 0), splits: 3, n: 5000, why: "long chunks"},
		attnDecodeShape{s: attnShapeOf(4, 2, 64, 16, 5000, kernels.KVBF16, 0, 0), n: 5000, why: "64 splits, 63 active"},
		attnDecodeShape{s: attnShapeOf(8, 1, 32, 32, 300, kernels.KVBF16, 0, 0), n: 300, why: "8 heads per kv head"},
		attnDecodeShape{s: attnShapeOf(8, 1, 32, 32, 300, kernels.KV8, 0, 0), n: 300, why: "8 heads per kv head"},
		attnDecodeShape{s: attnShapeOf(4, 2, 64, 16, 5000, kernels.KV8, 0, 0), n: 5000},
		attnDecodeShape{s: attnShapeOf(4, 2, 64, 16, 300, kernels.KVBF16, 16, 20), n: 300, why: "pages of one tile, shuffled"},
		attnDecodeShape{s: attnShapeOf(4, 2, 64, 16, 300, kernels.KV8, 64, 6), n: 257, why: "a page boundary inside a split"},
		attnDecodeShape{s: attnShapeOf(2, 1, 256, 64, 1000, kernels.KVBF16, 256, 5), n: 700, why: "the production page size"},
		attnDecodeShape{s: attnShapeOf(4, 2, 64, 16, 130, kernels.KVBF16, 0, 0), n: 130, why: "the cache's last rows"},
		attnDecodeShape{s: attnShapeOf(2, 1, 256, 64, 300, kernels.KVBF16, 0, 0), n: 70},
		attnDecodeShape{s: attnShapeOf(4, 2, 64, 16, 130, kernels.KV8, 0, 0), n: 130, why: "the cache's last rows"},
		attnDecodeShape{s: attnShapeOf(4, 2, 64, 16, 130, kernels.KVBF16, 16, 9), n: 130, why: "every page of the pool in use"},
	)
	// The model's shape with the grid of a 32k cache (64 splits), short and long, and the
	// selftest's: 300 positions in two pages.
	for _, bits := range []int{kernels.KVBF16, kernels.KV8} {
		for _, n := range []int{65, 5000} {
			ds = append(ds, attnDecodeShape{s: attnShapeOf(16, 2, 256, 64, 5000, bits, 256, 24), splits: kernels.AttnSplits(32768), n: n, why: "the model's heads"})
		}
		s := attnSelftest
		s.KVBits = bits
		ds = append(ds, attnDecodeShape{s: s, n: 300, table: attnSelftestTable, why: "the model's heads, a table out of order"})
	}
	var out []Case
	for _, d := range ds {
		out = append(out, attnDecodeCase(d))
	}
	// attn_prefill and its tensor form: chunks with and without cached positions before them,
	// partial token blocks (of 8, and of the tensor form's 32/G), key tiles crossing pages of a
	// shuffled table, both cache formats, GQA groups of 1, 2 and 8, head dims of 32, 64 and 256,
	// the pool's last rows, the model's heads; q, the gates and out bfloat as the chunk mode
	// stores them (bf16) in some.
	for _, p := range []struct {
		s            kernels.AttnShape
		pos0, tokens int
		table        []uint32
		bf16         bool
	}{
		{attnShapeOf(4, 2, 64, 16, 100, kernels.KVBF16, 16, 9), 0, 13, nil, false},
		{attnShapeOf(4, 2, 64, 16, 100, kernels.KVBF16, 16, 9), 37, 20, nil, true},
		{attnShapeOf(4, 2, 64, 16, 100, kernels.KV8, 16, 9), 21, 8, nil, false},
		{attnShapeOf(2, 2, 32, 32, 64, kernels.KVBF16, 0, 0), 5, 1, nil, false},
		{attnShapeOf(2, 2, 64, 16, 100, kernels.KV8, 16, 9), 3, 40, nil, true},
		{attnShapeOf(16, 2, 256, 64, 96, kernels.KVBF16, 32, 4), 40, 17, nil, false},
		{attnShapeOf(8, 1, 256, 64, 64, kernels.KV8, 32, 2), 20, 13, nil, false},
		{attnShapeOf(4, 2, 64, 16, 48, kernels.KV8, 16, 3), 30, 18, nil, false},
		{attnSelftest, 300, 20, attnSelftestTable, true},
		{attnShapeOf(16, 2, 256, 64, 512, kernels.KV8, 256, 3), 300, 20, attnSelftestTable, true},
	} {
		for _, tensor := range []bool{false, true} {
			out = append(out, attnPrefillCase(p.s, p.pos0, p.tokens, p.table, tensor, p.bf16))
		}
	}
	return append(out, attnBatchDecodeCases()...)
}

// attnDecodeCase runs attn_decode_partial and attn_decode_combine for one token: every split
// writes its partial (empty ones the neutral (m, l) = (-FLT_MAX, 0)), and the output matches
// AttnDecode (and on the emulator the float64 attention).
func attnDecodeCase(d attnDecodeShape) Case {
	s := d.s
	splits := d.splits
	if splits == 0 {
		splits = kernels.AttnSplits(s.MaxCtx)
	}
	shape := fmt.Sprintf("%s, %d positions, %d splits", attnShape(s), d.n, splits)
	if d.why != "" {
		shape += " (" + d.why + ")"
	}
	return Case{
		Name:    fmt.Sprintf("attn_decode_partial/%s_s%d_n%d", attnTag(s), splits, d.n),
		Kernels: []string{"attn_decode_partial", "attn_decode_combine"}, Shape: shape, Tol: attnTol, Heavy: attnHeavy(s, d.n, 1),
		Run: func(c *Ctx) error {
			if err := s.Validate(); err != nil {
				return err
			}
			r, pos := c.R, d.n-1
			table := attnTable(r, s, d.table)
			kc, vc := attnCache(r, s, table, d.n), attnCache(r, s, table, d.n)
			q := RandFloats(r, s.Heads*s.HeadDim, 2.5) // scores with a standard deviation of 2.5
			qg := RandFloats(r, s.Heads*2*s.HeadDim, 1)
			oLen, mlLen := s.AttnPartialLens(splits)
			step := c.In("step", []uint32{uint32(pos), 3})
			bo, bml, out := c.Out("o_part", 4*oLen), c.Out("ml_part", 4*mlLen), c.Out("out", 4*s.Heads*s.HeadDim)
			c.Add(kernels.AttnDecodePartialCall(s, splits, kernels.AttnDecodePartialBuffers[int]{
				Q: c.In("q", q), KCache: c.In("k_cache", kc), VCache: c.In("v_cache", vc), Step: step, OPart: bo, MLPart: bml, Table: c.In("table", table)}), false)
			c.Add(kernels.AttnDecodeCombineCall(s, splits, kernels.AttnDecodeCombineBuffers[int]{OPart: bo, MLPart: bml, QG: c.In("qg", qg), Step: step, Out: out}), true)
			if err := c.Step(); err != nil {
				return err
			}
			ml, active := c.F32(bml), kernels.AttnActiveSplits(d.n, splits)
			for i := 0; i < len(ml); i += 2 {
				split := (i / 2) % splits
				if empty := split >= active; empty != (ml[i] == -math.MaxFloat32 && ml[i+1] == 0) {
					return fmt.Errorf("split %d (active %d) wrote (m, l) = (%g, %g)", split, active, ml[i], ml[i+1])
				}
			}
			for i, v := range c.F32(bo) {
				if v != v {
					return fmt.Errorf("o_part[%d] not written", i)
				}
			}
			got, want := c.F32(out), kernels.AttnDecode(s, pos, q, qg, kc, vc, table)
			c.Rel("out", got, want)
			if c.Kind == Emu {
				exact := attnExact(s, d.n, q, qg, kc, vc, table)
				if math.IsNaN(errVs64(want, exact)) {
					return fmt.Errorf("the reference: AttnDecode has a NaN")
				}
				if e := errVs64(got, exact); !(e <= attnExactTol) {
					return fmt.Errorf("out is %.2g (of max|out|) off the float64 attention, want ≤ %g", e, attnExactTol)
				}
			}
			return nil
		},
	}
}

// attnExact is the attention output in float64 (from the same caches: the values LoadKV reads
// are exact in float32 for both formats).
func attnExact(s kernels.AttnShape, n int, q, qg []float32, kCache, vCache []byte, table []uint32) []float64 {
	hd, g := s.HeadDim, s.Heads/s.KVHeads
	out := make([]float64, s.Heads*hd)
	kj, vj := make([]float32, hd), make([]float32, hd)
	for head := range s.Heads {
		scores := make([]float64, n)
		m := math.Inf(-1)
		for j := range n {
			s.LoadKV(kCache, head/g, s.Row(table, j), kj)
			for d := range hd {
				scores[j] += float64(q[head*hd+d]) * float64(kj[d])
			}
			scores[j] /= math.Sqrt(float64(hd))
			m = max(m, scores[j])
		}
		var sum float64
		for j := range scores {
			scores[j] = math.Exp(scores[j] - m)
			sum += scores[j]
		}
		o := make([]float64, hd)
		for j, p := range scores {
			s.LoadKV(vCache, head/g, s.Row(table, j), vj)
			for d := range hd {
				o[d] += p / sum * float64(vj[d])
			}
		}
		for d := range hd {
			gate := float64(qg[head*2*hd+hd+d])
			out[head*hd+d] = o[d] / (1 + math.Exp(-gate))
		}
	}
	return out
}

// errVs64 is max|got - exact| / max|exact|, NaN when got holds a NaN.
func errVs64(got []float32, exact []float64) float64 {
	var diff, scale float64
	for i, e := range exact {
		if math.IsNaN(float64(got[i])) {
			return math.NaN()
		}
		diff = max(diff, math.Abs(float64(got[i])-e))
		scale = max(scale, math.Abs(e))
	}
	return diff / scale
}

// attnPrefillCase runs attn_prefill, or with tensor its tensor form (Case.Tensor), for tokens
// tokens after pos0 cached positions (the chunk's K and V in the pool already): the output
// matches AttnDecode token by token — for the tensor form on q rounded to bfloat
// (kernels.BF16Round), as the form stages it, within attnTensorTol. With bf16, q, qg and out are
// bfloat (kernels.BF16Acts), as the chunk mode stores them.
func attnPrefillCase(s kernels.AttnShape, pos0, tokens int, table []uint32, tensor, bf16 bool) Case {
	kernel, call, tol, blocks := "attn_prefill", kernels.AttnPrefillCall[int], attnTol, "blocks of 8 tokens"
	if tensor {
		kernel, call, tol = "attn_prefill_tensor", kernels.AttnPrefillTensorCall[int], attnTensorTol
		if kvBits(s) == kernels.KV8 {
			tol = attnTensorTol8
		}
		blocks = fmt.Sprintf("tensor ops, blocks of %d tokens", kernels.AttnPrefillTensorBlock(s.Heads/s.KVHeads))
	}
	if bf16 {
		blocks += ", q, gates and out bfloat"
	}
	return Case{
		Name:    fmt.Sprintf("%s/%s_pos%d_t%d%s", kernel, attnTag(s), pos0, tokens, actTag(bf16, bf16)),
		Kernels: []string{kernel}, Tol: tol, Heavy: attnHeavy(s, pos0+tokens, tokens), Tensor: tensor,
		Shape: fmt.Sprintf("%s, %d tokens after %d cached positions, %s", attnShape(s), tokens, pos0, blocks),
		Run: func(c *Ctx) error {
			if err := s.Validate(); err != nil {
				return err
			}
			r := c.R
			table := attnTable(r, s, table)
			kc, vc := attnCache(r, s, table, pos0+tokens), attnCache(r, s, table, pos0+tokens)
			qd := s.Heads * s.HeadDim
			q, qg := RandFloats(r, kernels.AttnPrefillRows(tokens)*qd, 2.5), RandFloats(r, tokens*2*qd, 1)
			if tensor || bf16 { // the tensor form rounds q to bfloat as it stages it
				q = kernels.BF16Round(q)
			}
			if bf16 {
				qg = kernels.BF16Round(qg)
			}
			bs := kernels.AttnPrefillBuffers[int]{Q: c.inAct("q", q, bf16), KCache: c.In("k_cache", kc), VCache: c.In("v_cache", vc),
				Step: c.In("step", []uint32{uint32(pos0), 3}), Table: c.In("table", table), QG: c.inAct("qg", qg, bf16), Out: c.outAct("out", tokens*qd, bf16)}
			c.Add(kernels.BF16Acts(call(s, tokens, bs), bf16, bf16), false)
			if err := c.Step(); err != nil {
				return err
			}
			c.relAct("out", bs.Out, kernels.AttnPrefill(s, pos0, tokens, q, qg, kc, vc, table), bf16)
			return nil
		},
	}
}
