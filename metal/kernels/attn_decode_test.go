//go:build linux

package kernels

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/lilyformac/lily/metal/emu"
)

type attnCase struct {
	s      AttnShape
	splits int // 0: AttnSplits(s.MaxCtx)
	n      int // positions attended to: pos = n-1
}

// randCache fills positions 0..n-1 of a cache with N(0, scale²) values (in the shape's format)
// and the rest with 0xFF bytes (NaN in bf16 values and in 8-bit scales), so reading past pos
// poisons the output.
func randCache(r *rand.Rand, s AttnShape, table []uint32, n int, scale float32) []byte {
	c := make([]byte, s.CacheBytes())
	for i := range c {
		c[i] = 0xFF
	}
	x := make([]float32, s.HeadDim)
	for kvh := range s.KVHeads {
		for j := range n {
			for d := range x {
				x[d] = float32(r.NormFloat64()) * scale
			}
			s.StoreKV(c, kvh, s.Row(table, j), x)
		}
	}
	return c
}

// exactAttn is the attention output in float64 (from the same caches: the values LoadKV reads
// are exact in float32 for both formats).
func exactAttn(s AttnShape, n int, q, qg []float32, kCache, vCache []byte, table []uint32) []float64 {
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

// errVs64 is max|got - exact| / max|exact|.
func errVs64(got []float32, exact []float64) float64 {
	var diff, scale float64
	for i, e := range exact {
		diff = max(diff, math.Abs(float64(got[i])-e))
		scale = max(scale, math.Abs(e))
	}
	return diff / scale
}

// runAttnDecode runs attn_decode_partial and attn_decode_combine for one token and returns the
// output's error relative to max|out| against the float64 attention, and against AttnDecode.
func runAttnDecode(t *testing.T, lib *emu.Library, r *rand.Rand, c attnCase, order emu.Order) (exactErr, refErr float64) {
	t.Helper()
	s := c.s
	if err := s.Validate(); err != nil {
		t.Fatal(err)
	}
	splits := c.splits
	if splits == 0 {
		splits = AttnSplits(s.MaxCtx)
	}
	pos := c.n - 1
	table := randTable(r, s)
	kCache, vCache := randCache(r, s, table, c.n, 1), randCache(r, s, table, c.n, 1)
	q := randFloats(r, s.Heads*s.HeadDim, 2.5) // scores with a standard deviation of 2.5
	qg := randFloats(r, s.Heads*2*s.HeadDim, 1)
	want := AttnDecode(s, pos, q, qg, kCache, vCache, table)

	oLen, mlLen := s.AttnPartialLens(splits)
	bO, bML, bOut := emu.NewBuffer(4*oLen), emu.NewBuffer(4*mlLen), emu.NewBuffer(4*s.Heads*s.HeadDim)
	bO.Fill(0xFF)
	bML.Fill(0xFF)
	bOut.Fill(0xFF)
	bStep := emu.BufferOf([]uint32{uint32(pos), 3})
	mustDispatch(t, lib, AttnDecodePartialCall(s, splits, AttnDecodePartialBuffers[*emu.Buffer]{
		Q: emu.BufferOf(q), KCache: emu.BufferOf(kCache), VCache: emu.BufferOf(vCache),
		Step: bStep, OPart: bO, MLPart: bML, Table: emu.BufferOf(table),
	}), order, uint64(c.n))
	// Every split writes its partial, empty ones the neutral one.
	ml := bML.Float32s()
	active := AttnActiveSplits(c.n, splits)
	for i := 0; i < len(ml); i += 2 {
		split := (i / 2) % splits
		if empty := split >= active; empty != (ml[i] == -math.MaxFloat32 && ml[i+1] == 0) {
			t.Fatalf("n %d splits %d: split %d (active %d) wrote (m, l) = (%g, %g)", c.n, splits, split, active, ml[i], ml[i+1])
		}
	}
	for i, v := range bO.Float32s() {
		if v != v {
			t.Fatalf("n %d: o partial [%d] not written", c.n, i)
		}
	}
	mustDispatch(t, lib, AttnDecodeCombineCall(s, splits, AttnDecodeCombineBuffers[*emu.Buffer]{
		OPart: bO, MLPart: bML, QG: emu.BufferOf(qg), Step: bStep, Out: bOut,
	}), order, uint64(c.n)+1)
	got := bOut.Float32s()
	exactErr, refErr = errVs64(got, exactAttn(s, c.n, q, qg, kCache, vCache, table)), relErr(got, want)
	// The reference sums n float32 terms in sequence; the kernel in tiles and splits.
	if !(exactErr <= 2e-6 && refErr <= 1e-5) || math.IsNaN(errVs64(want, exactAttn(s, c.n, q, qg, kCache, vCache, table))) {
		t.Errorf("%+v splits %d n %d %v: error vs float64 %.2g, vs AttnDecode %.2g (of max|out|)", s, splits, c.n, order, exactErr, refErr)
	}
	return exactErr, refErr
}

func TestAttnDecode(t *testing.T) {
	lib := library(t, emu.Options{}, "attn_decode.metal")
	r := rand.New(rand.NewPCG(51, 52))
	var cases []attnCase
	for _, s := range []AttnShape{{4, 2, 64, 16, 200, KVBF16, 0, 0}, {2, 1, 256, 64, 200, KVBF16, 0, 0}, {6, 2, 96, 0, 200, KVBF16, 0, 0}, {4, 2, 64, 16, 200, KV8, 0, 0}, {2, 1, 256, 64, 200, KV8, 0, 0}} {
		for _, n := range []int{1, 2, 63, 64, 65, 200} {
			cases = append(cases, attnCase{s: s, n: n})
		}
	}
	cases = append(cases,
		attnCase{s: AttnShape{4, 2, 64, 16, 64, KVBF16, 0, 0}, n: 64},                // a single split
		attnCase{s: AttnShape{4, 2, 64, 16, 5000, KVBF16, 0, 0}, splits: 3, n: 5000}, // long chunks
		attnCase{s: AttnShape{4, 2, 64, 16, 5000, KVBF16, 0, 0}, n: 5000},            // 64 splits, 63 active
		attnCase{s: AttnShape{8, 1, 32, 32, 300, KVBF16, 0, 0}, n: 300},              // 8 heads per kv head, E = 1
		attnCase{s: AttnShape{8, 1, 32, 32, 300, KV8, 0, 0}, n: 300},
		attnCase{s: AttnShape{4, 2, 64, 16, 5000, KV8, 0, 0}, n: 5000},
		attnCase{s: AttnShape{4, 2, 64, 16, 300, KVBF16, 16, 20}, n: 300},   // pages of one tile, shuffled
		attnCase{s: AttnShape{4, 2, 64, 16, 300, KV8, 64, 6}, n: 257},       // a page boundary inside a split
		attnCase{s: AttnShape{2, 1, 256, 64, 1000, KVBF16, 256, 5}, n: 700}, // the production page size
	)
	var worstX, worstR float64
	for _, c := range cases {
		for _, order := range emu.Orders {
			t.Run(fmt.Sprintf("%d_%d_%d_max%d_kv%d_s%d_n%d_%v", c.s.Heads, c.s.KVHeads, c.s.HeadDim, c.s.MaxCtx, c.s.bits(), c.splits, c.n, order), func(t *testing.T) {
				xe, re := runAttnDecode(t, lib, r, c, order)
				worstX, worstR = max(worstX, xe), max(worstR, re)
			})
		}
	}
	t.Logf("edge shapes and contexts: max error vs float64 %.2g, vs AttnDecode %.2g (of max|out|)", worstX, worstR)
}

// TestAttnDecodeProduction runs the model's shape (16 query heads over 2 kv heads, head dim 256)
// with the grid of a 32k cache (64 splits) at a short and a long context.
func TestAttnDecodeProduction(t *testing.T) {
	lib := library(t, emu.Options{}, "attn_decode.metal")
	r := rand.New(rand.NewPCG(53, 54))
	for _, bits := range []int{KVBF16, KV8} {
		s := AttnShape{16, 2, 256, 64, 5000, bits, 256, 24}
		for i, n := range []int{65, 5000} {
			xe, re := runAttnDecode(t, lib, r, attnCase{s: s, splits: AttnSplits(32768), n: n}, emu.Orders[i])
			t.Logf("model shape, %d-bit cache, %d positions, %d splits (%d active): error vs float64 %.2g, vs AttnDecode %.2g (of max|out|)",
				bits, n, AttnSplits(32768), AttnActiveSplits(n, AttnSplits(32768)), xe, re)
		}
	}
}

func TestAttnDecodeASan(t *testing.T) {
	lib := library(t, emu.Options{ASan: true}, "attn_decode.metal")
	r := rand.New(rand.NewPCG(55, 56))
	runAttnDecode(t, lib, r, attnCase{s: AttnShape{4, 2, 64, 16, 130, KVBF16, 0, 0}, n: 130}, emu.Shuffle) // last rows of the cache
	runAttnDecode(t, lib, r, attnCase{s: AttnShape{2, 1, 256, 64, 300, KVBF16, 0, 0}, n: 70}, emu.Reverse)
	runAttnDecode(t, lib, r, attnCase{s: AttnShape{4, 2, 64, 16, 130, KV8, 0, 0}, n: 130}, emu.Shuffle)
	runAttnDecode(t, lib, r, attnCase{s: AttnShape{4, 2, 64, 16, 130, KVBF16, 16, 9}, n: 130}, emu.Reverse) // every page of the pool in use
}

// TestAttnSplitRule pins the split rule's edges.
func TestAttnSplitRule(t *testing.T) {
	for _, c := range []struct{ maxCtx, n, splits, chunk, active int }{
		{262144, 1, 64, 64, 1},
		{262144, 64, 64, 64, 1},
		{262144, 65, 64, 64, 2},
		{262144, 4096, 64, 64, 64},
		{262144, 4097, 64, 80, 52},
		{262144, 262144, 64, 4096, 64},
		{100, 100, 2, 64, 2},
		{64, 64, 1, 64, 1},
	} {
		s := AttnSplits(c.maxCtx)
		if s != c.splits || AttnChunk(c.n, s) != c.chunk || AttnActiveSplits(c.n, s) != c.active {
			t.Errorf("max %d n %d: splits %d chunk %d active %d, want %d %d %d", c.maxCtx, c.n, s, AttnChunk(c.n, s), AttnActiveSplits(c.n, s), c.splits, c.chunk, c.active)
		}
	}
}
