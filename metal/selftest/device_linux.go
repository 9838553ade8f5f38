//go:build linux

package selftest

import (
	"github.com/lilyformac/lily/metal/emu"
	"github.com/lilyformac/lily/metal/exec"
	"github.com/lilyformac/lily/metal/kernels"
)

// DefaultDevice is where `lily doctor --selftest` runs the kernels: on Linux the MSL emulator
// (every kernel of KernelFiles compiled for the CPU, threads in shuffled order), which checks the
// selftest and the kernels' logic but not a GPU. name says which.
func DefaultDevice() (dev exec.Device, name string, err error) {
	var srcs []emu.Source
	for _, n := range KernelFiles {
		srcs = append(srcs, emu.Source{Name: kernels.Path(n), Code: kernels.Source(n)})
	}
	lib, err := emu.Compile(srcs, emu.Options{})
	if err != nil {
		return nil, "", err
	}
	return &exec.EmuDevice{Lib: lib, Threads: emu.Shuffle, GroupOrder: emu.Shuffle, Seed: 1}, "emu", nil
}
