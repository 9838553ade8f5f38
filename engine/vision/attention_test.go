package vision

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestAttentionStreams runs the attention on an image of more patches than one key tile at
// several query block sizes: every size gives bit-identical results (blocking only reorders
// memory access), and they agree with the float64 reference's full n×n attention.
func TestAttentionStreams(t *testing.T) {
	c := tinyVision()
	const gh, gw = 12, 24 // 288 patches: two key tiles, the second partial
	n, D := gh*gw, c.Hidden
	rng := rand.New(rand.NewPCG(5, 6))
	qkv, q64 := matrix(n, 3*D), make(mat64, n)
	for i := range qkv {
		q64[i] = make([]float64, 3*D)
		for j := range qkv[i] {
			qkv[i][j] = float32(1.5 * rng.NormFloat64())
			q64[i][j] = float64(qkv[i][j])
		}
	}
	rt := newRotary(gh, gw, c.Merge, c.HeadDim(), c.RopeTheta)
	whole := attention(qkv, rt, c.Heads, n)
	want := naiveAttention(q64, naiveCoords(gh, gw, c.Merge, false), c, naiveOpts{})
	diff, scale := maxDiff(whole, want)
	if diff > 1e-5*scale {
		t.Fatalf("unblocked attention is %g from the float64 reference (scale %g)", diff, scale)
	}
	for _, block := range []int{1, 5, 64, n - 1} {
		got := attention(qkv, rt, c.Heads, block)
		for i := range got {
			for j := range got[i] {
				if math.Float32bits(got[i][j]) != math.Float32bits(whole[i][j]) {
					t.Fatalf("block %d: out[%d][%d] = %g, unblocked %g", block, i, j, got[i][j], whole[i][j])
				}
			}
		}
	}
}
