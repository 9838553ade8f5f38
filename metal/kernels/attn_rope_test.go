package kernels

import (
	"math"
	"testing"
)

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

// TestAttnQKRopeKVMultiAxes: with three distinct positions, each rotary frequency's pair of dims
// is what the one-position reference gives at the position of that frequency's axis; the dims
// past the rotary ones pass through.
func TestAttnQKRopeKVMultiAxes(t *testing.T) {
	s := AttnShape{Heads: 2, KVHeads: 1, HeadDim: 32, RotaryDim: 16, MaxCtx: 8}
	p := AttnRopeParams{QNorm: make([]float32, 32), KNorm: make([]float32, 32), InvFreq: RopeInvFreq(16, 1e7), Eps: 1e-6}
	qg, kv := make([]float32, 2*2*32), make([]float32, 32)
	for i := range qg {
		qg[i] = float32(math.Sin(float64(i)))
	}
	for i := range kv {
		kv[i], p.QNorm[i], p.KNorm[i] = float32(math.Cos(float64(i))), 1, 1
	}
	axes := MRoPEAxes(8, func(i int) int { return i % 3 })
	pos := [3]int{3000, 41, 977}
	cache := func() []byte { return make([]byte, s.CacheBytes()) }
	got := AttnQKRopeKVMulti(s, p, 5, pos, axes, qg, kv, kv, cache(), cache(), s.IdentityTable())
	for a, at := range pos {
		one := AttnQKRopeKV(s, p, at, qg, kv, kv, cache(), cache(), s.IdentityTable())
		for h := range s.Heads {
			for i, ax := range axes {
				for _, d := range []int{h*32 + i, h*32 + i + 8} {
					if int(ax) == a && got[d] != one[d] {
						t.Errorf("head %d dim %d (axis %d): %g, want %g", h, d-h*32, a, got[d], one[d])
					}
				}
			}
			for d := h*32 + 16; d < (h+1)*32; d++ {
				if got[d] != one[d] {
					t.Errorf("head %d dim %d past the rotary dims: %g, want %g", h, d-h*32, got[d], one[d])
				}
			}
		}
	}
}
