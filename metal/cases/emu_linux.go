//go:build linux

package cases

import (
	"sync"

	"github.com/lilyformac/lily/metal/emu"
	"github.com/lilyformac/lily/metal/exec"
	"github.com/lilyformac/lily/metal/kernels"
)

var (
	libMu sync.Mutex
	libs  = map[emu.Options]*emu.Library{}
)

// EmuLibrary compiles every kernel file the product ships (kernels.Files) for the emulator with
// opts (ASan for the go test's memory checks), once per process and options (and on disk across
// processes).
func EmuLibrary(opts emu.Options) (*emu.Library, error) {
	libMu.Lock()
	defer libMu.Unlock()
	if lib := libs[opts]; lib != nil {
		return lib, nil
	}
	var srcs []emu.Source
	for _, n := range kernels.Files() {
		srcs = append(srcs, emu.Source{Name: kernels.Path(n), Code: kernels.Source(n)})
	}
	lib, err := emu.Compile(srcs, opts)
	if err != nil {
		return nil, err
	}
	libs[opts] = lib
	return lib, nil
}

// EmuDevice is the emulator as an exec device: lib's kernels, the threads of each threadgroup —
// and the dispatches between two barriers — in order (Shuffle seeded with seed), and the
// cooperative tensors of tensor-op kernels in a layout drawn with seed too.
func EmuDevice(lib *emu.Library, order emu.Order, seed uint64) *exec.EmuDevice {
	return &exec.EmuDevice{Lib: lib, Threads: order, GroupOrder: order, Seed: seed, LayoutSeed: seed}
}
