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

// qmvMode is one case of qmv's fused modes: rows per matrix (more than one: qmv_multi), the
// norm folded in, the result added into y.
type qmvMode struct {
	bits  int
	rows  []int
	k     int
	norm  bool
	add   bool
	multi bool
}

func (c qmvMode) String() string {
	return fmt.Sprintf("q%d_%vx%d_norm%v_add%v_multi%v", c.bits, c.rows, c.k, c.norm, c.add, c.multi)
}

// randGain is an RMSNorm gain as the checkpoint stores it (bf16 around 1).
func randGain(r *rand.Rand, n int) []uint16 {
	g := make([]uint16, n)
	for i := range g {
		g[i] = quant.F32ToBF16(1 + 0.5*float32(r.NormFloat64()))
	}
	return g
}

// qmvModeTol bounds |kernel − reference| relative to max(Σ|w·x̂|, |y₀|): float32 sums of k
// terms in two orders, plus one ulp of r = rsqrt(mean(x²)+eps) (libm vs Go), which scales every
// x̂ and so the whole row.
const qmvModeTol = 4e-6

func checkQMVMode(t *testing.T, lib *emu.Library, r *rand.Rand, c qmvMode, order emu.Order) float64 {
	t.Helper()
	const eps = 1e-6
	x := randFloats(r, c.k, 3)
	gain := randGain(r, c.k)
	xn := x
	if c.norm {
		res := make([]float32, c.k)
		xn = make([]float32, c.k)
		AddRMSNorm(res, xn, x, make([]float32, c.k), gain, eps)
	}
	var ms []*quant.Matrix
	var ws []qbufs
	var ys []*emu.Buffer
	var y0s [][]float32
	for _, n := range c.rows {
		m := quant.Quantize(randFloats(r, n*c.k, 0.05), n, c.k, c.bits)
		y := emu.NewBuffer(4 * n)
		y0 := make([]float32, n)
		if c.add {
			y0 = randFloats(r, n, 1)
			copy(y.Float32s(), y0)
		} else {
			y.Fill(0xFF)
		}
		ms, ws, ys, y0s = append(ms, m), append(ws, bufsOf(m)), append(ys, y), append(y0s, y0)
	}
	v := QMVVariant{Norm: c.norm, Eps: eps, Add: c.add}
	bx, bg := emu.BufferOf(x), emu.BufferOf(gain) // the gain is bound by the norm kernels only
	call := QMVCall(c.bits, c.rows[0], c.k, v, QMVBuffers[*emu.Buffer]{W: ws[0], X: bx, Y: ys[0], Gain: bg})
	if c.multi {
		call = QMVMultiCall(c.bits, c.k, c.rows, v, QMVMultiBuffers[*emu.Buffer]{W: ws, Y: ys, X: bx, Gain: bg})
	}
	mustDispatch(t, lib, call, order, 9)
	var worst float64
	for j, m := range ms {
		got := ys[j].Float32s()
		want := QMV(m, xn)
		_, mag := exactQMV(m, xn)
		var scale float64
		for i := range mag {
			scale = max(scale, mag[i], math.Abs(float64(y0s[j][i])))
		}
		for i := range want {
			if c.add {
				want[i] += y0s[j][i]
			}
			if math.IsNaN(float64(got[i])) {
				t.Fatalf("%v matrix %d row %d: NaN", c, j, i)
			}
			worst = max(worst, math.Abs(float64(got[i])-float64(want[i]))/scale)
		}
	}
	if worst > qmvModeTol {
		t.Errorf("%v %v: error %.2g of max(Σ|w·x̂|, |y₀|), want ≤ %.1g", c, order, worst, qmvModeTol)
	}
	return worst
}

func TestQMVModes(t *testing.T) {
	lib := library(t, emu.Options{}, "qmv.metal")
	r := rand.New(rand.NewPCG(13, 14))
	var cases []qmvMode
	for _, bits := range []int{4, 8} {
		for _, s := range []struct{ n, k int }{{7, 64}, {13, 192}, {17, 576}} {
			for _, m := range [][2]bool{{true, false}, {false, true}, {true, true}} {
				cases = append(cases, qmvMode{bits: bits, rows: []int{s.n}, k: s.k, norm: m[0], add: m[1]})
			}
		}
		// qmv_multi: 1 to 4 matrices, partial threadgroups between them, norm on and off.
		for _, rows := range [][]int{{9}, {5, 3}, {16, 1, 9}, {13, 8, 2, 21}} {
			cases = append(cases, qmvMode{bits: bits, rows: rows, k: 192, norm: true, multi: true})
			cases = append(cases, qmvMode{bits: bits, rows: rows, k: 576, multi: true})
		}
	}
	cases = append(cases, qmvMode{bits: 4, rows: []int{7, 4}, k: 128, norm: true, add: true, multi: true})
	var worst float64
	for _, c := range cases {
		for _, order := range emu.Orders {
			t.Run(fmt.Sprintf("%v_%v", c, order), func(t *testing.T) {
				worst = max(worst, checkQMVMode(t, lib, r, c, order))
			})
		}
	}
	t.Logf("fused modes, small shapes: max error %.2g of max(Σ|w·x̂|, |y₀|)", worst)
}

// TestQMVModesProduction runs the decode plan's fused shapes: GDN in_proj qkv/z/b/a and attention
// q/k/v (normed, multi), out_proj added into the residual, and qmv_norm over 2048 columns (the
// LM head's kernel; its 248,320 rows run in the decode golden tests' plan at tiny sizes only).
func TestQMVModesProduction(t *testing.T) {
	lib := library(t, emu.Options{}, "qmv.metal")
	r := rand.New(rand.NewPCG(15, 16))
	for i, c := range []qmvMode{
		{bits: 4, rows: []int{8192, 4096, 32, 32}, k: 2048, norm: true, multi: true},
		{bits: 4, rows: []int{8192, 512, 512}, k: 2048, norm: true, multi: true},
		{bits: 4, rows: []int{2048}, k: 4096, add: true},
		{bits: 4, rows: []int{2048}, k: 2048, norm: true},
	} {
		order := emu.Orders[i%len(emu.Orders)]
		e := checkQMVMode(t, lib, r, c, order)
		t.Logf("%v %v: max error %.2g", c, order, e)
	}
}

func TestQMVModesASan(t *testing.T) {
	lib := library(t, emu.Options{ASan: true}, "qmv.metal")
	r := rand.New(rand.NewPCG(17, 18))
	checkQMVMode(t, lib, r, qmvMode{bits: 4, rows: []int{13}, k: 192, norm: true, add: true}, emu.Shuffle)
	checkQMVMode(t, lib, r, qmvMode{bits: 8, rows: []int{13, 3, 9, 1}, k: 192, norm: true, multi: true}, emu.Reverse)
}
