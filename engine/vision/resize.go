package vision

import (
	"fmt"
	"math"
)

// RGB8 is an 8-bit RGB image: rows top to bottom, each pixel R, G, B interleaved.
type RGB8 struct {
	W, H int
	Pix  []uint8 // 3·W·H bytes
}

// NewRGB8 allocates a black w×h image.
func NewRGB8(w, h int) *RGB8 { return &RGB8{W: w, H: h, Pix: make([]uint8, 3*w*h)} }

// maxAspect is the reference's largest accepted ratio of the long side to the short one.
const maxAspect = 200

// SmartResize picks the size an h×w image is resized to: each side a multiple of factor, the
// area inside [minPixels, maxPixels], the aspect ratio nearly kept. It follows the reference's
// float64 arithmetic step for step (Python's round is half to even), so the token count of an
// image is the reference's.
//
// One departure: the reference refuses a side shorter than factor; Lily never refuses a small
// image, so after the rounding step each side is raised to at least factor (the image is then
// upscaled by the resize). For any side ≥ factor this changes nothing. An aspect ratio over 200
// is still an error: such an image would become a sliver of a few patches.
func SmartResize(h, w, factor, minPixels, maxPixels int) (int, int, error) {
	if h <= 0 || w <= 0 || factor <= 0 {
		return 0, 0, fmt.Errorf("vision: cannot size a %d×%d image to multiples of %d", w, h, factor)
	}
	if float64(max(h, w))/float64(min(h, w)) > maxAspect {
		return 0, 0, fmt.Errorf("vision: a %d×%d image has an aspect ratio over %d", w, h, maxAspect)
	}
	f := float64(factor)
	fh, fw := float64(h), float64(w)
	hb := max(factor, int(math.RoundToEven(fh/f))*factor)
	wb := max(factor, int(math.RoundToEven(fw/f))*factor)
	area := float64(h) * float64(w) // exact: h·w is far below 2^53
	switch {
	case hb*wb > maxPixels:
		beta := math.Sqrt(area / float64(maxPixels))
		hb = max(factor, int(math.Floor(fh/beta/f))*factor)
		wb = max(factor, int(math.Floor(fw/beta/f))*factor)
	case hb*wb < minPixels:
		beta := math.Sqrt(float64(minPixels) / area)
		hb = int(math.Ceil(fh*beta/f)) * factor
		wb = int(math.Ceil(fw*beta/f)) * factor
	}
	return hb, wb, nil
}

// PIL's fixed point for 8-bit resampling: 22 fraction bits leave room for 8 bits of value and
// the overshoot of the bicubic's negative lobes inside an int32.
const precisionBits = 22

// bicubic is Keys' cubic convolution kernel with a = −0.5, PIL's BICUBIC filter (support 2).
func bicubic(x float64) float64 {
	const a = -0.5
	if x < 0 {
		x = -x
	}
	if x < 1 {
		return ((a+2)*x-(a+3))*x*x + 1
	}
	if x < 2 {
		return (((x-5)*x+8)*x - 4) * a
	}
	return 0
}

// kernel is one axis's resampling plan: output i reads inputs first[i] … first[i]+count[i]−1
// with the fixed-point weights k[i·ksize …].
type kernel struct {
	ksize        int
	first, count []int
	k            []int32
}

// precompute builds the weights the way PIL's precompute_coeffs does, so that outputs match it
// bit for bit: the filter widened by the downscale ratio (antialias), the window rounded with C's
// truncating casts, weights normalised by their sum, then rounded to fixed point away from zero.
func precompute(inSize, outSize int) kernel {
	scale := float64(inSize) / float64(outSize)
	filterscale := max(scale, 1)
	support := 2 * filterscale
	ksize := int(math.Ceil(support))*2 + 1
	kn := kernel{ksize: ksize, first: make([]int, outSize), count: make([]int, outSize), k: make([]int32, outSize*ksize)}
	w := make([]float64, ksize)
	ss := 1 / filterscale
	for i := 0; i < outSize; i++ {
		center := (float64(i) + 0.5) * scale
		xmin := max(int(center-support+0.5), 0) // Go's conversion truncates toward zero, as C's cast
		xmax := min(int(center+support+0.5), inSize)
		n := xmax - xmin
		sum := 0.0
		for x := 0; x < n; x++ {
			w[x] = bicubic((float64(x+xmin) - center + 0.5) * ss)
			sum += w[x]
		}
		for x := 0; x < n; x++ {
			if sum != 0 {
				w[x] /= sum
			}
			kn.k[i*ksize+x] = toFixed(w[x])
		}
		kn.first[i], kn.count[i] = xmin, n
	}
	return kn
}

func toFixed(k float64) int32 {
	if k < 0 {
		return int32(-0.5 + k*(1<<precisionBits))
	}
	return int32(0.5 + k*(1<<precisionBits))
}

// clip8 takes an accumulator back to a byte, clamping the lobes' overshoot.
func clip8(acc int32) uint8 {
	v := acc >> precisionBits
	if v < 0 {
		return 0
	}
	if v > 255 {
		return 255
	}
	return uint8(v)
}

// Resize scales src to w×h with PIL's antialiased bicubic (Image.resize with BICUBIC): a
// horizontal pass over only the rows the vertical pass reads, rounded to bytes, then the vertical
// pass. A side that keeps its length skips its pass, and an image already w×h is returned as it
// is, so such an image reaches the tower unchanged.
func Resize(src *RGB8, w, h int) *RGB8 {
	if src.W == w && src.H == h {
		return src
	}
	vert := precompute(src.H, h)
	img := src
	if w != src.W {
		firstRow := vert.first[0]
		lastRow := vert.first[h-1] + vert.count[h-1]
		img = horizontal(src, precompute(src.W, w), firstRow, lastRow)
		for i := range vert.first {
			vert.first[i] -= firstRow
		}
	}
	if h != src.H {
		img = vertical(img, vert)
	}
	return img
}

// horizontal resamples rows [y0, y1) of src across its width.
func horizontal(src *RGB8, kn kernel, y0, y1 int) *RGB8 {
	w := len(kn.first)
	out := NewRGB8(w, y1-y0)
	for y := y0; y < y1; y++ {
		in := src.Pix[y*src.W*3 : (y+1)*src.W*3]
		row := out.Pix[(y-y0)*w*3 : (y-y0+1)*w*3]
		for x := 0; x < w; x++ {
			k := kn.k[x*kn.ksize : x*kn.ksize+kn.count[x]]
			px := in[kn.first[x]*3:]
			r, g, b := int32(1<<(precisionBits-1)), int32(1<<(precisionBits-1)), int32(1<<(precisionBits-1))
			for i, c := range k {
				r += int32(px[3*i]) * c
				g += int32(px[3*i+1]) * c
				b += int32(px[3*i+2]) * c
			}
			row[3*x], row[3*x+1], row[3*x+2] = clip8(r), clip8(g), clip8(b)
		}
	}
	return out
}

// vertical resamples src down its height; kn's windows index src's rows.
func vertical(src *RGB8, kn kernel) *RGB8 {
	h := len(kn.first)
	stride := src.W * 3
	out := NewRGB8(src.W, h)
	acc := make([]int32, stride)
	for y := 0; y < h; y++ {
		for i := range acc {
			acc[i] = 1 << (precisionBits - 1)
		}
		k := kn.k[y*kn.ksize : y*kn.ksize+kn.count[y]]
		for j, c := range k {
			in := src.Pix[(kn.first[y]+j)*stride : (kn.first[y]+j+1)*stride]
			for i, v := range in {
				acc[i] += int32(v) * c
			}
		}
		row := out.Pix[y*stride : (y+1)*stride]
		for i, a := range acc {
			row[i] = clip8(a)
		}
	}
	return out
}
