//go:build linux

package kernels

import (
	"errors"
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

// The kernel checks' random inputs and error measure.
var (
	randFloats = RandFloats
	relErr     = RelErr
)
