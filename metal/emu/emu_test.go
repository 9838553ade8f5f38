//go:build linux

package emu

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/lilyformac/lily/engine/quant"
)

var (
	libMu sync.Mutex
	libs  = map[string]*Library{}
)

// testLib compiles testdata files once per process (and once per machine: the cache), or skips
// when no usable clang is installed.
func testLib(t *testing.T, opts Options, files ...string) *Library {
	t.Helper()
	key := fmt.Sprint(files, opts.ASan, opts.Isolate)
	libMu.Lock()
	defer libMu.Unlock()
	if l := libs[key]; l != nil {
		return l
	}
	var srcs []Source
	for _, f := range files {
		b, err := os.ReadFile("testdata/" + f)
		if err != nil {
			t.Fatal(err)
		}
		srcs = append(srcs, Source{Name: "metal/emu/testdata/" + f, Code: string(b)})
	}
	l, err := Compile(srcs, opts)
	if errors.Is(err, ErrNoClang) {
		t.Fatalf("%v (the emulator tests need clang 17 or later: apt-get install clang-19)", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	libs[key] = l
	return l
}

func mustPipeline(t *testing.T, l *Library, name string, fc map[int]any) *Pipeline {
	t.Helper()
	p, err := l.Pipeline(name, fc)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

var poisonF32 = math.Float32frombits(0xFFFFFFFF)

// simdModel computes what simd_ops writes for one simdgroup: v holds its lanes' inputs (fewer
// than 32 for a partial simdgroup), active which lanes did not return.
func simdModel(v []float32, active []bool) (out [][8]float32, outu [][2]uint32) {
	out, outu = make([][8]float32, len(v)), make([][2]uint32, len(v))
	has := func(l int) bool { return l < len(v) && active[l] }
	first := -1
	for l := range v {
		if active[l] {
			first = l
			break
		}
	}
	// the emulator's reduction tree: pairs (0,1), (2,3), … then (0,2), (4,6), …
	tree := func(op func(a, b float32) float32) float32 {
		var buf [32]float32
		var present [32]bool
		for l := range v {
			buf[l], present[l] = v[l], active[l]
		}
		for s := 1; s < 32; s <<= 1 {
			for i := 0; i < 32; i += 2 * s {
				switch {
				case present[i] && present[i+s]:
					buf[i] = op(buf[i], buf[i+s])
				case present[i+s]:
					buf[i], present[i] = buf[i+s], true
				}
			}
		}
		return buf[0]
	}
	sum := tree(func(a, b float32) float32 { return a + b })
	mx := tree(func(a, b float32) float32 { return float32(math.Max(float64(a), float64(b))) })
	mn := tree(func(a, b float32) float32 { return float32(math.Min(float64(a), float64(b))) })
	var ballot uint32
	for l := range v {
		if active[l] && v[l] > 0 {
			ballot |= 1 << l
		}
	}
	from := func(l int) float32 {
		if has(l) {
			return v[l]
		}
		return poisonF32
	}
	for l := range v {
		if !active[l] {
			continue
		}
		var pre float32
		for i := 0; i < l; i++ {
			if active[i] {
				pre += v[i]
			}
		}
		down := v[l]
		if l+3 < 32 {
			down = from(l + 3)
		}
		first1 := uint32(0)
		if l == first {
			first1 = 1
		}
		out[l] = [8]float32{sum, mx, mn, pre, from(l ^ 1), down, from(2), v[first]}
		outu[l] = [2]uint32{ballot, first1}
	}
	return out, outu
}

func sameBits(a, b float32) bool { return math.Float32bits(a) == math.Float32bits(b) }

func TestSimdFunctions(t *testing.T) {
	l := testLib(t, Options{}, "surface.metal")
	p := mustPipeline(t, l, "simd_ops", map[int]any{0: true, 1: 1.0, 2: 0})
	r := rand.New(rand.NewPCG(5, 6))
	for _, c := range []struct{ n, group int }{{64, 64}, {150, 64}, {45, 45}, {7, 32}, {300, 96}} {
		for _, order := range Orders {
			t.Run(fmt.Sprintf("n%d_tg%d_%v", c.n, c.group, order), func(t *testing.T) {
				in := make([]float32, c.n)
				for i := range in {
					in[i] = float32(r.IntN(200)-100) / 4 // exact in float32, sums too
					if r.IntN(5) == 0 {
						in[i] = -1000 // this thread returns before the SIMD-group functions
					}
				}
				bin, bout, boutu := BufferOf(in), NewBuffer(4*8*c.n), NewBuffer(4*2*c.n)
				bout.Fill(0xEE)
				boutu.Fill(0xEE)
				err := p.Dispatch(Dispatch{Threads: [3]int{c.n}, Group: [3]int{c.group},
					Buffers: map[int]Binding{0: {Buffer: bin}, 1: {Buffer: bout}, 2: {Buffer: boutu}}, Order: order, Seed: 11})
				if err != nil {
					t.Fatal(err)
				}
				got, gotu := bout.Float32s(), boutu.Uint32s()
				for g := 0; g < c.n; g += c.group {
					for s := g; s < min(g+c.group, c.n); s += 32 {
						e := min(s+32, g+c.group, c.n)
						active := make([]bool, e-s)
						for i := range active {
							active[i] = in[s+i] >= -100
						}
						want, wantu := simdModel(in[s:e], active)
						for i := range active {
							if !active[i] {
								continue
							}
							for k := range 8 {
								if !sameBits(got[(s+i)*8+k], want[i][k]) {
									t.Errorf("thread %d value %d: got %v want %v", s+i, k, got[(s+i)*8+k], want[i][k])
								}
							}
							if gotu[(s+i)*2] != wantu[i][0] || gotu[(s+i)*2+1] != wantu[i][1] {
								t.Errorf("thread %d ballot/is_first: got %x,%d want %x,%d", s+i, gotu[(s+i)*2], gotu[(s+i)*2+1], wantu[i][0], wantu[i][1])
							}
						}
					}
				}
			})
		}
	}
}

func TestTypesAndConstants(t *testing.T) {
	l := testLib(t, Options{}, "surface.metal")
	for _, optional := range []bool{false, true} {
		fc := map[int]any{0: true, 1: 0.5, 2: int32(-3)}
		wantN := uint32(7)
		if optional {
			fc[3] = uint32(42)
			wantN = 42
		}
		p := mustPipeline(t, l, "types", fc)
		u, f, h, b, bits := BufferOf([]uint32{1, 2, 3, 4}), NewBuffer(48), NewBuffer(4), NewBuffer(4), NewBuffer(24)
		err := p.Dispatch(Dispatch{Threads: [3]int{1}, Group: [3]int{1},
			Buffers: map[int]Binding{0: {Buffer: u}, 1: {Buffer: f}, 2: {Buffer: h}, 3: {Buffer: b}, 4: {Buffer: bits}}})
		if err != nil {
			t.Fatal(err)
		}
		wantF := []float32{1, 2, 3, 4, 1, 2, 5, 4, 2.5, 2.5, 2.5, 2.5}
		for i, w := range wantF {
			if got := f.Float32s()[i]; got != w {
				t.Errorf("float4 %d: got %v want %v", i, got, w)
			}
		}
		if got := h.Uint16s(); got[0] != 0 || got[1] != 0x3e00 { // 0, 1.5
			t.Errorf("half: got %#x %#x, want 0 0x3e00", got[0], got[1])
		}
		if got := b.Uint16s(); got[0] != 0 || got[1] != 0x3dcd {
			t.Errorf("bfloat: got %#x %#x, want 0 0x3dcd", got[0], got[1])
		}
		want := []uint32{0x3f800000, 1, 2, wantN, 8 + 31*100, 0xBC}
		for i, w := range want {
			if got := bits.Uint32s()[i]; got != w {
				t.Errorf("bits[%d]: got %#x want %#x", i, got, w)
			}
		}
	}
}

func TestAtomics(t *testing.T) {
	l := testLib(t, Options{Workers: 2}, "surface.metal")
	p := mustPipeline(t, l, "counts", map[int]any{0: true, 1: 1.0, 2: 0})
	for _, order := range Orders {
		total := NewBuffer(8)
		err := p.Dispatch(Dispatch{Threads: [3]int{1000}, Group: [3]int{128}, Buffers: map[int]Binding{0: {Buffer: total}}, Order: order})
		if err != nil {
			t.Fatal(err)
		}
		if got := total.Uint32s(); got[0] != 1000 || got[1] != 1000 {
			t.Errorf("%v: counts %v, want 1000 1000", order, got)
		}
	}
}

func TestPositions(t *testing.T) {
	l := testLib(t, Options{}, "surface.metal")
	p := mustPipeline(t, l, "positions", map[int]any{0: true, 1: 1.0, 2: 0})
	grid, tg := [3]int{11, 6, 3}, [3]int{4, 4, 2}
	out := NewBuffer(4 * 12 * grid[0] * grid[1] * grid[2])
	if err := p.Dispatch(Dispatch{Threads: grid, Group: tg, Buffers: map[int]Binding{0: {Buffer: out}}}); err != nil {
		t.Fatal(err)
	}
	o := out.Uint32s()
	for z := range grid[2] {
		for y := range grid[1] {
			for x := range grid[0] {
				at := ((z*grid[1]+y)*grid[0] + x) * 12
				pos := [3]int{x, y, z}
				var want [12]uint32
				size := 1
				for d := range 3 {
					want[d] = uint32(pos[d])
					want[3+d] = uint32(pos[d] % tg[d])
					want[6+d] = uint32(pos[d] / tg[d])
					size *= min(tg[d], grid[d]-pos[d]/tg[d]*tg[d])
				}
				want[9] = uint32(size)
				want[10] = uint32((pos[2]%tg[2]*min(tg[1], grid[1]-pos[1]/tg[1]*tg[1])+pos[1]%tg[1])*min(tg[0], grid[0]-pos[0]/tg[0]*tg[0]) + pos[0]%tg[0])
				want[11] = 1
				if [12]uint32(o[at:at+12]) != want {
					t.Fatalf("thread %v: got %v want %v", pos, o[at:at+12], want)
				}
			}
		}
	}
}

func TestTemplateKernels(t *testing.T) {
	l := testLib(t, Options{}, "surface.metal")
	in := []float32{1, 2, 3, 4, 5, 6, 7, 8}
	for _, name := range []string{"scaled_float", "scaled_half"} {
		p := mustPipeline(t, l, name, map[int]any{0: true, 1: 1.0, 2: 0})
		var bin *Buffer
		if name == "scaled_half" {
			h := make([]uint16, len(in))
			for i, v := range in {
				h[i] = quant.F32ToF16(v)
			}
			bin = BufferOf(h)
		} else {
			bin = BufferOf(in)
		}
		out := NewBuffer(4 * len(in))
		err := p.Dispatch(Dispatch{Threadgroups: [3]int{2}, Group: [3]int{4}, Buffers: map[int]Binding{0: {Buffer: bin}, 1: {Buffer: out}},
			ThreadgroupMem: map[int]int{0: 16}, Order: Shuffle})
		if err != nil {
			t.Fatal(err)
		}
		want := []float32{8, 6, 4, 2, 16, 14, 12, 10}
		for i, w := range want {
			if out.Float32s()[i] != w {
				t.Fatalf("%s: got %v want %v", name, out.Float32s(), want)
			}
		}
	}
}

func TestAPIErrors(t *testing.T) {
	l := testLib(t, Options{}, "surface.metal")
	if _, err := l.Pipeline("nope", nil); err == nil || !strings.Contains(err.Error(), "no kernel") {
		t.Errorf("unknown kernel: %v", err)
	}
	if _, err := l.Pipeline("types", map[int]any{0: true}); err == nil || !strings.Contains(err.Error(), "HSCALE") {
		t.Errorf("missing constants: %v", err)
	}
	if _, err := l.Pipeline("types", map[int]any{0: 1, 1: 1.0, 2: 0}); err == nil {
		t.Errorf("int for a bool constant: no error")
	}
	if _, err := l.Pipeline("types", map[int]any{0: true, 1: 1.0, 2: 3.5}); err == nil {
		t.Errorf("float for an int constant: no error")
	}
	p := mustPipeline(t, l, "scaled_float", map[int]any{0: true, 1: 1.0, 2: 0})
	b := NewBuffer(64)
	for _, c := range []struct {
		d    Dispatch
		want string
	}{
		{Dispatch{Group: [3]int{4}, Buffers: map[int]Binding{0: {Buffer: b}}, ThreadgroupMem: map[int]int{0: 16}}, "no buffer bound at index 1"},
		{Dispatch{Group: [3]int{4}, Buffers: map[int]Binding{0: {Buffer: b}, 1: {Buffer: b}}}, "no threadgroup memory"},
		{Dispatch{Group: [3]int{4}, Buffers: map[int]Binding{0: {Buffer: b}, 1: {Buffer: b}}, ThreadgroupMem: map[int]int{0: 20}}, "multiple of 16"},
		{Dispatch{Group: [3]int{2048}, Buffers: map[int]Binding{0: {Buffer: b}, 1: {Buffer: b}}, ThreadgroupMem: map[int]int{0: 16}}, "1..1024"},
		{Dispatch{Group: [3]int{4}, Buffers: map[int]Binding{0: {Buffer: b, Offset: 100}, 1: {Buffer: b}}, ThreadgroupMem: map[int]int{0: 16}}, "offset"},
	} {
		if err := p.Dispatch(c.d); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("got %v, want an error with %q", err, c.want)
		}
	}
}

func TestCompileErrorNamesMetalLine(t *testing.T) {
	if _, err := findToolchain(""); err != nil {
		t.Fatalf("%v (the emulator tests need clang 17 or later: apt-get install clang-19)", err)
	}
	src := `#include <metal_stdlib>
using namespace metal;
static float twice(thread float* p) { return 2 * p[0]; }
kernel void bad(device float* x [[buffer(0)]], uint i [[thread_position_in_grid]]) {
  x[i] = twice(x);
}
`
	_, err := Compile([]Source{{Name: "bad.metal", Code: src}}, Options{CacheDir: t.TempDir()})
	if err == nil || !strings.Contains(err.Error(), "bad.metal:5") {
		t.Fatalf("passing a device pointer as a thread pointer: got %v, want an error at bad.metal:5", err)
	}
}

func TestHalfAndBFloatRounding(t *testing.T) {
	l := testLib(t, Options{}, "surface.metal")
	p := mustPipeline(t, l, "convert", map[int]any{0: true, 1: 1.0, 2: 0})
	in := []float32{0, float32(math.Copysign(0, -1)), 1, 1 + 1.0/2048, 1 + 3.0/2048, 65504, 65519, 65520, 1e6, -1e-8,
		0x1p-24, 0x1.8p-24, 0x1p-25, 0x1.0000002p-25, 0x1p-14, 0x1.ffcp-15, float32(math.Inf(1)), float32(math.Inf(-1)),
		1 + 1.0/256, 1 + 3.0/256, 0x1.fffffep127, 0x1p-133}
	r := rand.New(rand.NewPCG(21, 22))
	for range 20000 {
		in = append(in, math.Float32frombits(r.Uint32()&^(0xff<<23)|uint32(100+r.IntN(60))<<23)) // exponents around half's range
	}
	for range 20000 {
		if f := math.Float32frombits(r.Uint32()); f == f {
			in = append(in, f)
		}
	}
	h, b := NewBuffer(2*len(in)), NewBuffer(2*len(in))
	if err := p.Dispatch(Dispatch{Threads: [3]int{len(in)}, Group: [3]int{256}, Buffers: map[int]Binding{0: {Buffer: BufferOf(in)}, 1: {Buffer: h}, 2: {Buffer: b}}}); err != nil {
		t.Fatal(err)
	}
	bad := 0
	for i, f := range in {
		if got, want := h.Uint16s()[i], quant.F32ToF16(f); got != want && bad < 10 {
			t.Errorf("half(%g): clang %#04x, Go %#04x", f, got, want)
			bad++
		}
		if got, want := b.Uint16s()[i], f32ToBF16(f); got != want && bad < 10 {
			t.Errorf("bfloat(%g): clang %#04x, Go %#04x", f, got, want)
			bad++
		}
	}
}

func TestMathFunctions(t *testing.T) {
	l := testLib(t, Options{}, "surface.metal")
	out := NewBuffer(4 * 20)
	err := mustPipeline(t, l, "math_ops", map[int]any{0: true, 1: 1.0, 2: 0}).Dispatch(Dispatch{Threads: [3]int{1}, Group: [3]int{1}, Buffers: map[int]Binding{0: {Buffer: out}}})
	if err != nil {
		t.Fatal(err)
	}
	want := []float32{30, 30, 5, -809, 8, 7, 2.5, 5, 1, 0, 5.5, 3, 8, 34, 6, 1, -19, 2.25, 65504, 1024}
	for i, w := range want {
		if got := out.Float32s()[i]; got != w {
			t.Errorf("out[%d] = %v, want %v", i, got, w)
		}
	}
}
