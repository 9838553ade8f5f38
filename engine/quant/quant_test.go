package quant

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
)

// paths runs f once for each kernel this machine has (Inputs prepared
// inside f use it).
func paths(t *testing.T, f func(t *testing.T)) {
	defer func(k kernel) { q4Kernel = k }(q4Kernel)
	for _, k := range kernels() {
		q4Kernel = k
		t.Run(kernelName(k), f)
	}
}

// randMatrix fills packed words with random bits and draws scales of both
// signs and biases, as bf16.
func randMatrix(rng *rand.Rand, rows, cols, bits int) *Matrix {
	m := &Matrix{Rows: rows, Cols: cols, Bits: bits,
		Words:  make([]uint32, rows*cols*bits/32),
		Scales: make([]uint16, rows*cols/GroupSize),
		Biases: make([]uint16, rows*cols/GroupSize),
	}
	for i := range m.Words {
		m.Words[i] = rng.Uint32()
	}
	for i := range m.Scales {
		m.Scales[i] = F32ToBF16(float32(rng.NormFloat64() * 0.02))
		m.Biases[i] = F32ToBF16(float32(rng.NormFloat64() * 0.1))
	}
	return m
}

func randVec(rng *rand.Rand, n int) []float32 {
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(rng.NormFloat64())
	}
	return x
}

// refElem unpacks element (r, k) independently of the package code.
func refElem(m *Matrix, r, k int) float64 {
	bitPos := (r*m.Cols + k) * m.Bits
	q := m.Words[bitPos/32] >> (bitPos % 32) & (1<<m.Bits - 1)
	g := (r*m.Cols + k) / GroupSize
	return float64(BF16ToF32(m.Scales[g]))*float64(q) + float64(BF16ToF32(m.Biases[g]))
}

// refDot is a float64 dequantize-then-dot; it also returns Σ|w·x| for the tolerance.
func refDot(m *Matrix, r int, x []float32) (dot, mag float64) {
	for k, v := range x {
		p := refElem(m, r, k) * float64(v)
		dot += p
		mag += math.Abs(p)
	}
	return dot, mag
}

func checkDot(t *testing.T, what string, got float32, m *Matrix, r int, x []float32) {
	t.Helper()
	want, mag := refDot(m, r, x)
	if d := math.Abs(float64(got) - want); d > 1e-5*mag+1e-30 {
		t.Fatalf("%s row %d: got %g, want %g (|diff| %.3g > 1e-5·%.3g)", what, r, got, want, d, mag)
	}
}

func TestProducts(t *testing.T) {
	paths(t, func(t *testing.T) {
		rng := rand.New(rand.NewPCG(1, 2))
		for _, bits := range []int{4, 8} {
			for _, cols := range []int{64, 128, 512, 2048 + 64} {
				for _, rows := range []int{1, 3, 17, 512} {
					t.Run(fmt.Sprintf("q%d_%dx%d", bits, rows, cols), func(t *testing.T) {
						m := randMatrix(rng, rows, cols, bits)
						if err := m.Validate(); err != nil {
							t.Fatal(err)
						}
						x := randVec(rng, cols)
						in := NewInput(cols)
						in.Set(x)

						dst := make([]float32, rows)
						MatVec(m, dst, x)
						for r := range rows {
							checkDot(t, "MatVec", dst[r], m, r, x)
							checkDot(t, "DotRow", m.DotRow(r, in), m, r, x)
						}

						// MulVecRange writes only [r0, r1), indexed by absolute row.
						r0, r1 := rows/3, rows-rows/4
						part := make([]float32, rows)
						m.MulVecRange(part, in, r0, r1)
						for r := range rows {
							if r >= r0 && r < r1 {
								checkDot(t, "MulVecRange", part[r], m, r, x)
							} else if part[r] != 0 {
								t.Fatalf("MulVecRange(%d, %d) wrote row %d", r0, r1, r)
							}
						}

						// A view of the middle rows gives the same rows of the whole.
						v := m.RowRange(r0, r1-r0)
						if err := v.Validate(); err != nil {
							t.Fatal(err)
						}
						vd := make([]float32, v.Rows)
						MatVecInput(v, vd, in)
						for i := range vd {
							checkDot(t, "RowRange", vd[i], m, r0+i, x)
						}

						// MatMul equals MatVec per input, bit for bit.
						const T = 3
						xs, outs := make([]*Input, T), make([][]float32, T)
						for i := range T {
							xs[i] = NewInput(cols)
							xs[i].Set(randVec(rng, cols))
							outs[i] = make([]float32, rows)
						}
						MatMul(m, outs, xs)
						for i := range T {
							MatVecInput(m, dst, xs[i])
							for r := range rows {
								if outs[i][r] != dst[r] {
									t.Fatalf("MatMul input %d row %d: %g, MatVec %g", i, r, outs[i][r], dst[r])
								}
							}
						}
					})
				}
			}
		}
	})
}

func TestDequantRow(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for _, bits := range []int{4, 8} {
		m := randMatrix(rng, 5, 192, bits)
		row := make([]float32, m.Cols)
		for r := range m.Rows {
			m.DequantRow(r, row)
			for k, v := range row {
				if want := refElem(m, r, k); float64(v) != float64(float32(want)) {
					t.Fatalf("q%d (%d,%d): got %g, want %g", bits, r, k, v, want)
				}
			}
		}
	}
}

// A large matrix makes MatVec split rows across the worker pool; chunk
// edges must not be off by one.
func TestMatVecParallel(t *testing.T) { paths(t, testMatVecParallel) }

func testMatVecParallel(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	m := randMatrix(rng, 4099, 1024, 4)
	x := randVec(rng, m.Cols)
	dst := make([]float32, m.Rows)
	MatVec(m, dst, x)
	in := NewInput(m.Cols)
	in.Set(x)
	// Chunks start at multiples of 4 rows, so they match one serial pass bit for bit.
	want := make([]float32, m.Rows)
	m.MulVecRange(want, in, 0, m.Rows)
	for r := range m.Rows {
		if want[r] != dst[r] {
			t.Fatalf("row %d: MatVec %g, MulVecRange %g", r, dst[r], want[r])
		}
	}
}

func TestBF16(t *testing.T) {
	for _, c := range []struct {
		in   uint32
		want uint16
	}{
		{0x3f800000, 0x3f80}, // 1
		{0x3f808000, 0x3f80}, // tie, even stays
		{0x3f818000, 0x3f82}, // tie, odd rounds up
		{0x3f808001, 0x3f81}, // above half
		{0xbf80ffff, 0xbf81}, // negative rounds away
		{0x7f7fffff, 0x7f80}, // max float rounds to +Inf
		{0x7f800000, 0x7f80}, // +Inf
		{0xff800000, 0xff80}, // -Inf
		{0x80000000, 0x8000}, // -0
	} {
		if got := F32ToBF16(math.Float32frombits(c.in)); got != c.want {
			t.Errorf("F32ToBF16(%#08x) = %#04x, want %#04x", c.in, got, c.want)
		}
	}
	for _, nan := range []uint32{0x7fc00000, 0x7f800001, 0xff800001} {
		if f := BF16ToF32(F32ToBF16(math.Float32frombits(nan))); f == f {
			t.Errorf("NaN %#08x became %g", nan, f)
		}
	}
	for u := 0; u < 1<<16; u++ {
		if f := BF16ToF32(uint16(u)); f == f && F32ToBF16(f) != uint16(u) {
			t.Fatalf("bf16 %#04x does not round-trip", u)
		}
	}
}

func TestQuantize(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	for _, bits := range []int{4, 8} {
		rows, cols := 7, 256
		w := randVec(rng, rows*cols)
		m := Quantize(w, rows, cols, bits)
		if err := m.Validate(); err != nil {
			t.Fatal(err)
		}
		row := make([]float32, cols)
		for r := range rows {
			m.DequantRow(r, row)
			for k, v := range row {
				g := (r*cols + k) / GroupSize
				step := math.Abs(float64(BF16ToF32(m.Scales[g])))
				// One step (MLX snaps the scale to edge/q0, which can shrink the
				// range by up to a step at the far end), plus the bf16 rounding
				// (2^-8 relative) of bias and of the scale times q: at 8 bits
				// the latter is up to another step.
				tol := step + (math.Abs(float64(BF16ToF32(m.Biases[g])))+float64(int(1)<<bits-1)*step)/256
				if d := math.Abs(float64(v - w[r*cols+k])); d > tol {
					t.Fatalf("q%d (%d,%d): %g dequantized to %g, more than one step %g", bits, r, k, w[r*cols+k], v, step)
				}
			}
		}
	}
}

func TestQuantizeMLXRules(t *testing.T) {
	const bits = 4
	g := make([]float32, 4*GroupSize)
	// Group 0: the max dominates (|1| >= |-0.5|): negative scale, bias = max.
	// edge/scale = 1/(-0.1) = -10, so scale = 1/-10 and q = 0 decodes to 1.
	for i := range GroupSize {
		g[i] = -0.5 + 1.5*float32(i)/(GroupSize-1)
	}
	// Group 1: the min dominates: positive scale, bias = min.
	for i := range GroupSize {
		g[GroupSize+i] = -1 + 1.2*float32(i)/(GroupSize-1)
	}
	// Group 2 is all zeros and group 3 below the 1e-7 scale floor: q0 = 0,
	// so the bias is 0 and the scale stays at -1e-7.
	for i := range GroupSize {
		g[3*GroupSize+i] = 1e-8 * float32(i%2)
	}
	m := Quantize(g, 1, len(g), bits)

	if s, b := BF16ToF32(m.Scales[0]), BF16ToF32(m.Biases[0]); s >= 0 || b != 1 {
		t.Errorf("max-dominated group: scale %g bias %g, want negative scale and bias 1", s, b)
	}
	if s, b := m.Scales[0], m.Biases[0]; s != F32ToBF16(1/float32(-10)) || b != F32ToBF16(1) {
		t.Errorf("max-dominated group: scale %#04x bias %#04x", s, b)
	}
	if s, b := BF16ToF32(m.Scales[1]), BF16ToF32(m.Biases[1]); s <= 0 || b != -1 {
		t.Errorf("min-dominated group: scale %g bias %g, want positive scale and bias -1", s, b)
	}
	for _, gi := range []int{2, 3} {
		if s, b := m.Scales[gi], m.Biases[gi]; b != 0 || s != F32ToBF16(-1e-7) {
			t.Errorf("group %d (q0 = 0): scale %g bias %#04x, want -1e-7 and 0", gi, BF16ToF32(s), b)
		}
	}
	row := make([]float32, len(g))
	m.DequantRow(0, row)
	if row[GroupSize-1] != 1 || row[GroupSize] != -1 {
		t.Errorf("edges dequantize to %g, %g; want 1, -1 exactly", row[GroupSize-1], row[GroupSize])
	}

	// Values 0..15: the max dominates, so scale = -1, bias = 15, and
	// q = round((w-15)/-1) rounds half to even.
	h := make([]float32, GroupSize)
	for i := range h {
		h[i] = float32(i % 16)
	}
	h[5] = 14.5 // 0.5 → 0 (even)
	h[6] = 13.5 // 1.5 → 2 (even)
	m = Quantize(h, 1, GroupSize, bits)
	if s, b := BF16ToF32(m.Scales[0]), BF16ToF32(m.Biases[0]); s != -1 || b != 15 {
		t.Fatalf("scale %g bias %g, want -1 and 15", s, b)
	}
	if q5, q6 := m.Words[0]>>20&15, m.Words[0]>>24&15; q5 != 0 || q6 != 2 {
		t.Errorf("q for 14.5, 13.5 = %d, %d; want 0, 2 (half to even)", q5, q6)
	}
}

func TestValidate(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	good := randMatrix(rng, 3, 128, 4)
	for _, c := range []struct {
		edit func(m *Matrix)
		want string
	}{
		{func(m *Matrix) { m.Bits = 3 }, "bits"},
		{func(m *Matrix) { m.Cols = 96 }, "cols"},
		{func(m *Matrix) { m.Words = m.Words[1:] }, "words"},
		{func(m *Matrix) { m.Scales = m.Scales[1:] }, "scales"},
		{func(m *Matrix) { m.Biases = nil }, "biases"},
	} {
		m := *good
		c.edit(&m)
		if err := m.Validate(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Validate() = %v, want an error about %s", err, c.want)
		}
	}
	if err := good.Validate(); err != nil {
		t.Error(err)
	}
}

// Activations with outliers (as LLM hidden states have), all-zero groups
// and NaN: the VNNI layout scales x per group, so these are its edge cases.
func TestInputEdgeCases(t *testing.T) {
	paths(t, func(t *testing.T) {
		rng := rand.New(rand.NewPCG(17, 18))
		m := randMatrix(rng, 9, 512, 4)
		x := randVec(rng, m.Cols)
		x[3], x[200], x[201] = 3000, -1500, 1e-30
		clear(x[64:128]) // one all-zero group
		for i := 256; i < 320; i++ {
			x[i] *= 1e-20 // one tiny group
		}
		in := NewInput(m.Cols)
		in.Set(x)
		dst := make([]float32, m.Rows)
		MatVecInput(m, dst, in)
		for r := range m.Rows {
			checkDot(t, "outliers", dst[r], m, r, x)
		}

		x[77] = float32(math.NaN())
		in.Set(x)
		MatVecInput(m, dst, in)
		for r, v := range dst {
			if v == v {
				t.Fatalf("row %d: NaN in x gave %g", r, v)
			}
		}
	})
}

func TestLimbs(t *testing.T) {
	for _, X := range []int32{0, 1, -1, 127, 128, -128, -129, 255, 256, 32767, 32768, -32768, 1<<22 - 1, 1 << 22, -1 << 22, 1<<22 - 129, -1<<22 + 129} {
		for _, frac := range []float64{0, 0.25, 0.5, -0.5} {
			want := int32(math.RoundToEven(float64(X) + frac))
			if want > 1<<22 || want < -1<<22 {
				continue
			}
			l0, l1, l2 := limbs(float64(X) + frac)
			if got := int32(int8(l0)) + 256*int32(int8(l1)) + 65536*int32(int8(l2)); got != want {
				t.Errorf("limbs(%v) = %d %d %d = %d, want %d", float64(X)+frac, int8(l0), int8(l1), int8(l2), got, want)
			}
		}
	}
}
