//go:build linux

package kernels

import (
	"errors"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"

	"github.com/lilyformac/lily/engine/quant"
	"github.com/lilyformac/lily/metal/emu"
)

// Libraries are compiled once per test process (and cached on disk across runs).
var (
	libMu   sync.Mutex
	libs    = map[string]*emu.Library{}
	libErrs = map[string]error{}
)

// library compiles kernel files with opts, or skips the test when no usable clang is installed
// (CI installs one; see .ci/run).
func library(t testing.TB, opts emu.Options, names ...string) *emu.Library {
	t.Helper()
	key := strings.Join(names, ",")
	if opts.ASan {
		key += "|asan"
	}
	libMu.Lock()
	defer libMu.Unlock()
	lib, err := libs[key], libErrs[key]
	if lib == nil && err == nil {
		var srcs []emu.Source
		for _, n := range names {
			srcs = append(srcs, emu.Source{Name: Path(n), Code: Source(n)})
		}
		lib, err = emu.Compile(srcs, opts)
		libs[key], libErrs[key] = lib, err
	}
	if errors.Is(err, emu.ErrNoClang) {
		t.Fatalf("%v (the emulator tests need clang 17 or later: apt-get install clang-19)", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	return lib
}

func pipeline(t testing.TB, lib *emu.Library, kernel string, constants map[int]any) *emu.Pipeline {
	t.Helper()
	p, err := lib.Pipeline(kernel, constants)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// dispatch runs a kernel call on emulator buffers (each bound at offset 0) with its pipeline
// from lib, the threads of each threadgroup in order (Shuffle seeded with seed).
func dispatch(t testing.TB, lib *emu.Library, c Call[*emu.Buffer], order emu.Order, seed uint64) error {
	t.Helper()
	bs := make(map[int]emu.Binding, len(c.Buffers))
	for i, b := range c.Buffers {
		bs[i] = emu.Binding{Buffer: b}
	}
	return dispatchBound(t, lib, Call[emu.Binding]{Kernel: c.Kernel, Constants: c.Constants, Buffers: bs,
		Threadgroups: c.Threadgroups, Group: c.Group, ThreadgroupMem: c.ThreadgroupMem}, order, seed)
}

// dispatchBound is dispatch for a call whose bindings carry their offsets.
func dispatchBound(t testing.TB, lib *emu.Library, c Call[emu.Binding], order emu.Order, seed uint64) error {
	t.Helper()
	return pipeline(t, lib, c.Kernel, c.Constants).Dispatch(emu.Dispatch{
		Threadgroups: c.Threadgroups, Group: c.Group, Buffers: c.Buffers, ThreadgroupMem: c.ThreadgroupMem,
		Order: order, Seed: seed,
	})
}

// mustDispatch is dispatch, failing the test on an error.
func mustDispatch(t testing.TB, lib *emu.Library, c Call[*emu.Buffer], order emu.Order, seed uint64) {
	t.Helper()
	if err := dispatch(t, lib, c, order, seed); err != nil {
		t.Fatal(err)
	}
}

// The kernel checks' random inputs and error measure.
var (
	randFloats = RandFloats
	relErr     = RelErr
)

// randGain is an RMSNorm gain as the checkpoint stores it (bf16 around 1).
func randGain(r *rand.Rand, n int) []uint16 {
	g := make([]uint16, n)
	for i := range g {
		g[i] = quant.F32ToBF16(1 + 0.5*float32(r.NormFloat64()))
	}
	return g
}
