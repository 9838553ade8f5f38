//go:build linux

package gpu

import (
	"github.com/lilyformac/lily/engine/model"
	"github.com/lilyformac/lily/metal/emu"
	"github.com/lilyformac/lily/metal/exec"
	"github.com/lilyformac/lily/metal/kernels"
)

// EmuOptions configure the emulated backend.
type EmuOptions struct {
	MaxCtx      int       // KV cache positions (a session's limit); 0: as many as WorkingSet holds, up to the model's context
	WorkingSet  int64     // device memory to size the KV cache in, as Metal's working set (0: no limit)
	KVBits      int       // KV cache format: 16 (0) or 8
	PageSize    int       // KV pool page (0: decode's default)
	Pages       int       // KV pool pages (0: GPUOptions' default)
	CacheBytes  int64     // the prefix cache's budget (GPUOptions.CacheBytes)
	Chunks      []int     // prompt tokens per batched prefill step, one per size (GPUOptions.Chunks)
	ChunkLogits bool      // GPUOptions.ChunkLogits
	Parallel    int       // GPUOptions.Parallel
	Threads     emu.Order // thread order inside threadgroups
	GroupOrder  emu.Order // order of the dispatches between two barriers
	Seed        uint64
	Emu         emu.Options
	Budget      exec.Budget // GPUOptions.Budget
	// PrefillRoute is GPUOptions.PrefillRoute: the emulator runs either route.
	PrefillRoute string
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
	return NewGPU("emu", w, &exec.EmuDevice{Lib: lib, Threads: o.Threads, GroupOrder: o.GroupOrder, Seed: o.Seed}, GPUOptions{MaxCtx: o.MaxCtx, WorkingSet: o.WorkingSet, KVBits: o.KVBits, PageSize: o.PageSize, Pages: o.Pages, CacheBytes: o.CacheBytes, Chunks: o.Chunks, ChunkLogits: o.ChunkLogits, Parallel: o.Parallel, Budget: o.Budget, PrefillRoute: o.PrefillRoute})
}

// emuSources are the decode step's kernel sources as the emulator compiles them.
func emuSources() []emu.Source {
	var srcs []emu.Source
	for _, n := range KernelFiles {
		srcs = append(srcs, emu.Source{Name: kernels.Path(n), Code: kernels.Source(n)})
	}
	return srcs
}
