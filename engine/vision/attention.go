package vision

import "math"

// rotary is the tower's 2-D rotary embedding for one image: per patch, hd cosines and sines.
type rotary struct {
	hd       int
	cos, sin [][]float32
}

// newRotary builds the angles as the reference does in float32: a quarter of the head's width
// of inverse frequencies inv_j = 1/θ^(2j/(hd/2)) (the exponent a float32 quotient, the power
// rounded to float32, then a float32 division), angle = position·inv_j as a float32 product, the
// row angles then the column angles, that half repeated to fill the head.
func newRotary(gh, gw, merge, hd int, theta float64) *rotary {
	quarter, half := hd/4, hd/2
	inv := make([]float32, quarter)
	for j := range inv {
		e := float32(2*j) / float32(half)
		inv[j] = 1 / float32(math.Pow(theta, float64(e)))
	}
	n := gh * gw
	rt := &rotary{hd: hd, cos: matrix(n, hd), sin: matrix(n, hd)}
	for p := range n {
		r, c := patchAt(p, gw, merge)
		for j, f := range inv {
			for k, pos := range []int{r, c} {
				a := float64(float32(pos) * f)
				cs, sn := float32(math.Cos(a)), float32(math.Sin(a))
				for _, d := range []int{k*quarter + j, half + k*quarter + j} {
					rt.cos[p][d], rt.sin[p][d] = cs, sn
				}
			}
		}
	}
	return rt
}

// rotate writes x rotated for patch p into dst: x·cos + rotate_half(x)·sin, where rotate_half
// swaps the head's halves and negates the new first half.
func (rt *rotary) rotate(dst, x []float32, p int) {
	half := rt.hd / 2
	cs, sn := rt.cos[p], rt.sin[p]
	for d := range rt.hd {
		rot := x[(d+half)%rt.hd]
		if d < half {
			rot = -rot
		}
		dst[d] = float32(x[d]*cs[d]) + float32(rot*sn[d])
	}
}

// queryBlock is how many queries share one sweep over the keys: the scratch is queryBlock
// score rows of n values, never an n×n matrix (a large image has ~16k patches).
const queryBlock = 64

// keyTile is how many keys are scored for a whole query block before moving on, so those keys
// stay in cache while every query of the block reads them.
const keyTile = 256

// attention is the tower's self-attention over one image, before the output projection: qkv
// rows hold q | k | v, each head-major; q and k are rotated; every patch attends to every patch
// (not causal). It returns n rows of heads·hd values, head-major.
func attention(qkv [][]float32, rt *rotary, heads, block int) [][]float32 {
	n, hd := len(qkv), rt.hd
	D := heads * hd
	q, k, v := splitHeads(qkv, rt, heads, 0, true), splitHeads(qkv, rt, heads, D, true), splitHeads(qkv, rt, heads, 2*D, false)
	out := matrix(n, D)
	blocks := (n + block - 1) / block
	parallelRange(heads*blocks, func(lo, hi int) {
		s := &attnScratch{scores: make([]float32, block*n), acc: make([]float32, block*hd)}
		for t := lo; t < hi; t++ {
			h, i0 := t/blocks, (t%blocks)*block
			s.run(q[h], k[h], v[h], hd, i0, min(i0+block, n), out, h*hd)
		}
	})
	return out
}

// splitHeads copies one of q, k, v out of the qkv rows into per-head arrays [head][patch·hd],
// rotating it when asked, so a head's keys are contiguous for the score sweeps.
func splitHeads(qkv [][]float32, rt *rotary, heads, col int, rotate bool) [][]float32 {
	n, hd := len(qkv), rt.hd
	out := make([][]float32, heads)
	for h := range out {
		out[h] = make([]float32, n*hd)
		for p := range n {
			src, dst := qkv[p][col+h*hd:col+(h+1)*hd], out[h][p*hd:(p+1)*hd]
			if rotate {
				rt.rotate(dst, src, p)
			} else {
				copy(dst, src)
			}
		}
	}
	return out
}

// attnScratch is one worker's buffers: a query block's score rows and output accumulators.
type attnScratch struct{ scores, acc []float32 }

// run computes the outputs of queries [i0, i1) of one head. Each query row is an exact two-pass
// softmax: all its scores, their maximum, exp(s − max) summed in float64, the probabilities
// rounded to float32, then Σ p_j·v_j in float32 over keys in index order. Every query's
// arithmetic is the same whatever the block and tile sizes: blocking only reorders memory access.
func (s *attnScratch) run(q, k, v []float32, hd, i0, i1 int, out [][]float32, col int) {
	n := len(k) / hd
	scale := float32(1 / math.Sqrt(float64(hd)))
	nq := i1 - i0
	for j0 := 0; j0 < n; j0 += keyTile {
		j1 := min(j0+keyTile, n)
		for i := range nq {
			qi, row := q[(i0+i)*hd:(i0+i+1)*hd], s.scores[i*n:(i+1)*n]
			for j := j0; j < j1; j++ {
				row[j] = dot(qi, k[j*hd:(j+1)*hd]) * scale
			}
		}
	}
	for i := range nq {
		softmax(s.scores[i*n : (i+1)*n])
	}
	clear(s.acc[:nq*hd])
	for j0 := 0; j0 < n; j0 += keyTile {
		j1 := min(j0+keyTile, n)
		for i := range nq {
			acc, row := s.acc[i*hd:(i+1)*hd], s.scores[i*n:(i+1)*n]
			for j := j0; j < j1; j++ {
				p, vj := row[j], v[j*hd:(j+1)*hd]
				for d := range acc {
					acc[d] += p * vj[d]
				}
			}
		}
	}
	for i := range nq {
		copy(out[i0+i][col:col+hd], s.acc[i*hd:(i+1)*hd])
	}
}

// softmax turns one row of scores into probabilities in place.
func softmax(row []float32) {
	m := float32(math.Inf(-1))
	for _, x := range row {
		m = max(m, x)
	}
	var sum float64
	for j, x := range row {
		e := float32(math.Exp(float64(x - m)))
		row[j] = e
		sum += float64(e)
	}
	inv := float32(1 / sum)
	for j := range row {
		row[j] *= inv
	}
}
