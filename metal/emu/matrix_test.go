//go:build linux

package emu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/lilyformac/lily/engine/quant"
)

// matLane is the element lane l holds first, (row, column); it holds (row, column+1) too. This
// is the table Apple GPUs use, written out independently of the runtime's formula.
var matLane = func() [32][2]int {
	rows := [8][8]int{ // lane holding element (r, c), per row
		{0, 0, 1, 1, 8, 8, 9, 9},
		{2, 2, 3, 3, 10, 10, 11, 11},
		{4, 4, 5, 5, 12, 12, 13, 13},
		{6, 6, 7, 7, 14, 14, 15, 15},
		{16, 16, 17, 17, 24, 24, 25, 25},
		{18, 18, 19, 19, 26, 26, 27, 27},
		{20, 20, 21, 21, 28, 28, 29, 29},
		{22, 22, 23, 23, 30, 30, 31, 31},
	}
	var at [32][2]int
	for r := range 8 {
		for c := 0; c < 8; c += 2 {
			at[rows[r][c]] = [2]int{r, c}
		}
	}
	return at
}()

// TestSimdgroupMatrixLayout: thread_elements() holds the lane's two elements at Apple's
// positions; the scalar constructor is a diagonal, make_filled fills every element.
func TestSimdgroupMatrixLayout(t *testing.T) {
	l := testLib(t, Options{}, "matrix.metal")
	p := mustPipeline(t, l, "mat_layout", map[int]any{0: false, 1: false, 2: false})
	labels := make([]float32, 64)
	for i := range labels {
		labels[i] = float32(i)
	}
	for _, order := range Orders {
		out := NewBuffer(4 * 32 * 6)
		out.Fill(0xFF)
		if err := p.Dispatch(Dispatch{Threadgroups: [3]int{1}, Group: [3]int{32}, Buffers: map[int]Binding{0: {Buffer: BufferOf(labels)}, 1: {Buffer: out}}, Order: order, Seed: 3}); err != nil {
			t.Fatal(err)
		}
		got := out.Float32s()
		for lane, rc := range matLane {
			r, c := rc[0], rc[1]
			want := []float32{float32(r*8 + c), float32(r*8 + c + 1), diag(r, c, 3), diag(r, c+1, 3), 2, 2}
			for i, w := range want {
				if g := got[lane*6+i]; g != w {
					t.Fatalf("%v: lane %d value %d = %g, want %g (element (%d, %d))", order, lane, i, g, w, r, c+i%2)
				}
			}
		}
	}
}

func diag(r, c int, v float32) float32 {
	if r == c {
		return v
	}
	return 0
}

// TestSimdgroupMatrixMultiply: loads from device and threadgroup memory at an origin, with and
// without transposition, multiply-accumulate into float and multiply into half, stores at an
// origin, plain or transposed, equal a plain loop (inputs are small multiples of 1/8, so every
// sum is exact and the half results round once).
func TestSimdgroupMatrixMultiply(t *testing.T) {
	l := testLib(t, Options{}, "matrix.metal")
	r := rand.New(rand.NewPCG(7, 8))
	val := func() float32 { return float32(r.IntN(33)-16) / 8 }
	for _, tr := range [][3]bool{{false, false, false}, {true, false, false}, {false, true, true}, {true, true, false}} {
		p := mustPipeline(t, l, "mat_mma", map[int]any{0: tr[0], 1: tr[1], 2: tr[2]})
		for _, order := range Orders {
			t.Run(fmt.Sprintf("%v_%v", tr, order), func(t *testing.T) {
				A, B := make([]float32, 256), make([]float32, 256)
				for i := range A {
					A[i], B[i] = val(), val()
				}
				C := make([]float32, 64)
				for i := range C {
					C[i] = val()
				}
				d, dh := NewBuffer(4*256), NewBuffer(2*256)
				d.Fill(0xFF)
				dh.Fill(0xFF)
				err := p.Dispatch(Dispatch{Threadgroups: [3]int{2, 2}, Group: [3]int{32},
					Buffers: map[int]Binding{0: {Buffer: BufferOf(halves(A))}, 1: {Buffer: BufferOf(halves(B))}, 2: {Buffer: BufferOf(C)}, 3: {Buffer: d}, 4: {Buffer: dh}},
					Order:   order, Seed: 5})
				if err != nil {
					t.Fatal(err)
				}
				// element (i, j) of the 8×8 block at origin (x, y) of a 16-wide source
				at := func(src []float32, x, y, i, j int, trans bool) float32 {
					if trans {
						return src[(x+j)*16+y+i]
					}
					return src[(y+i)*16+x+j]
				}
				gd, gh := d.Float32s(), dh.Uint16s()
				for y := 0; y < 16; y += 8 {
					for x := 0; x < 16; x += 8 {
						for i := range 8 {
							for j := range 8 {
								var dot float64
								for k := range 8 {
									dot += float64(at(A, x, y, i, k, tr[0])) * float64(at(B, x, y, k, j, tr[1]))
								}
								idx := (y+i)*16 + x + j
								if tr[2] {
									idx = (x+j)*16 + y + i
								}
								if want := float32(dot) + C[i*8+j]; gd[idx] != want {
									t.Fatalf("block (%d, %d) element (%d, %d): a·b+c = %g, want %g", x, y, i, j, gd[idx], want)
								}
								if want := quant.F32ToF16(float32(dot)); gh[idx] != want {
									t.Fatalf("block (%d, %d) element (%d, %d): half a·b = %#04x, want %#04x", x, y, i, j, gh[idx], want)
								}
							}
						}
					}
				}
			})
		}
	}
}

// halves rounds to binary16 (exact for the test's values).
func halves(x []float32) []uint16 {
	out := make([]uint16, len(x))
	for i, v := range x {
		out[i] = quant.F32ToF16(v)
	}
	return out
}

// TestSimdgroupMatrixBFloatAccumulate: bfloat operands into a float accumulator that is also the
// addend, twice.
func TestSimdgroupMatrixBFloatAccumulate(t *testing.T) {
	l := testLib(t, Options{}, "matrix.metal")
	p := mustPipeline(t, l, "mat_bf16", map[int]any{0: false, 1: false, 2: false})
	r := rand.New(rand.NewPCG(9, 10))
	A, B := make([]float32, 64), make([]float32, 64)
	a16, b16 := make([]uint16, 64), make([]uint16, 64)
	for i := range A {
		A[i], B[i] = float32(r.IntN(17)-8)/4, float32(r.IntN(17)-8)/4
		a16[i], b16[i] = quant.F32ToBF16(A[i]), quant.F32ToBF16(B[i])
	}
	d := NewBuffer(4 * 64)
	if err := p.Dispatch(Dispatch{Threadgroups: [3]int{1}, Group: [3]int{32}, Buffers: map[int]Binding{0: {Buffer: BufferOf(a16)}, 1: {Buffer: BufferOf(b16)}, 2: {Buffer: d}}, Order: Shuffle, Seed: 1}); err != nil {
		t.Fatal(err)
	}
	for i := range 8 {
		for j := range 8 {
			var dot float32
			for k := range 8 {
				dot += A[i*8+k] * B[k*8+j]
			}
			if got, want := d.Float32s()[i*8+j], 1+2*dot; got != want {
				t.Fatalf("(%d, %d): %g, want %g", i, j, got, want)
			}
		}
	}
}

// TestSimdgroupMatrixNeedsAllLanes: a matrix call from part of a simdgroup is an error naming the
// call; a matrix no call wrote stores as NaN.
func TestSimdgroupMatrixNeedsAllLanes(t *testing.T) {
	l := testLib(t, Options{}, "matrix.metal")
	p := mustPipeline(t, l, "mat_partial", map[int]any{0: false, 1: false, 2: false})
	err := p.Dispatch(Dispatch{Threadgroups: [3]int{1}, Group: [3]int{32}, Buffers: map[int]Binding{0: {Buffer: NewBuffer(256)}, 1: {Buffer: NewBuffer(256)}}})
	if err == nil || !strings.Contains(err.Error(), "all 32 lanes") {
		t.Fatalf("a load from 16 lanes: %v", err)
	}
	u := mustPipeline(t, l, "mat_unwritten", map[int]any{0: false, 1: false, 2: false})
	d := NewBuffer(256)
	if err := u.Dispatch(Dispatch{Threadgroups: [3]int{1}, Group: [3]int{32}, Buffers: map[int]Binding{0: {Buffer: d}}}); err != nil {
		t.Fatal(err)
	}
	for i, v := range d.Float32s() {
		if !math.IsNaN(float64(v)) {
			t.Fatalf("element %d of an unwritten matrix: %g", i, v)
		}
	}
}

// TestSimdgroupMatrixASan runs the multiply through the AddressSanitizer helper process.
func TestSimdgroupMatrixASan(t *testing.T) {
	l := testLib(t, Options{ASan: true}, "matrix.metal")
	p := mustPipeline(t, l, "mat_bf16", map[int]any{0: false, 1: false, 2: false})
	one := make([]uint16, 64)
	for i := range one {
		one[i] = quant.F32ToBF16(1)
	}
	d := NewBuffer(4 * 64)
	if err := p.Dispatch(Dispatch{Threadgroups: [3]int{1}, Group: [3]int{32}, Buffers: map[int]Binding{0: {Buffer: BufferOf(one)}, 1: {Buffer: BufferOf(one)}, 2: {Buffer: d}}}); err != nil {
		t.Fatal(err)
	}
	for i, v := range d.Float32s() {
		if v != 17 { // 1 + 8 + 8
			t.Fatalf("element %d: %g, want 17", i, v)
		}
	}
	// a 63-element destination: the store's last element lands past the end
	short := NewBuffer(4 * 63)
	err := p.Dispatch(Dispatch{Threadgroups: [3]int{1}, Group: [3]int{32}, Buffers: map[int]Binding{0: {Buffer: BufferOf(one)}, 1: {Buffer: BufferOf(one)}, 2: {Buffer: short}}})
	if err == nil {
		t.Fatal("a store past the end of its buffer passed under ASan")
	}
}
