//go:build linux

package kernels

import (
	"errors"
	"math"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"

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

func randFloats(r *rand.Rand, n int, scale float32) []float32 {
	s := make([]float32, n)
	for i := range s {
		s[i] = float32(r.NormFloat64()) * scale
	}
	return s
}

// relErr returns max|got-want| / max|want| (max|got-want| when want is all zero), and a NaN
// when got holds one.
func relErr(got, want []float32) float64 {
	var diff, scale float64
	for i := range want {
		if math.IsNaN(float64(got[i])) {
			return math.NaN()
		}
		diff = max(diff, math.Abs(float64(got[i])-float64(want[i])))
		scale = max(scale, math.Abs(float64(want[i])))
	}
	if scale == 0 {
		return diff
	}
	return diff / scale
}
