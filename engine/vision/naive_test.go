package vision

import (
	"math"

	"github.com/lilyformac/lily/engine/config"
	"github.com/lilyformac/lily/engine/model"
)

// This file is an independent float64 statement of the tower's forward pass, written from the
// reference's description with plain loops and a full n×n attention matrix, sharing no code with
// the tower. naiveOpts switch single details off to prove the comparison is sensitive to them.
type naiveOpts struct {
	noRotary, swapAxes, causal, raster, mergerTanh, noPositions bool
}

type mat64 [][]float64

func f64(d model.Dense) []float64 {
	out := make([]float64, len(d.F32))
	for i, x := range d.F32 {
		out[i] = float64(x)
	}
	return out
}

func naiveLinear(x mat64, l model.Linear) mat64 {
	W, b := f64(l.W), f64(l.B)
	in := l.W.Cols
	y := make(mat64, len(x))
	for i := range x {
		y[i] = make([]float64, l.W.Rows)
		for o := range y[i] {
			s := b[o]
			for k := range in {
				s += x[i][k] * W[o*in+k]
			}
			y[i][o] = s
		}
	}
	return y
}

func naiveLayerNorm(x mat64, n model.LayerNorm, eps float64) mat64 {
	g, b := f64(n.W), f64(n.B)
	y := make(mat64, len(x))
	for i, row := range x {
		mean, vr := 0.0, 0.0
		for _, v := range row {
			mean += v / float64(len(row))
		}
		for _, v := range row {
			vr += (v - mean) * (v - mean) / float64(len(row))
		}
		y[i] = make([]float64, len(row))
		for d, v := range row {
			y[i][d] = (v-mean)/math.Sqrt(vr+eps)*g[d] + b[d]
		}
	}
	return y
}

// naiveCoords lists each patch's (row, col) in the order of the pixel rows: merge blocks
// row-major, patches row-major inside a block (or plain raster order, a deliberate mistake).
func naiveCoords(gh, gw, m int, raster bool) [][2]int {
	var out [][2]int
	if raster {
		for r := range gh {
			for c := range gw {
				out = append(out, [2]int{r, c})
			}
		}
		return out
	}
	for bh := 0; bh < gh; bh += m {
		for bw := 0; bw < gw; bw += m {
			for i := range m {
				for j := range m {
					out = append(out, [2]int{bh + i, bw + j})
				}
			}
		}
	}
	return out
}

// naivePosition is F.interpolate(bilinear, align_corners=True) of the side×side table at one
// patch, in float64.
func naivePosition(table []float64, side, dim, r, c, gh, gw int) []float64 {
	sr := float64(r) * float64(side-1) / float64(gh-1)
	sc := float64(c) * float64(side-1) / float64(gw-1)
	r0, c0 := int(math.Floor(sr)), int(math.Floor(sc))
	r1, c1 := min(r0+1, side-1), min(c0+1, side-1)
	fr, fc := sr-float64(r0), sc-float64(c0)
	out := make([]float64, dim)
	for d := range out {
		at := func(rr, cc int) float64 { return table[(rr*side+cc)*dim+d] }
		out[d] = (1-fr)*(1-fc)*at(r0, c0) + (1-fr)*fc*at(r0, c1) + fr*(1-fc)*at(r1, c0) + fr*fc*at(r1, c1)
	}
	return out
}

// naiveRotate applies the 2-D rotary to one head vector x at patch (r, c): frequency j of the
// first quarter turns with the row, of the second quarter with the column, both repeated in the
// second half; x' = x·cos + rotate_half(x)·sin.
func naiveRotate(x []float64, r, c int, theta float64) []float64 {
	hd := len(x)
	half, quarter := hd/2, hd/4
	y := make([]float64, hd)
	for d := range hd {
		f := d % half
		pos := r
		if f >= quarter {
			f, pos = f-quarter, c
		}
		angle := float64(pos) * math.Pow(theta, -float64(2*f)/float64(half))
		var partner float64
		if d < half {
			partner = -x[d+half]
		} else {
			partner = x[d-half]
		}
		y[d] = x[d]*math.Cos(angle) + partner*math.Sin(angle)
	}
	return y
}

// naiveAttention is softmax(q·kᵀ/√hd)·v per head with the whole score matrix at once.
func naiveAttention(qkv mat64, coords [][2]int, c *config.Vision, o naiveOpts) mat64 {
	n, D, hd := len(qkv), c.Hidden, c.HeadDim()
	out := make(mat64, n)
	for i := range out {
		out[i] = make([]float64, D)
	}
	for h := range c.Heads {
		q, k := make(mat64, n), make(mat64, n)
		for i := range n {
			q[i], k[i] = qkv[i][h*hd:(h+1)*hd], qkv[i][D+h*hd:D+(h+1)*hd]
			if !o.noRotary {
				r, cc := coords[i][0], coords[i][1]
				if o.swapAxes {
					r, cc = cc, r
				}
				q[i], k[i] = naiveRotate(q[i], r, cc, c.RopeTheta), naiveRotate(k[i], r, cc, c.RopeTheta)
			}
		}
		scores := make(mat64, n)
		for i := range n {
			scores[i] = make([]float64, n)
			for j := range n {
				for d := range hd {
					scores[i][j] += q[i][d] * k[j][d] / math.Sqrt(float64(hd))
				}
				if o.causal && j > i {
					scores[i][j] = math.Inf(-1)
				}
			}
		}
		naiveSoftmaxTimesV(scores, qkv, 2*D+h*hd, hd, out, h*hd)
	}
	return out
}

func naiveSoftmaxTimesV(scores, qkv mat64, vcol, hd int, out mat64, ocol int) {
	for i, row := range scores {
		m := math.Inf(-1)
		for _, s := range row {
			m = math.Max(m, s)
		}
		sum := 0.0
		for _, s := range row {
			sum += math.Exp(s - m)
		}
		for j, s := range row {
			p := math.Exp(s-m) / sum
			for d := range hd {
				out[i][ocol+d] += p * qkv[j][vcol+d]
			}
		}
	}
}

func naiveGELU(x float64, tanh bool) float64 {
	if tanh {
		return 0.5 * x * (1 + math.Tanh(math.Sqrt(2/math.Pi)*(x+0.044715*x*x*x)))
	}
	return 0.5 * x * (1 + math.Erf(x/math.Sqrt2))
}

func naiveApply(x mat64, f func(float64) float64) mat64 {
	for _, row := range x {
		for i := range row {
			row[i] = f(row[i])
		}
	}
	return x
}

func naiveAdd(h, d mat64) {
	for i := range h {
		for j := range h[i] {
			h[i][j] += d[i][j]
		}
	}
}

// naiveEncode is the whole tower: patches, positions, blocks, merger.
func naiveEncode(c *config.Vision, w *model.Vision, px *Pixels, o naiveOpts) mat64 {
	x := make(mat64, len(px.Rows))
	for i, r := range px.Rows {
		x[i] = f64(model.Dense{F32: r})
	}
	h := naiveLinear(x, w.Patch)
	coords := naiveCoords(px.GridH, px.GridW, c.Merge, o.raster)
	table := f64(w.PosEmbed)
	for i, rc := range coords {
		if !o.noPositions {
			naiveAdd(mat64{h[i]}, mat64{naivePosition(table, c.Side, c.Hidden, rc[0], rc[1], px.GridH, px.GridW)})
		}
	}
	eps := float64(c.Eps)
	for _, b := range w.Blocks {
		a := naiveAttention(naiveLinear(naiveLayerNorm(h, b.Norm1, eps), b.QKV), coords, c, o)
		naiveAdd(h, naiveLinear(a, b.Proj))
		f := naiveApply(naiveLinear(naiveLayerNorm(h, b.Norm2, eps), b.FC1), func(v float64) float64 { return naiveGELU(v, true) })
		naiveAdd(h, naiveLinear(f, b.FC2))
	}
	y := naiveLayerNorm(h, w.MergerNorm, eps)
	group := c.Merge * c.Merge
	joined := make(mat64, len(y)/group)
	for i := range joined {
		for g := range group {
			joined[i] = append(joined[i], y[i*group+g]...)
		}
	}
	f := naiveApply(naiveLinear(joined, w.MergerFC1), func(v float64) float64 { return naiveGELU(v, o.mergerTanh) })
	return naiveLinear(f, w.MergerFC2)
}
