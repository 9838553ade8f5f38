//go:build linux

package emu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"regexp"
	"strings"
	"testing"

	"github.com/lilyformac/lily/engine/quant"
)

// layoutSeeds are the cooperative-tensor layouts the tensor-op tests run under.
var layoutSeeds = []uint64{1, 2, 3}

// eighths draws n multiples of 1/8 in [-2, 2]: exact in half and bfloat, and every product and
// sum of the tests' sizes is exact in float, so results compare bit for bit.
func eighths(r *rand.Rand, n int) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(r.IntN(33)-16) / 8
	}
	return v
}

// matmulRef is C (m×n) = A (m×k, row-major) · B over the inner indices [k0, k1); b(kk, j) reads B.
func matmulRef(a []float32, b func(kk, j int) float32, m, n, k, k0, k1 int) []float32 {
	c := make([]float32, m*n)
	for i := range m {
		for j := range n {
			var s float32
			for kk := k0; kk < k1; kk++ {
				s += a[i*k+kk] * b(kk, j)
			}
			c[i*n+j] = s
		}
	}
	return c
}

// firstDiff is the index of the first element where got and want differ in bits, or -1.
func firstDiff(got, want []float32) int {
	for i := range want {
		if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
			return i
		}
	}
	return -1
}

type gemmShape struct{ m, n, k int }

// runGemm dispatches one of tensor.metal's gemm instances on random A and B and returns C with
// the references over every K-step and over the last one only.
func runGemm(t *testing.T, p *Pipeline, s gemmShape, d Dispatch) (got, full, last []float32, err error) {
	t.Helper()
	r := rand.New(rand.NewPCG(uint64(s.m), uint64(s.k)))
	a, b := eighths(r, s.m*s.k), eighths(r, s.k*s.n)
	c := NewBuffer(4 * s.m * s.n)
	c.Fill(0xFF)
	d.Threadgroups = [3]int{(s.n + 31) / 32, (s.m + 31) / 32}
	if d.Group == [3]int{} {
		d.Group = [3]int{128}
	}
	d.Buffers = map[int]Binding{0: {Buffer: BufferOf(halves(a))}, 1: {Buffer: BufferOf(b)}, 2: {Buffer: c}}
	err = p.Dispatch(d)
	bAt := func(kk, j int) float32 { return b[kk*s.n+j] }
	lastK := (s.k - 1) / 16 * 16
	return c.Float32s(), matmulRef(a, bAt, s.m, s.n, s.k, 0, s.k), matmulRef(a, bAt, s.m, s.n, s.k, lastK, s.k), err
}

var gemmEdges = gemmShape{45, 40, 40} // edge tiles in M, N and K (tiles of 32 × 32, K-steps of 16)

func gemmPipeline(t *testing.T, l *Library, name string, s gemmShape) *Pipeline {
	return mustPipeline(t, l, name, map[int]any{0: s.m, 1: s.n, 2: s.k, 3: 0})
}

// TestTensorGemm: a tiled GEMM on execution_simdgroups<4> (K-loop of multiply_accumulate into a
// float cooperative tensor, B staged as bfloat, A through a device slice, edge tiles) equals the
// reference in every thread order and layout.
func TestTensorGemm(t *testing.T) {
	p := gemmPipeline(t, testLib(t, Options{}, "tensor.metal"), "tensor_gemm", gemmEdges)
	for _, order := range Orders {
		for _, seed := range layoutSeeds {
			got, want, _, err := runGemm(t, p, gemmEdges, Dispatch{Order: order, Seed: 7, LayoutSeed: seed})
			if err != nil {
				t.Fatalf("%v, layout %d: %v", order, seed, err)
			}
			if i := firstDiff(got, want); i >= 0 {
				t.Fatalf("%v, layout %d: C[%d][%d] = %g, want %g", order, seed, i/gemmEdges.n, i%gemmEdges.n, got[i], want[i])
			}
		}
	}
}

// TestTensorGemmASan runs the GEMM in the AddressSanitizer helper, whose launch carries the
// layout seed too: the same seed gives the same result, and the result is right.
func TestTensorGemmASan(t *testing.T) {
	p := gemmPipeline(t, testLib(t, Options{ASan: true}, "tensor.metal"), "tensor_gemm", gemmEdges)
	for _, seed := range layoutSeeds[:2] {
		got, want, _, err := runGemm(t, p, gemmEdges, Dispatch{Order: Shuffle, Seed: 3, LayoutSeed: seed})
		if err != nil {
			t.Fatal(err)
		}
		if i := firstDiff(got, want); i >= 0 {
			t.Fatalf("layout %d: element %d = %g, want %g", seed, i, got[i], want[i])
		}
	}
	// the assumed layout differs between seeds in the helper as in process
	a := gemmPipeline(t, testLib(t, Options{ASan: true}, "tensor.metal"), "tensor_gemm_assume", gemmEdges)
	got1, _, _, err1 := runGemm(t, a, gemmEdges, Dispatch{LayoutSeed: 1})
	got2, _, _, err2 := runGemm(t, a, gemmEdges, Dispatch{LayoutSeed: 2})
	if err1 != nil || err2 != nil {
		t.Fatal(err1, err2)
	}
	if firstDiff(got1, got2) < 0 {
		t.Fatal("layout seeds 1 and 2 gave the same layout in the helper process")
	}
}

// TestTensorLayoutAssumptionFails: a kernel that puts slot i of thread t at a fixed element
// instead of asking get_multidimensional_index is wrong under every random layout, and one seed
// gives one layout.
func TestTensorLayoutAssumptionFails(t *testing.T) {
	p := gemmPipeline(t, testLib(t, Options{}, "tensor.metal"), "tensor_gemm_assume", gemmEdges)
	var prev []float32
	for _, seed := range layoutSeeds {
		got, want, _, err := runGemm(t, p, gemmEdges, Dispatch{LayoutSeed: seed})
		if err != nil {
			t.Fatal(err)
		}
		if firstDiff(got, want) < 0 {
			t.Fatalf("layout %d: the kernel that assumes a layout matched the reference", seed)
		}
		again, _, _, _ := runGemm(t, p, gemmEdges, Dispatch{Order: Reverse, LayoutSeed: seed})
		if i := firstDiff(again, got); i >= 0 {
			t.Fatalf("layout %d: element %d differs between two dispatches with the seed", seed, i)
		}
		if prev != nil && firstDiff(got, prev) < 0 {
			t.Fatalf("layout %d: the same layout as the previous seed", seed)
		}
		prev = got
	}
}

// TestTensorMultiplyOverwrites: mode multiply in a K-loop leaves only the last K-step's product.
func TestTensorMultiplyOverwrites(t *testing.T) {
	p := gemmPipeline(t, testLib(t, Options{}, "tensor.metal"), "tensor_gemm_multiply", gemmEdges)
	got, full, last, err := runGemm(t, p, gemmEdges, Dispatch{LayoutSeed: 2})
	if err != nil {
		t.Fatal(err)
	}
	if i := firstDiff(got, last); i >= 0 {
		t.Fatalf("element %d = %g, want the last K-step's %g", i, got[i], last[i])
	}
	if firstDiff(got, full) < 0 {
		t.Fatal("multiply in a K-loop matched the accumulated reference")
	}
}

// TestTensorSimdgroup: execution_simdgroup ops, one per simdgroup of a threadgroup, with the
// bias loaded into the cooperative tensor, k = dynamic_extent, the right input transposed and the
// tile stored through a slice at the edges.
func TestTensorSimdgroup(t *testing.T) {
	l := testLib(t, Options{}, "tensor.metal")
	const m, n, k = 20, 40, 24
	p := mustPipeline(t, l, "tensor_simd", map[int]any{0: m, 1: n, 2: k, 3: 0})
	r := rand.New(rand.NewPCG(5, 6))
	a, w, bias := eighths(r, m*k), eighths(r, n*k), eighths(r, m*n)
	want := matmulRef(a, func(kk, j int) float32 { return w[j*k+kk] }, m, n, k, 0, k)
	for i := range want {
		want[i] += bias[i]
	}
	c := NewBuffer(4 * m * n)
	dispatch := func(p *Pipeline, order Order, seed uint64) error {
		c.Fill(0xFF)
		return p.Dispatch(Dispatch{Threadgroups: [3]int{2, 2}, Group: [3]int{64}, Order: order, Seed: 1, LayoutSeed: seed,
			Buffers: map[int]Binding{0: {Buffer: BufferOf(quant.F32sToBF16(a))}, 1: {Buffer: BufferOf(halves(w))}, 2: {Buffer: BufferOf(bias)}, 3: {Buffer: c}}})
	}
	for _, order := range Orders {
		for _, seed := range layoutSeeds[:2] {
			if err := dispatch(p, order, seed); err != nil {
				t.Fatalf("%v, layout %d: %v", order, seed, err)
			}
			if got := c.Float32s(); firstDiff(got, want) >= 0 {
				i := firstDiff(got, want)
				t.Fatalf("%v, layout %d: C[%d][%d] = %g, want %g", order, seed, i/n, i%n, got[i], want[i])
			}
		}
	}
	// half of every simdgroup returns before the cooperative load
	half := mustPipeline(t, l, "tensor_simd", map[int]any{0: m, 1: n, 2: k, 3: 8})
	if err, want := dispatch(half, Forward, 1), "cooperative_tensor::load (execution_simdgroup): lanes with mask 0x0000ffff called it"; err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("16 lanes: got %v, want %q", err, want)
	}
}

// TestTensorMisuse: each misuse fails the dispatch with a diagnostic at its .metal line.
func TestTensorMisuse(t *testing.T) {
	l := testLib(t, Options{}, "tensor.metal")
	single := gemmShape{32, 32, 16}
	for _, c := range []struct {
		misuse int
		want   string
	}{
		{1, "matmul2d::run at metal/emu/testdata/tensor.metal:"},
		{2, "cooperative_tensor::store (execution_simdgroups): thread 32 passes other tensors or shape than thread 0"},
		{3, "k = dynamic_extent: the left input's k extent is 16, the right's 8"},
		{4, "thread 32 passes other tensors or shape than thread 0"},
		{5, "inputs changed between this thread's arrival and the last one's"},
		{6, "get_multidimensional_index"},
		{7, "tensor element access: index 16 of dimension 0 is outside the tensor"},
	} {
		t.Run(fmt.Sprint(c.misuse), func(t *testing.T) {
			p := mustPipeline(t, l, "tensor_misuse", map[int]any{0: single.m, 1: single.n, 2: single.k, 3: c.misuse})
			_, _, _, err := runGemm(t, p, single, Dispatch{LayoutSeed: 1})
			if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "tensor.metal:") {
				t.Fatalf("got %v, want an error with %q", err, c.want)
			}
			t.Log(err)
		})
	}
	// execution_simdgroups<4> in a threadgroup of 3 simdgroups
	p := gemmPipeline(t, l, "tensor_gemm", gemmEdges)
	_, _, _, err := runGemm(t, p, gemmEdges, Dispatch{Group: [3]int{96}})
	want := regexp.MustCompile(`tensor\.metal:\d+: execution_simdgroups<4> needs a threadgroup of 4 simdgroups \(128 threads\); this one has 96 threads in 3 simdgroups`)
	if err == nil || !want.MatchString(err.Error()) {
		t.Fatalf("3 simdgroups: got %v, want %q", err, want)
	}
}

// TestTensorOtherOpsLayout: running an op into the cooperative tensor of an op with another tile
// does not compile (the layout is part of the cooperative tensor's type).
func TestTensorOtherOpsLayout(t *testing.T) {
	src := `#include <metal_stdlib>
#include <metal_tensor>
#include <MetalPerformancePrimitives/MetalPerformancePrimitives.h>
using namespace metal;
using namespace mpp::tensor_ops;
kernel void k(device half* a [[buffer(0)]]) {
  auto t = tensor(a, dextents<int32_t, 2>(16, 32));
  matmul2d<matmul2d_descriptor(32, 32, 16), execution_simdgroups<4>> op;
  matmul2d<matmul2d_descriptor(16, 64, 16), execution_simdgroups<4>> other;
  auto acc = op.get_destination_cooperative_tensor<decltype(t), decltype(t), float>();
  other.run(t, t, acc);
}
`
	_, err := Compile([]Source{{Name: "other_layout.metal", Code: src}}, Options{})
	if want := "has another op's layout (another m, n or scope)"; err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("got %v, want a compile error with %q", err, want)
	}
}

// TestTensorThread: execution_thread ops write their rows of C straight into device memory (the
// rows past M dropped); with relaxed_precision the float inputs are rounded to tf32 first.
func TestTensorThread(t *testing.T) {
	l := testLib(t, Options{}, "tensor.metal")
	const m, n, k = 10, 8, 12
	r := rand.New(rand.NewPCG(11, 12))
	a, b := make([]float32, m*k), make([]float32, k*n)
	for i := range a {
		a[i] = r.Float32()*4 - 2
	}
	for i := range b {
		b[i] = r.Float32()*4 - 2
	}
	ref := func(round func(float32) float32) []float32 {
		c := make([]float32, m*n)
		for i := range m {
			for j := range n {
				var acc float32
				for kk := range k {
					acc = float32(math.FMA(float64(round(a[i*k+kk])), float64(round(b[kk*n+j])), float64(acc)))
				}
				c[i*n+j] = acc
			}
		}
		return c
	}
	exact, relaxed := ref(func(x float32) float32 { return x }), ref(tf32)
	if firstDiff(exact, relaxed) < 0 {
		t.Fatal("the test's inputs are exact in tf32")
	}
	for name, want := range map[string][]float32{"tensor_thread": exact, "tensor_thread_relaxed": relaxed} {
		p := mustPipeline(t, l, name, map[int]any{0: m, 1: n, 2: k, 3: 0})
		c := NewBuffer(4 * m * n)
		if err := p.Dispatch(Dispatch{Threads: [3]int{(m + 3) / 4}, Group: [3]int{2}, Order: Shuffle, LayoutSeed: 4,
			Buffers: map[int]Binding{0: {Buffer: BufferOf(a)}, 1: {Buffer: BufferOf(b)}, 2: {Buffer: c}}}); err != nil {
			t.Fatal(err)
		}
		if i := firstDiff(c.Float32s(), want); i >= 0 {
			t.Fatalf("%s: C[%d][%d] = %g, want %g", name, i/n, i%n, c.Float32s()[i], want[i])
		}
	}
}

// tf32 rounds to 10 fraction bits, to nearest even: relaxed_precision's float inputs.
func tf32(x float32) float32 {
	b := math.Float32bits(x)
	b += 0xFFF + (b>>13)&1
	return math.Float32frombits(b &^ 0x1FFF)
}
