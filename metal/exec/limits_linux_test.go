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
