// Package quant implements MLX affine quantization (4- and 8-bit, group 64): packing, dequantization and fast matrix-vector products.
//
// A matrix W[Rows, Cols] is stored row-major as uint32 words, Cols*Bits/32
// words per row; element (n, k) sits in word k/(32/Bits) at bit offset
// Bits*(k%(32/Bits)), least significant first. Each group of 64 consecutive
// elements of a row has a bfloat16 scale and bias: w = scale*q + bias.
//
// Products use the factored form
//
//	row·x = Σ_g s_g·Σ_{k∈g} q_k·x_k + Σ_g b_g·Σ_{k∈g} x_k
//
// with the group sums of x computed once per Input. On amd64 the 4-bit
// kernel is AVX2+FMA in float32; AVX-512 VNNI is opt-in with
// LILY_Q4_KERNEL=vnni (x rounded, per group of 64, to signed 23-bit fixed
// point: an error of at most 2^-22 of the group's largest |x| per element);
// 8-bit uses AVX2+FMA.
// Elsewhere the kernels are portable Go. Sums are float32 in an order that
// depends on the kernel, so results agree with a float64 reference to within
// about 1e-6 of Σ|w·x|, not bit for bit across machines.
package quant

import (
	"fmt"
	"math"
)

// GroupSize is the number of consecutive elements of a row sharing one scale and bias.
const GroupSize = 64

// BF16ToF32 widens bfloat16 bits to float32 (exact).
func BF16ToF32(u uint16) float32 { return math.Float32frombits(uint32(u) << 16) }

// F32ToBF16 rounds f to bfloat16 bits, to nearest even; NaN stays NaN.
func F32ToBF16(f float32) uint16 {
	b := math.Float32bits(f)
	if f != f {
		return uint16(b>>16) | 0x40 // keep sign, force a quiet NaN so the mantissa stays non-zero
	}
	b += 0x7fff + (b>>16)&1
	return uint16(b >> 16)
}

// F32sToBF16 is each of x rounded to bfloat16 bits (F32ToBF16).
func F32sToBF16(x []float32) []uint16 {
	out := make([]uint16, len(x))
	for i, v := range x {
		out[i] = F32ToBF16(v)
	}
	return out
}

// BF16sToF32 is each of u widened to float32 (BF16ToF32).
func BF16sToF32(u []uint16) []float32 {
	out := make([]float32, len(u))
	for i, v := range u {
		out[i] = BF16ToF32(v)
	}
	return out
}

// F32ToF16 rounds f to IEEE binary16 bits, to nearest even (overflow to Inf, NaN stays NaN).
func F32ToF16(f float32) uint16 {
	b := math.Float32bits(f)
	sign := uint16(b>>16) & 0x8000
	exp := int(b>>23&0xff) - 127 + 15
	man := b & 0x7fffff
	switch {
	case b&0x7fffffff > 0x7f800000: // NaN
		return sign | 0x7e00
	case exp >= 31: // overflow or Inf
		return sign | 0x7c00
	case exp <= 0: // subnormal or zero
		if exp < -10 {
			return sign
		}
		man |= 0x800000
		shift := uint(14 - exp)
		h := man >> shift
		rem := man & (1<<shift - 1)
		half := uint32(1) << (shift - 1)
		if rem > half || rem == half && h&1 == 1 {
			h++
		}
		return sign | uint16(h)
	}
	h := uint32(exp)<<10 | man>>13
	rem := man & 0x1fff
	if rem > 0x1000 || rem == 0x1000 && h&1 == 1 {
		h++ // may carry into the exponent, and to Inf: both correct
	}
	return sign | uint16(h)
}

// F16ToF32 widens IEEE binary16 bits to float32 (exact).
func F16ToF32(h uint16) float32 {
	sign := uint32(h&0x8000) << 16
	exp := uint32(h >> 10 & 0x1f)
	man := uint32(h & 0x3ff)
	switch {
	case exp == 0x1f: // Inf or NaN
		return math.Float32frombits(sign | 0x7f800000 | man<<13)
	case exp == 0 && man == 0:
		return math.Float32frombits(sign)
	case exp == 0: // subnormal: man · 2^-24
		f := float32(man) * (1.0 / (1 << 24))
		if sign != 0 {
			f = -f
		}
		return f
	}
	return math.Float32frombits(sign | (exp+127-15)<<23 | man<<13)
}

// Matrix is an MLX affine-quantized matrix. Rows are output features, Cols
// input features (a multiple of GroupSize).
type Matrix struct {
	Rows, Cols int      // logical shape: Cols = input features (K)
	Bits       int      // 4 or 8
	Words      []uint32 // packed q, len Rows*Cols*Bits/32
	Scales     []uint16 // bf16 bits, len Rows*Cols/GroupSize
	Biases     []uint16 // bf16 bits, len Rows*Cols/GroupSize
}

// Validate reports whether the shape, bit width and slice lengths agree.
func (m *Matrix) Validate() error {
	switch {
	case m.Bits != 4 && m.Bits != 8:
		return fmt.Errorf("quant: bits = %d, want 4 or 8", m.Bits)
	case m.Rows < 0:
		return fmt.Errorf("quant: rows = %d, want >= 0", m.Rows)
	case m.Cols <= 0 || m.Cols%GroupSize != 0:
		return fmt.Errorf("quant: cols = %d, want a positive multiple of %d", m.Cols, GroupSize)
	}
	if n := m.Rows * m.wordsPerRow(); len(m.Words) != n {
		return fmt.Errorf("quant: %dx%d %d-bit matrix has %d words, want %d", m.Rows, m.Cols, m.Bits, len(m.Words), n)
	}
	n := m.Rows * m.groups()
	if len(m.Scales) != n {
		return fmt.Errorf("quant: %dx%d matrix has %d scales, want %d", m.Rows, m.Cols, len(m.Scales), n)
	}
	if len(m.Biases) != n {
		return fmt.Errorf("quant: %dx%d matrix has %d biases, want %d", m.Rows, m.Cols, len(m.Biases), n)
	}
	return nil
}

func (m *Matrix) wordsPerRow() int { return m.Cols * m.Bits / 32 }
func (m *Matrix) groups() int      { return m.Cols / GroupSize }

// RowRange returns a view of rows [start, start+n) sharing m's storage, e.g.
// one expert of a stacked [E*N, K] expert tensor.
func (m *Matrix) RowRange(start, n int) *Matrix {
	if start < 0 || n < 0 || start+n > m.Rows {
		panic(fmt.Sprintf("quant: RowRange(%d, %d) out of range for %d rows", start, n, m.Rows))
	}
	w, g := m.wordsPerRow(), m.groups()
	return &Matrix{
		Rows: n, Cols: m.Cols, Bits: m.Bits,
		Words:  m.Words[start*w : (start+n)*w : (start+n)*w],
		Scales: m.Scales[start*g : (start+n)*g : (start+n)*g],
		Biases: m.Biases[start*g : (start+n)*g : (start+n)*g],
	}
}

// DequantRow writes the Cols float32 values of row r into dst.
func (m *Matrix) DequantRow(r int, dst []float32) {
	w, g := m.wordsPerRow(), m.groups()
	words := m.Words[r*w : (r+1)*w]
	scales, biases := m.Scales[r*g:(r+1)*g], m.Biases[r*g:(r+1)*g]
	dst = dst[:m.Cols]
	per := 32 / m.Bits
	mask := uint32(1)<<m.Bits - 1
	for k := range dst {
		q := words[k/per] >> (m.Bits * (k % per)) & mask
		dst[k] = BF16ToF32(scales[k/GroupSize])*float32(q) + BF16ToF32(biases[k/GroupSize])
	}
}

// Quantize packs the row-major rows×cols float32 matrix w with MLX's affine
// quantizer, bit for bit (scales and biases rounded to bf16 as MLX does for
// bf16 weights).
func Quantize(w []float32, rows, cols, bits int) *Matrix {
	m := &Matrix{Rows: rows, Cols: cols, Bits: bits}
	if bits != 4 && bits != 8 || rows < 0 || cols <= 0 || cols%GroupSize != 0 || len(w) != rows*cols {
		panic(fmt.Sprintf("quant: Quantize(len %d, %d, %d, %d): bad shape or bits", len(w), rows, cols, bits))
	}
	ng := rows * cols / GroupSize
	m.Words = make([]uint32, rows*m.wordsPerRow())
	m.Scales = make([]uint16, ng)
	m.Biases = make([]uint16, ng)
	nBins := float32(int(1)<<bits - 1)
	per := 32 / bits
	for g := 0; g < ng; g++ {
		x := w[g*GroupSize : (g+1)*GroupSize]
		lo, hi := x[0], x[0]
		for _, v := range x {
			lo, hi = min(lo, v), max(hi, v)
		}
		scale := max((hi-lo)/nBins, 1e-7)
		edge := lo
		if !(abs32(lo) > abs32(hi)) {
			// The max dominates: MLX negates the scale so q = 0 maps to the max exactly.
			scale, edge = -scale, hi
		}
		q0 := roundEven(edge / scale)
		var bias float32
		if q0 != 0 {
			scale, bias = edge/q0, edge
		}
		m.Scales[g], m.Biases[g] = F32ToBF16(scale), F32ToBF16(bias)
		s, b := BF16ToF32(m.Scales[g]), BF16ToF32(m.Biases[g])
		for i, v := range x {
			q := min(max(roundEven((v-b)/s), 0), nBins)
			k := g*GroupSize + i // flat index; rows are whole groups, so words are contiguous too
			m.Words[k/per] |= uint32(q) << (bits * (k % per))
		}
	}
	return m
}

func abs32(f float32) float32     { return math.Float32frombits(math.Float32bits(f) &^ (1 << 31)) }
func roundEven(f float32) float32 { return float32(math.RoundToEven(float64(f))) }
