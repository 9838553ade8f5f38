package cases

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"unsafe"

	"github.com/lilyformac/lily/engine/quant"
	"github.com/lilyformac/lily/metal/exec"
	"github.com/lilyformac/lily/metal/kernels"
)

// Ctx is what a case runs with: the device kind, its random source, the plan it builds (buffers
// with their initial contents, dispatches through the kernels' Call constructors) and the
// comparisons' worst error.
type Ctx struct {
	Kind Kind       // the device's kind (a case may check more where the device is exact)
	R    *rand.Rand // the case's inputs

	*Builder
	dev     exec.Device
	c       Case
	tol     float64 // the case's tolerance on this device
	corrupt func(Case, string, []byte)
	x       *exec.Executor

	err   float64 // the worst error so far (NaN sticks)
	worst string  // where it was measured
}

// Step makes the executor, uploads the inputs and runs the plan once.
func (c *Ctx) Step() error { return c.Steps(1, nil, nil) }

// Steps makes the executor, uploads the inputs and runs the plan steps times: before(s), when
// set, before step s (to upload its inputs with Set), after(s) after it (to compare).
func (c *Ctx) Steps(steps int, before func(s int), after func(s int) error) error {
	x, err := exec.New(c.dev, &c.Plan)
	if err != nil {
		return err
	}
	c.x = x
	c.Upload(x)
	for s := range steps {
		if before != nil {
			before(s)
		}
		if err := x.Step(); err != nil {
			return err
		}
		if c.corrupt != nil {
			for _, o := range c.Outputs {
				c.corrupt(c.c, c.Plan.Buffers[o].Name, x.Bytes(o))
			}
		}
		if after != nil {
			if err := after(s); err != nil {
				return err
			}
		}
	}
	return nil
}

func (c *Ctx) close() {
	if c.x != nil {
		c.x.Close()
	}
}

// tolerance is the case's tolerance on this device (for a bound a comparison enforces itself).
func (c *Ctx) tolerance() float64 { return c.tol }

// Set overwrites buffer i's contents with v (between steps).
func (c *Ctx) Set(i int, v any) { copy(c.x.Bytes(i), Encode(v)) }

// BF16 is buffer i's contents as bfloat values widened to float32 (a copy).
func (c *Ctx) BF16(i int) []float32 { return BF16Floats(c.x.Bytes(i)) }

// inAct declares an activation input holding x: bfloat (x rounded) with bf16, else float32.
func (c *Ctx) inAct(name string, x []float32, bf16 bool) int {
	if bf16 {
		return c.InBF16(name, x)
	}
	return c.In(name, x)
}

// outAct declares an activation output of n values: bfloat with bf16, else float32.
func (c *Ctx) outAct(name string, n int, bf16 bool) int {
	if bf16 {
		return c.OutBF16(name, n)
	}
	return c.Out(name, 4*n)
}

// relAct compares activation output buffer i with want: RelBF16 with bf16, else Rel.
func (c *Ctx) relAct(what string, i int, want []float32, bf16 bool) {
	if bf16 {
		c.RelBF16(what, c.BF16(i), want)
		return
	}
	c.Rel(what, c.F32(i), want)
}

// InBF16 declares a bfloat buffer holding x rounded to bfloat (quant.F32sToBF16): an activation as the
// chunk kernels store it.
func (c *Ctx) InBF16(name string, x []float32) int { return c.In(name, quant.F32sToBF16(x)) }

// OutBF16 declares a bfloat output of n values, pre-filled with 0xFFFF (a NaN bfloat) as Out does.
func (c *Ctx) OutBF16(name string, n int) int { return c.Out(name, 2*n) }

// F32 is buffer i's contents as float32 (a copy).
func (c *Ctx) F32(i int) []float32 { return F32s(c.x.Bytes(i)) }

// U32 is buffer i's contents as uint32 (a copy).
func (c *Ctx) U32(i int) []uint32 { return U32s(c.x.Bytes(i)) }

// ---- comparisons ------------------------------------------------------------------------------

// note records an error measured at where; NaN sticks.
func (c *Ctx) note(e float64, where string) {
	switch {
	case math.IsNaN(c.err):
	case math.IsNaN(e) || e > c.err || c.worst == "":
		c.err, c.worst = e, where
	}
}

// Rel compares got with want: max|got−want| / max|want| (kernels.RelErr), recorded with the
// element where |got−want| is largest, or the first NaN (an unwritten or poisoned element).
func (c *Ctx) Rel(what string, got, want []float32) {
	e := kernels.RelErr(got, want)
	i := worstIndex(got, want)
	c.note(e, fmt.Sprintf("%s[%d] = %g, want %g", what, i, got[i], want[i]))
}

// RelBF16 is Rel for an output the kernel stored as bfloat (the chunk mode's activations): got
// is the stored values widened, want the float reference. The store rounds the kernel's float
// result once, by at most half a bfloat ulp; the error recorded is what remains beyond that, per
// element — |got−want| − ½ulp, relative to max|want| — so the case's float32 tolerance still
// bounds the arithmetic and a wrong value shows however it was rounded.
func (c *Ctx) RelBF16(what string, got, want []float32) {
	e, worst := RelErrBF16(got, want)
	c.note(e, fmt.Sprintf("%s[%d] = %g (bfloat), want %g", what, worst, got[worst], want[worst]))
}

// RelErrBF16 is RelBF16's error and the element where it is largest (the first NaN of got).
func RelErrBF16(got, want []float32) (float64, int) {
	var scale float64
	for _, w := range want {
		scale = max(scale, math.Abs(float64(w)))
	}
	if scale == 0 {
		scale = 1
	}
	e, worst := 0.0, 0
	for i := range want {
		g, w := float64(got[i]), float64(want[i])
		if math.IsNaN(g) {
			return math.NaN(), i
		}
		if d := max(math.Abs(g-w)-bf16HalfULP(max(math.Abs(g), math.Abs(w))), 0) / scale; d > e {
			e, worst = d, i
		}
	}
	return e, worst
}

// bf16HalfULP is half the spacing of bfloat values at magnitude a (8 significant bits; the
// subnormal spacing below the smallest normal).
func bf16HalfULP(a float64) float64 {
	if a < 0x1p-126 {
		return 0x1p-134
	}
	_, exp := math.Frexp(a) // a = f·2^exp, ½ ≤ f < 1
	return math.Ldexp(1, exp-9)
}

// worstIndex is the first NaN of got, else where |got−want| is largest.
func worstIndex(got, want []float32) int {
	w, d := 0, -1.0
	for i := range want {
		if math.IsNaN(float64(got[i])) {
			return i
		}
		if e := math.Abs(float64(got[i]) - float64(want[i])); e > d {
			w, d = i, e
		}
	}
	return w
}

// outName names output j of n in a comparison: "y", or "y0", "y1", … when there are several.
func outName(j, n int) string {
	if n == 1 {
		return "y"
	}
	return fmt.Sprintf("y%d", j)
}

// Bits requires got to equal want bit for bit (a copy, or the same operations in the same
// order); it returns an error naming the first element that differs.
func Bits(what string, got, want []float32) error {
	if len(got) < len(want) {
		return fmt.Errorf("%s: %d elements, want %d", what, len(got), len(want))
	}
	for i := range want {
		if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
			return fmt.Errorf("%s[%d] = %g (%#x), want %g (%#x) bit for bit", what, i, got[i], math.Float32bits(got[i]), want[i], math.Float32bits(want[i]))
		}
	}
	return nil
}

// ---- inputs -----------------------------------------------------------------------------------

// RandFloats is n normally distributed values times scale.
var RandFloats = kernels.RandFloats

// RandBF16 is RandFloats rounded to bfloat (kernels.BF16Round): values a bfloat buffer holds
// exactly, so the reference and the kernel start from the same numbers.
func RandBF16(r *rand.Rand, n int, scale float32) []float32 {
	return kernels.BF16Round(RandFloats(r, n, scale))
}

// RandQ is a rows × cols matrix of N(0, 0.05²) values quantized to bits.
func RandQ(r *rand.Rand, rows, cols, bits int) *quant.Matrix {
	return quant.Quantize(RandFloats(r, rows*cols, 0.05), rows, cols, bits)
}

// RandCodes is a rows × cols 4-bit matrix of random codes, each group's scale and bias drawn by
// sb (a matrix too large to quantize quickly).
func RandCodes(r *rand.Rand, rows, cols int, sb func(r *rand.Rand) (scale, bias float32)) *quant.Matrix {
	m := &quant.Matrix{Rows: rows, Cols: cols, Bits: 4,
		Words: make([]uint32, rows*cols/8), Scales: make([]uint16, rows*cols/64), Biases: make([]uint16, rows*cols/64)}
	for i := range m.Words {
		m.Words[i] = r.Uint32()
	}
	for g := range m.Scales {
		s, b := sb(r)
		m.Scales[g], m.Biases[g] = quant.F32ToBF16(s), quant.F32ToBF16(b)
	}
	return m
}

// RandGain is an RMSNorm gain as the checkpoint stores it: bf16 around 1 (spread sd).
func RandGain(r *rand.Rand, n int, sd float32) []uint16 {
	g := make([]uint16, n)
	for i := range g {
		g[i] = quant.F32ToBF16(1 + sd*float32(r.NormFloat64()))
	}
	return g
}

// ---- encoding ---------------------------------------------------------------------------------

// Encode is v's bytes (little-endian, as every machine Lily runs on: arm64 and x86-64).
func Encode(v any) []byte {
	switch s := v.(type) {
	case []byte:
		return slices.Clone(s)
	case []float32:
		return bytesOf(s, 4)
	case []uint32:
		return bytesOf(s, 4)
	case []uint16:
		return bytesOf(s, 2)
	case []uint64:
		return bytesOf(s, 8)
	}
	panic(fmt.Sprintf("cases: cannot encode %T", v))
}

func bytesOf[T any](s []T, size int) []byte {
	if len(s) == 0 {
		return nil
	}
	return slices.Clone(unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(s))), size*len(s)))
}

// F32s is b as little-endian float32s (a copy).
func F32s(b []byte) []float32 {
	out := make([]float32, len(b)/4)
	for i := range out {
		out[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return out
}

// BF16Floats is b as little-endian bfloat values widened to float32 (a copy).
func BF16Floats(b []byte) []float32 {
	out := make([]float32, len(b)/2)
	for i := range out {
		out[i] = quant.BF16ToF32(binary.LittleEndian.Uint16(b[2*i:]))
	}
	return out
}

// U32s is b as little-endian uint32s (a copy).
func U32s(b []byte) []uint32 {
	out := make([]uint32, len(b)/4)
	for i := range out {
		out[i] = binary.LittleEndian.Uint32(b[4*i:])
	}
	return out
}

// U64s is b as little-endian uint64s (a copy).
func U64s(b []byte) []uint64 {
	out := make([]uint64, len(b)/8)
	for i := range out {
		out[i] = binary.LittleEndian.Uint64(b[8*i:])
	}
	return out
}

// Poison fills buffer i with 0xFF again (between steps: an output the next step must rewrite).
func (c *Ctx) Poison(i int) {
	b := c.x.Bytes(i)
	for j := range b {
		b[j] = 0xFF
	}
}

// ID compares a chosen id with the reference's: the error is the number of wrong choices (the
// tolerance of an id is 0), and a wrong one is the case's error.
func (c *Ctx) ID(what string, got, want int) error {
	where := fmt.Sprintf("%s = %d, want %d", what, got, want)
	if got != want {
		c.note(1, where)
		return fmt.Errorf("%s chose id %d, want %d", what, got, want)
	}
	c.note(0, where)
	return nil
}

// Bytes is buffer i's contents (the device's memory: a copy is needed to keep them).
func (c *Ctx) Bytes(i int) []byte { return c.x.Bytes(i) }
