//go:build linux

package exec

import (
	"strings"
	"testing"

	"github.com/lilyformac/lily/metal/emu"
	"github.com/lilyformac/lily/metal/plan"
)

// limitedKernel stands in for a register-heavy kernel: its pipeline allows 256 threads per
// threadgroup (as Metal may report for one that needs many registers), below what a plan may ask.
const limitedKernel = `#include <metal_stdlib>
using namespace metal;

[[max_total_threads_per_threadgroup(256)]]
kernel void limited(device uint* out [[buffer(0)]], uint i [[thread_position_in_grid]]) {
  out[i] = i;
}
`

func groupPlan(threads int) *plan.Plan {
	return &plan.Plan{
		Buffers: []plan.Buffer{{Name: "out", Size: 4 * 1024, Kind: plan.Activations}},
		Dispatches: []plan.Dispatch{{Kernel: "limited", Buffers: map[int]plan.Binding{0: {Buffer: 0}},
			Threadgroups: [3]int{1024 / threads}, Group: [3]int{threads}}},
	}
}

// TestGroupAbovePipelineLimit: a plan whose threadgroup exceeds the pipeline's
// maxTotalThreadsPerThreadgroup fails when the executor is made, naming the kernel and both sizes;
// one within the limit runs.
func TestGroupAbovePipelineLimit(t *testing.T) {
	lib, err := emu.Compile([]emu.Source{{Name: "limited.metal", Code: limitedKernel}}, emu.Options{})
	if err != nil {
		t.Fatal(err)
	}
	dev := &EmuDevice{Lib: lib}
	_, err = New(dev, groupPlan(512))
	if err == nil || !strings.Contains(err.Error(), "dispatch 0 (limited): threadgroups of 512 threads [512 1 1], but this GPU runs the pipeline with at most 256") {
		t.Fatalf("a 512-thread group on a 256-thread pipeline: %v", err)
	}
	x, err := New(dev, groupPlan(256))
	if err != nil {
		t.Fatal(err)
	}
	if err := x.Step(); err != nil {
		t.Fatal(err)
	}
	if got := x.Bytes(0)[4*1023]; got != 1023&0xff {
		t.Fatalf("out[1023] low byte = %d", got)
	}
}

// scratchKernel takes its threadgroup memory from the dispatch ([[threadgroup(0)]]).
const scratchKernel = `#include <metal_stdlib>
using namespace metal;

kernel void scratch(device float* out [[buffer(0)]], threadgroup float* tg [[threadgroup(0)]],
                    uint i [[thread_index_in_threadgroup]]) {
  tg[i] = float(i);
  threadgroup_barrier(mem_flags::mem_threadgroup);
  out[i] = tg[31 - i];
}
`

// TestThreadgroupMemoryAboveDeviceLimit: a dispatch whose threadgroup memory exceeds the device's
// maxThreadgroupMemoryLength (the emulator reports the Apple GPUs' 32 KiB) fails when the executor
// is made, naming the dispatch, the kernel, the bytes asked and the limit, rather than at its
// first run; 32 KiB exactly runs.
func TestThreadgroupMemoryAboveDeviceLimit(t *testing.T) {
	lib, err := emu.Compile([]emu.Source{{Name: "scratch.metal", Code: scratchKernel}}, emu.Options{})
	if err != nil {
		t.Fatal(err)
	}
	p := func(tgm int) *plan.Plan {
		return &plan.Plan{
			Buffers: []plan.Buffer{{Name: "out", Size: 4 * 32, Kind: plan.Activations}},
			Dispatches: []plan.Dispatch{{Kernel: "scratch", Buffers: map[int]plan.Binding{0: {Buffer: 0}},
				ThreadgroupMem: map[int]int{0: tgm}, Threadgroups: [3]int{1}, Group: [3]int{32}}},
		}
	}
	dev := &EmuDevice{Lib: lib}
	_, err = New(dev, p(32*1024+16))
	if err == nil || !strings.Contains(err.Error(), "dispatch 0 (scratch): threadgroup memory of 32784 bytes (0 declared by the kernel + 32784 set by the dispatch), but this GPU allows 32768 per threadgroup (maxThreadgroupMemoryLength)") {
		t.Fatalf("32 KiB + 16 of threadgroup memory: %v", err)
	}
	x, err := New(dev, p(32*1024))
	if err != nil {
		t.Fatal(err)
	}
	if err := x.Step(); err != nil {
		t.Fatal(err)
	}
	if b := x.Bytes(0); b[2] != 0xF8 || b[3] != 0x41 { // out[0] = tg[31] = 31.0f = 0x41F80000
		t.Fatalf("out[0] bytes % x, want 31.0f", b[:4])
	}
}
