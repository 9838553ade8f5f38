package gpu

import (
	"strings"
	"testing"

	"github.com/lilyformac/lily/metal/exec"
	"github.com/lilyformac/lily/metal/plan"
)

// TestProfileSumsByKernel: Profile keeps the steps of its mode, sums each kernel's dispatches,
// time and modelled bytes and FLOPs (plan.Dispatch.Bytes, FLOPs) per step, the mean over the
// steps, and sorts the slowest first.
func TestProfileSumsByKernel(t *testing.T) {
	p := &plan.Plan{
		Buffers: []plan.Buffer{{Name: "w", Size: 1000}, {Name: "x", Size: 100}},
		Dispatches: []plan.Dispatch{
			{Kernel: "a", Reads: []plan.Range{{Buffer: 0, Len: 600}}, Writes: []plan.Range{{Buffer: 1, Len: 100}}, FLOPs: 10},
			{Kernel: "b", Reads: []plan.Range{{Buffer: 1, Len: 100}}, FLOPs: 1},
			{Kernel: "a", Reads: []plan.Range{{Buffer: 0, Offset: 500, Len: 500}}, FLOPs: 20},
		},
	}
	var ts []exec.Timing
	for step, secs := range [][3]float64{{1, 4, 2}, {3, 2, 4}} {
		for i, s := range secs {
			ts = append(ts, exec.Timing{Step: step, Mode: "m", Dispatch: i, Kernel: p.Dispatches[i].Kernel, Seconds: s})
		}
	}
	ts = append(ts, exec.Timing{Step: 2, Mode: "other", Dispatch: 1, Kernel: "b", Seconds: 100})
	got, steps := Profile(p, ts, "m")
	want := []KernelProfile{{Kernel: "a", Dispatches: 2, Seconds: 5, Bytes: 700 + 500, FLOPs: 30}, {Kernel: "b", Dispatches: 1, Seconds: 3, Bytes: 100, FLOPs: 1}}
	if steps != 2 || len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("Profile: %+v over %d steps, want %+v over 2", got, steps, want)
	}
	var sum int64
	for _, k := range got {
		sum += k.Bytes
	}
	if st := p.Stats("m"); st.Bytes != sum || st.FLOPs != 31 {
		t.Fatalf("the kernels' bytes %d against the plan's %+v", sum, st)
	}
}

// TestRowsProfileWithoutRows: a backend of one sequence at a time has no multi-row step to
// profile, and says so rather than panicking.
func TestRowsProfileWithoutRows(t *testing.T) {
	e := &GPU{}
	if err := e.StartRowsProfile(2); err == nil || !strings.Contains(err.Error(), "no 2-row step: this backend steps at most 1 sequence(s) together") {
		t.Errorf("start: %v", err)
	}
	if ts := e.StopRowsProfile(2); ts != nil {
		t.Errorf("stop: %v", ts)
	}
}
