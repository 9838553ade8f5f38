//go:build linux

package kernels

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/lilyformac/lily/engine/quant"
	"github.com/lilyformac/lily/metal/emu"
)

func randAttnRopeParams(r *rand.Rand, s AttnShape, theta float64) AttnRopeParams {
	p := AttnRopeParams{QNorm: make([]float32, s.HeadDim), KNorm: make([]float32, s.HeadDim), InvFreq: RopeInvFreq(s.RotaryDim, theta), Eps: 1e-6}
	for i := range p.QNorm {
		p.QNorm[i] = 1 + 0.2*float32(r.NormFloat64())
		p.KNorm[i] = 1 + 0.2*float32(r.NormFloat64())
	}
	return p
}

// bf16Ulps is the largest distance in bf16 steps between two caches of finite values.
func bf16Ulps(got, want []uint16) int {
	worst := 0
	for i := range want {
		a, b := int(int16(got[i])), int(int16(want[i]))
		// map sign-magnitude to a monotonic integer line
		if a < 0 {
			a = math.MinInt16 - a
		}
		if b < 0 {
			b = math.MinInt16 - b
		}
		worst = max(worst, absInt(a-b))
	}
	return worst
}

func absInt(x int) int {
	if x < 0 {
		return -x
	}
	return x
}

// runAttnRope runs attn_qk_rope_kv for one token at pos and compares with AttnQKRopeKV: it
// returns the relative error of the queries and the largest K difference (bf16 cache: in bf16
// steps; 8-bit cache: in codes of the block's scale); V must be exact and the rest of the caches
// untouched.
func runAttnRope(t *testing.T, lib *emu.Library, r *rand.Rand, s AttnShape, pos, threads int, order emu.Order) (qErr float64, kSteps int) {
	t.Helper()
	if err := s.Validate(); err != nil {
		t.Fatal(err)
	}
	p := randAttnRopeParams(r, s, 1e7)
	qg := randFloats(r, s.Heads*2*s.HeadDim, 1)
	k, v := randFloats(r, s.KVHeads*s.HeadDim, 1), randFloats(r, s.KVHeads*s.HeadDim, 1)
	kWant, vWant := make([]byte, s.CacheBytes()), make([]byte, s.CacheBytes())
	for i := range kWant {
		kWant[i], vWant[i] = 0xFF, 0xFF
	}
	table := randTable(r, s)
	qWant := AttnQKRopeKV(s, p, pos, qg, k, v, kWant, vWant, table)

	bQ, bK, bV := emu.NewBuffer(4*len(qWant)), emu.NewBuffer(s.CacheBytes()), emu.NewBuffer(s.CacheBytes())
	bQ.Fill(0xFF)
	bK.Fill(0xFF)
	bV.Fill(0xFF)
	mustDispatch(t, lib, AttnQKRopeKVCall(s, p.Eps, threads, AttnQKRopeKVBuffers[*emu.Buffer]{
		QG: emu.BufferOf(qg), K: emu.BufferOf(k), V: emu.BufferOf(v),
		QNorm: emu.BufferOf(p.QNorm), KNorm: emu.BufferOf(p.KNorm), InvFreq: emu.BufferOf(p.InvFreq),
		Step: emu.BufferOf([]uint32{uint32(pos), 7}),
		QOut: bQ, KCache: bK, VCache: bV, Table: emu.BufferOf(table),
	}), order, uint64(pos))
	qErr = relErr(bQ.Float32s(), qWant)
	kGot, vGot := bK.Bytes(), bV.Bytes()
	row := make([]bool, len(kWant)) // bytes of row pos
	if pos < s.MaxCtx {
		s.CacheSpans(s.Row(table, pos), 1, func(off, n int64) {
			for i := off; i < off+n; i++ {
				row[i] = true
			}
		})
	}
	for i := range vWant {
		if vGot[i] != vWant[i] {
			t.Fatalf("%+v pos %d: v cache byte %d = %#x, want %#x", s, pos, i, vGot[i], vWant[i])
		}
		if !row[i] && kGot[i] != 0xFF {
			t.Fatalf("%+v pos %d: k cache byte %d written (%#x) outside row pos", s, pos, i, kGot[i])
		}
	}
	if pos < s.MaxCtx {
		kSteps = kRowSteps(t, s, s.Row(table, pos), kGot, kWant)
	}
	if !(qErr <= 2e-6) || kSteps > 1 {
		t.Errorf("%+v pos %d tg %d %v: q relative error %.2g, K off by %d step(s)", s, pos, threads, order, qErr, kSteps)
	}
	return qErr, kSteps
}

// kRowSteps is the largest distance between two caches' pool row pos: in bf16 steps, or for an
// 8-bit cache in codes of the larger of the two scales (which must agree to a binary16 step).
func kRowSteps(t *testing.T, s AttnShape, pos int, got, want []byte) int {
	t.Helper()
	worst := 0
	for j := range s.KVHeads {
		if s.KVBits != KV8 {
			base := 2 * (j*s.PoolRows() + pos) * s.HeadDim
			n := 2 * s.HeadDim
			worst = max(worst, bf16Ulps(u16s(got[base:base+n]), u16s(want[base:base+n])))
			continue
		}
		g, w := make([]float32, s.HeadDim), make([]float32, s.HeadDim)
		s.LoadKV(got, j, pos, g)
		s.LoadKV(want, j, pos, w)
		scales := s.KVHeads * s.PoolRows() * s.HeadDim
		for b := 0; b < s.HeadDim; b += KVBlock {
			at := scales + 2*((j*s.PoolRows()+pos)*s.HeadDim/KVBlock+b/KVBlock)
			sg, sw := quant.F16ToF32(u16s(got[at : at+2])[0]), quant.F16ToF32(u16s(want[at : at+2])[0])
			if math.Abs(float64(sg-sw)) > math.Abs(float64(sw))/1024 {
				t.Fatalf("%+v pos %d: kv head %d block %d scale %g, want %g", s, pos, j, b/KVBlock, sg, sw)
			}
			for d := b; d < b+KVBlock; d++ {
				worst = max(worst, int(math.Round(math.Abs(float64(g[d]-w[d]))/float64(max(sg, sw)))))
			}
		}
	}
	return worst
}

func u16s(b []byte) []uint16 {
	out := make([]uint16, len(b)/2)
	for i := range out {
		out[i] = uint16(b[2*i]) | uint16(b[2*i+1])<<8
	}
	return out
}

func TestAttnQKRopeKV(t *testing.T) {
	lib := library(t, emu.Options{}, "attn_rope.metal")
	r := rand.New(rand.NewPCG(41, 42))
	cases := []struct {
		s       AttnShape
		pos     int
		threads int
	}{
		{AttnShape{4, 2, 64, 16, 8, KVBF16, 0, 0}, 0, 64},
		{AttnShape{4, 2, 64, 16, 8, KVBF16, 0, 0}, 7, 40}, // a partial simdgroup
		{AttnShape{4, 2, 64, 16, 70001, KVBF16, 0, 0}, 70000, 32},
		{AttnShape{2, 1, 256, 64, 3, KVBF16, 0, 0}, 1, AttnRopeThreads},
		{AttnShape{2, 1, 256, 64, 3, KVBF16, 0, 0}, 2, 96},      // several dims per thread
		{AttnShape{2, 1, 256, 64, 3, KVBF16, 0, 0}, 5000, 1024}, // pos past the cache: queries only
		{AttnShape{3, 3, 32, 32, 2, KVBF16, 0, 0}, 1, 7},        // rotary over the whole head, fewer threads than a simdgroup
		{AttnShape{2, 2, 32, 0, 2, KVBF16, 0, 0}, 1, 32},        // no rotary dims
		{AttnShape{4, 2, 64, 16, 8, KV8, 0, 0}, 0, 64},
		{AttnShape{4, 2, 64, 16, 8, KV8, 0, 0}, 7, 40}, // a partial simdgroup: blocks span simdgroups
		{AttnShape{2, 1, 256, 64, 3, KV8, 0, 0}, 2, 96},
		{AttnShape{2, 1, 256, 64, 3, KV8, 0, 0}, 5000, 1024}, // pos past the cache
		{AttnShape{3, 3, 32, 32, 2, KV8, 0, 0}, 1, 7},
		{AttnShape{4, 2, 64, 16, 100, KVBF16, 16, 9}, 37, 64}, // pages of 16, position 37 in the table's third
		{AttnShape{4, 2, 64, 16, 100, KV8, 32, 5}, 99, 64},    // the last position, 8-bit pages
	}
	var worstQ float64
	var worstK int
	for _, c := range cases {
		for _, order := range emu.Orders {
			t.Run(fmt.Sprintf("%d_%d_%d_%d_pos%d_tg%d_%v", c.s.Heads, c.s.KVHeads, c.s.HeadDim, c.s.RotaryDim, c.pos, c.threads, order), func(t *testing.T) {
				qe, ku := runAttnRope(t, lib, r, c.s, c.pos, c.threads, order)
				worstQ, worstK = max(worstQ, qe), max(worstK, ku)
			})
		}
	}
	t.Logf("edge shapes: max relative error of q %.2g, K within %d bf16 step(s) or 8-bit code(s), V exact", worstQ, worstK)
}

// TestAttnQKRopeKVProduction runs the model's shape (16 query heads, 2 kv heads, head dim 256,
// rotary 64) at a short and a long position.
func TestAttnQKRopeKVProduction(t *testing.T) {
	lib := library(t, emu.Options{}, "attn_rope.metal")
	r := rand.New(rand.NewPCG(43, 44))
	for _, bits := range []int{KVBF16, KV8} {
		s := AttnShape{16, 2, 256, 64, 4100, bits, 256, 20}
		for i, pos := range []int{3, 4099} {
			qe, ku := runAttnRope(t, lib, r, s, pos, AttnRopeThreads, emu.Orders[i+1])
			t.Logf("model shape, %d-bit cache, pos %d: max relative error of q %.2g, K within %d step(s), V exact", bits, pos, qe, ku)
		}
	}
}

func TestAttnQKRopeKVASan(t *testing.T) {
	lib := library(t, emu.Options{ASan: true}, "attn_rope.metal")
	r := rand.New(rand.NewPCG(45, 46))
	runAttnRope(t, lib, r, AttnShape{4, 2, 64, 16, 6, KVBF16, 0, 0}, 5, 40, emu.Shuffle) // the last cache row
	runAttnRope(t, lib, r, AttnShape{2, 1, 256, 64, 2, KVBF16, 0, 0}, 0, 256, emu.Reverse)
	runAttnRope(t, lib, r, AttnShape{4, 2, 64, 16, 6, KV8, 0, 0}, 5, 40, emu.Shuffle) // the last rows of codes and scales
	runAttnRope(t, lib, r, AttnShape{4, 2, 64, 16, 40, KV8, 16, 3}, 39, 64, emu.Forward)
}

// randTable maps a sequence's pages to distinct pool pages in a random order (the identity for a
// one-page cache).
func randTable(r *rand.Rand, s AttnShape) []uint32 {
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

// TestRopeInvFreq pins the table to engine/cpu's formula for the model (rotary 64, theta 1e7).
func TestRopeInvFreq(t *testing.T) {
	f := RopeInvFreq(64, 1e7)
	if len(f) != 32 || f[0] != 1 {
		t.Fatalf("RopeInvFreq(64, 1e7) = %v", f)
	}
	for i, v := range f {
		want := 1 / float32(math.Pow(1e7, float64(float32(2*i)/64)))
		if v != want {
			t.Errorf("inv_freq[%d] = %g, want %g", i, v, want)
		}
	}
}

// TestAttnQKRopeKVChunk: a prefill chunk's tokens in one dispatch (a row of threadgroups per
// token) rotate their queries and write K and V at their own positions, across a page boundary
// of a shuffled table, in both cache formats, as AttnQKRopeKV does token by token; the rest of
// the pool stays untouched.
func TestAttnQKRopeKVChunk(t *testing.T) {
	lib := library(t, emu.Options{}, "attn_rope.metal")
	r := rand.New(rand.NewPCG(47, 48))
	for _, bits := range []int{KVBF16, KV8} {
		for _, order := range emu.Orders {
			s := AttnShape{4, 2, 64, 16, 100, bits, 16, 9}
			const pos0, tokens = 13, 7 // positions 13..19: pages 0 and 1
			p := randAttnRopeParams(r, s, 1e7)
			qg := randFloats(r, tokens*s.Heads*2*s.HeadDim, 1)
			k, v := randFloats(r, tokens*s.KVHeads*s.HeadDim, 1), randFloats(r, tokens*s.KVHeads*s.HeadDim, 1)
			table := randTable(r, s)
			kWant, vWant := make([]byte, s.CacheBytes()), make([]byte, s.CacheBytes())
			for i := range kWant {
				kWant[i], vWant[i] = 0xFF, 0xFF
			}
			qWant := AttnQKRopeKVChunk(s, p, pos0, tokens, qg, k, v, kWant, vWant, table)
			bQ, bK, bV := emu.NewBuffer(4*len(qWant)), emu.NewBuffer(s.CacheBytes()), emu.NewBuffer(s.CacheBytes())
			for _, b := range []*emu.Buffer{bQ, bK, bV} {
				b.Fill(0xFF)
			}
			mustDispatch(t, lib, AttnQKRopeKVChunkCall(s, p.Eps, 64, tokens, AttnQKRopeKVBuffers[*emu.Buffer]{
				QG: emu.BufferOf(qg), K: emu.BufferOf(k), V: emu.BufferOf(v), QNorm: emu.BufferOf(p.QNorm), KNorm: emu.BufferOf(p.KNorm),
				InvFreq: emu.BufferOf(p.InvFreq), Step: emu.BufferOf([]uint32{pos0, 7}), QOut: bQ, KCache: bK, VCache: bV, Table: emu.BufferOf(table),
			}), order, 3)
			if e := relErr(bQ.Float32s(), qWant); !(e <= 2e-6) {
				t.Fatalf("%d-bit %v: q relative error %.2g", bits, order, e)
			}
			for i, b := range vWant {
				if bV.Bytes()[i] != b {
					t.Fatalf("%d-bit %v: v byte %d = %#x, want %#x", bits, order, i, bV.Bytes()[i], b)
				}
			}
			for tk := range tokens {
				if st := kRowSteps(t, s, s.Row(table, pos0+tk), bK.Bytes(), kWant); st > 1 {
					t.Fatalf("%d-bit %v: token %d K off by %d steps", bits, order, tk, st)
				}
			}
		}
	}
}
