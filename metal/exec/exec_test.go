//go:build linux

package exec

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/lilyformac/lily/engine/quant"
	"github.com/lilyformac/lily/metal/emu"
	"github.com/lilyformac/lily/metal/kernels"
	"github.com/lilyformac/lily/metal/plan"
)

func library(t *testing.T) *emu.Library {
	t.Helper()
	var srcs []emu.Source
	for _, n := range []string{"qmv.metal", "rmsnorm.metal"} {
		srcs = append(srcs, emu.Source{Name: kernels.Path(n), Code: kernels.Source(n)})
	}
	lib, err := emu.Compile(srcs, emu.Options{})
	if err != nil {
		t.Fatalf("%v (the emulator needs clang 17 or later: apt-get install clang-19)", err)
	}
	return lib
}

// Buffers of the two-dispatch plan: d = W·x, then res = x + d, out = RMSNorm(res)·g.
const (
	bufWords = iota
	bufScales
	bufBiases
	bufX
	bufD
	bufGain
	bufRes
	bufOut
)

func twoStepPlan(m *quant.Matrix, barrier bool) *plan.Plan {
	n, k := m.Rows, m.Cols
	sizes := []int64{int64(len(m.Words) * 4), int64(len(m.Scales) * 2), int64(len(m.Biases) * 2), int64(4 * k), int64(4 * n), int64(2 * n), int64(4 * n), int64(4 * n)}
	p := &plan.Plan{}
	for i, s := range sizes {
		p.Buffers = append(p.Buffers, plan.Buffer{Name: string(rune('a' + i)), Size: s, Kind: plan.Activations})
	}
	whole := func(b int) plan.Range { return plan.Range{Buffer: b, Len: sizes[b]} }
	bind := func(bs ...int) map[int]plan.Binding {
		out := map[int]plan.Binding{}
		for i, b := range bs {
			out[i] = plan.Binding{Buffer: b}
		}
		return out
	}
	p.Dispatches = []plan.Dispatch{
		{Kernel: kernels.QMVKernel(4), Constants: map[int]any{kernels.QMVRows: n, kernels.QMVCols: k},
			Buffers: bind(bufWords, bufScales, bufBiases, bufX, bufD), Threadgroups: [3]int{kernels.QMVThreadgroups(n)}, Group: [3]int{kernels.QMVThreads},
			Reads: []plan.Range{whole(bufWords), whole(bufScales), whole(bufBiases), whole(bufX)}, Writes: []plan.Range{whole(bufD)}},
		{Kernel: "add_rmsnorm", Constants: map[int]any{kernels.RMSNormWidth: n, kernels.RMSNormEps: float32(1e-6)},
			Buffers: bind(bufX, bufD, bufGain, bufRes, bufOut), Threadgroups: [3]int{1}, Group: [3]int{kernels.RMSNormThreads}, Barrier: barrier,
			Reads: []plan.Range{whole(bufX), whole(bufD), whole(bufGain)}, Writes: []plan.Range{whole(bufRes), whole(bufOut)}},
	}
	return p
}

func put[T uint16 | uint32 | float32](dst []byte, src []T) {
	for i, v := range src {
		switch x := any(v).(type) {
		case uint16:
			binary.LittleEndian.PutUint16(dst[2*i:], x)
		case uint32:
			binary.LittleEndian.PutUint32(dst[4*i:], x)
		case float32:
			binary.LittleEndian.PutUint32(dst[4*i:], math.Float32bits(x))
		}
	}
}

func floats(b []byte) []float32 {
	out := make([]float32, len(b)/4)
	for i := range out {
		out[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return out
}

// TestExecutorRunsPlanOnEmulator drives a plan through the shared encoder loop on the emulator,
// with the dispatch groups in every order, and compares with the Go references.
func TestExecutorRunsPlanOnEmulator(t *testing.T) {
	lib := library(t)
	rng := rand.New(rand.NewPCG(3, 4))
	n, k := 256, 512
	w := make([]float32, n*k)
	for i := range w {
		w[i] = float32(rng.NormFloat64()) / 16
	}
	m := quant.Quantize(w, n, k, 4)
	x := make([]float32, k)
	for i := range x {
		x[i] = float32(rng.NormFloat64())
	}
	x = x[:n] // the norm adds x's first n values (n ≤ k) to d
	xFull := append(slices.Clone(x), make([]float32, k-n)...)
	gain := make([]uint16, n)
	for i := range gain {
		gain[i] = quant.F32ToBF16(1 + float32(rng.NormFloat64())/10)
	}
	d := kernels.QMV(m, xFull)
	res, want := make([]float32, n), make([]float32, n)
	kernels.AddRMSNorm(res, want, x, d, gain, 1e-6)

	for _, order := range []emu.Order{emu.Forward, emu.Reverse, emu.Shuffle} {
		dev := &EmuDevice{Lib: lib, Threads: order, GroupOrder: order, Seed: 9}
		e, err := New(dev, twoStepPlan(m, true))
		if err != nil {
			t.Fatal(err)
		}
		put(e.Bytes(bufWords), m.Words)
		put(e.Bytes(bufScales), m.Scales)
		put(e.Bytes(bufBiases), m.Biases)
		put(e.Bytes(bufX), xFull)
		put(e.Bytes(bufGain), gain)
		if err := e.Step(); err != nil {
			t.Fatal(err)
		}
		got := floats(e.Bytes(bufOut))
		for i := range got {
			if math.Abs(float64(got[i]-want[i])) > 1e-4*(1+math.Abs(float64(want[i]))) {
				t.Fatalf("order %v: out[%d] = %g, want %g", order, i, got[i], want[i])
			}
		}
	}
}

// TestMissingBarrierIsCaught: without the barrier the norm may run before the product on Metal;
// the emulator's reverse group order makes that visible.
func TestMissingBarrierIsCaught(t *testing.T) {
	lib := library(t)
	n, k := 64, 64
	w := make([]float32, n*k)
	for i := range w {
		w[i] = float32(i%7) - 3
	}
	m := quant.Quantize(w, n, k, 4)
	dev := &EmuDevice{Lib: lib, GroupOrder: emu.Reverse}
	e, err := New(dev, twoStepPlan(m, false))
	if err != nil {
		t.Fatal(err)
	}
	put(e.Bytes(bufWords), m.Words)
	put(e.Bytes(bufScales), m.Scales)
	put(e.Bytes(bufBiases), m.Biases)
	ones := make([]float32, k)
	for i := range ones {
		ones[i] = 1
	}
	put(e.Bytes(bufX), ones)
	gain := make([]uint16, n)
	for i := range gain {
		gain[i] = quant.F32ToBF16(1)
	}
	put(e.Bytes(bufGain), gain)
	if err := e.Step(); err != nil {
		t.Fatal(err)
	}
	d := kernels.QMV(m, ones)
	res := floats(e.Bytes(bufRes))
	if res[0] == 1+d[0] {
		t.Fatal("the norm saw the product's output although it ran first: the reverse order did not apply")
	}
}

func TestKernelNames(t *testing.T) {
	got := KernelNames(kernels.Source("qmv.metal") + "\n" + kernels.Source("rmsnorm.metal"))
	for _, want := range []string{"qmv_q4", "qmv_q8", "add_rmsnorm"} {
		if !slices.Contains(got, want) {
			t.Errorf("KernelNames misses %s: %v", want, got)
		}
	}
}

func TestMetalDeviceOffMacOS(t *testing.T) {
	if _, err := NewMetalDevice(map[string]string{"qmv.metal": kernels.Source("qmv.metal")}); err == nil || !strings.Contains(err.Error(), "macOS") {
		t.Fatalf("NewMetalDevice on linux: %v", err)
	}
	// Every file is compiled with its chosen options: one without them fails before any device.
	if _, err := NewMetalDevice(map[string]string{"new.metal": "kernel void k() {}"}); err == nil || !strings.Contains(err.Error(), "new.metal has no math mode") {
		t.Fatalf("NewMetalDevice with a file lacking compile options: %v", err)
	}
}
