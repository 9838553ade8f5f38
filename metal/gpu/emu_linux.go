//go:build linux

package gpu

import (
	"github.com/lilyformac/lily/engine/model"
	"github.com/lilyformac/lily/metal/emu"
	"github.com/lilyformac/lily/metal/exec"
	"github.com/lilyformac/lily/metal/kernels"
)

// EmuOptions configure the emulated backend: GPUOptions (WorkingSet stands for Metal's working
// set, 0: no limit; the emulator runs either prefill route), and how the emulator orders threads.
type EmuOptions struct {
	GPUOptions
	Threads    emu.Order // thread order inside threadgroups
	GroupOrder emu.Order // order of the dispatches between two barriers
	Seed       uint64
	Emu        emu.Options
}

// Emu is the GPU backend on the MSL emulator; EmuSession its session.
type (
	Emu        = GPU
	EmuSession = Session
)

// NewEmu compiles the kernels for the emulator, builds the decode plan for w and uploads the weights.
func NewEmu(w *model.Weights, o EmuOptions) (*Emu, error) {
	lib, err := emu.Compile(emuSources(), o.Emu)
	if err != nil {
		return nil, err
	}
	return NewGPU("emu", w, &exec.EmuDevice{Lib: lib, Threads: o.Threads, GroupOrder: o.GroupOrder, Seed: o.Seed}, o.GPUOptions)
}

// emuSources are the decode step's kernel sources as the emulator compiles them.
func emuSources() []emu.Source {
	var srcs []emu.Source
	for _, n := range KernelFiles {
		srcs = append(srcs, emu.Source{Name: kernels.Path(n), Code: kernels.Source(n)})
	}
	return srcs
}
