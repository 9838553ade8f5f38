package quant

import (
	"fmt"
	"math"
	"os"
)

// kernel names a 4-bit product kernel and the Input layout it reads.
type kernel uint8

const (
	kernGo   kernel = iota // portable Go, x in natural order
	kernAVX2               // AVX2+FMA, float products, Input.xp
	kernVNNI               // AVX-512 VNNI, integer products, Input.xq
)

// q4Kernel is the kernel Input.Set prepares for; tests change it to cover
// every path on one machine.
var q4Kernel = chooseKernel(os.Getenv("LILY_Q4_KERNEL"))

// chooseKernel is the default kernel, or the named one (go, avx2, vnni) if this CPU runs it.
func chooseKernel(name string) kernel {
	ks := kernels()
	for _, k := range ks {
		if name != "" && kernelName(k) == name {
			return k
		}
	}
	return ks[0]
}

func kernelName(k kernel) string {
	return [...]string{kernGo: "go", kernAVX2: "avx2", kernVNNI: "vnni"}[k]
}

// Input is a vector prepared once for products with many rows: its
// per-group sums (for the bias term) and the layout the kernel reads.
type Input struct {
	cols int
	kern kernel    // kernel the layout was prepared for
	x    []float32 // natural order (pure-Go and 8-bit kernels)
	gsum []float32 // Σx per group, zero-padded to a multiple of 8 groups
	// xp (AVX2): group-major, then nibble position p (0..7) of the packed
	// words, then word: xp[64g+8p+i] = x[64g+8i+p] / 16^p for p < 7, so the
	// nibble can be masked in place (q·16^p) and converted without a shift
	// (the division is exact unless |x| < 2^-100); p = 7 is shifted down,
	// so it is not scaled.
	xp []float32
	// xq (VNNI): 256 bytes per group. x·2^-E_g is rounded to an integer of
	// at most 23 bits (E_g from the group's max |x|) and split into three
	// signed bytes ("limbs", base 256); for limb l, bytes [64l, 64l+32) hold
	// the even elements and [64l+32, 64l+64) the odd ones, matching low and
	// high nibbles of the packed bytes. Bytes 192..199 hold 2^E_g and
	// 2^(E_g+16) as float32.
	xq []byte
}

const xqGroup = 256

// posScale is 16^-p for nibble positions masked in place (Input.xp).
var posScale = [8]float32{1, 1.0 / (1 << 4), 1.0 / (1 << 8), 1.0 / (1 << 12), 1.0 / (1 << 16), 1.0 / (1 << 20), 1.0 / (1 << 24), 1}

// NewInput returns an Input for vectors of length cols (a positive multiple of GroupSize).
func NewInput(cols int) *Input {
	if cols <= 0 || cols%GroupSize != 0 {
		panic(fmt.Sprintf("quant: NewInput(%d): want a positive multiple of %d", cols, GroupSize))
	}
	in := &Input{
		cols: cols,
		x:    make([]float32, cols),
		gsum: make([]float32, (cols/GroupSize+7)&^7),
	}
	in.alloc(q4Kernel)
	return in
}

func (in *Input) alloc(k kernel) {
	switch {
	case k == kernAVX2 && in.xp == nil:
		in.xp = make([]float32, in.cols)
	case k == kernVNNI && in.xq == nil:
		in.xq = make([]byte, in.cols/GroupSize*xqGroup)
	}
}

// Cols returns the vector length.
func (in *Input) Cols() int { return in.cols }

// Set prepares in from x (len Cols), for the kernel selected now. It does
// not allocate.
func (in *Input) Set(x []float32) {
	if len(x) != in.cols {
		panic(fmt.Sprintf("quant: Input.Set: len(x) = %d, want %d", len(x), in.cols))
	}
	copy(in.x, x)
	for g := range in.cols / GroupSize {
		var s float32
		for _, v := range x[g*GroupSize : (g+1)*GroupSize] {
			s += v
		}
		in.gsum[g] = s
	}
	in.kern = q4Kernel
	in.alloc(in.kern) // only if a test switched kernels
	switch in.kern {
	case kernAVX2:
		for g := 0; g < len(x); g += GroupSize {
			src, dst := x[g:g+GroupSize], in.xp[g:g+GroupSize]
			for p, sc := range posScale {
				for i := range 8 {
					dst[8*p+i] = src[8*i+p] * sc
				}
			}
		}
	case kernVNNI:
		for g := range in.cols / GroupSize {
			setLimbs(in.xq[g*xqGroup:(g+1)*xqGroup], x[g*GroupSize:(g+1)*GroupSize])
		}
	}
}

// setLimbs fills one group of the VNNI layout.
func setLimbs(dst []byte, x []float32) {
	var mb uint32 // max |x| as bits: integer max is branch-free
	for _, v := range x {
		mb = max(mb, math.Float32bits(v)&^(1<<31))
	}
	m := math.Float32frombits(mb)
	f := float32(math.NaN()) // Inf or NaN in x: make every product NaN
	clear(dst[:192])
	switch {
	case m == 0:
		f = 0
	case m <= math.MaxFloat32:
		_, e := math.Frexp(float64(m))
		E := e - 22 // |x|·2^-E <= 2^22 keeps the top limb within int8
		inv := math.Ldexp(1, -E)
		d := (*[192]byte)(dst)
		for j, v := range (*[64]float32)(x) {
			i := j/2 + 32*(j%2)
			d[i], d[64+i], d[128+i] = limbs(float64(v) * inv)
		}
		f = float32(math.Ldexp(1, E))
	}
	putF32(dst[192:], f)
	putF32(dst[196:], f*65536)
}

// limbs rounds t (|t| <= 2^22) to an integer X (half to even, by adding
// 1.5·2^52) and splits it into balanced digits: X = l0 + 256·l1 + 65536·l2.
func limbs(t float64) (l0, l1, l2 byte) {
	X := int32(int64(math.Float64bits(t+0x1.8p52) - 0x4338000000000000))
	d0 := int32(int8(X))
	X = (X - d0) >> 8
	d1 := int32(int8(X))
	return byte(d0), byte(d1), byte((X - d1) >> 8)
}

func putF32(b []byte, f float32) {
	u := math.Float32bits(f)
	b[0], b[1], b[2], b[3] = byte(u), byte(u>>8), byte(u>>16), byte(u>>24)
}
