package profile

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/lilyformac/lily/metal/exec"
	"github.com/lilyformac/lily/metal/plan"
)

// TestNewStep: the timings of the steps in the mode profiled are summed by kernel against the
// plan's model of each dispatch, as means per step, slowest kernel first, with the achieved
// rates and their share of the chip's peak bandwidth, rounded to 6 significant digits.
func TestNewStep(t *testing.T) {
	model := &plan.Plan{Dispatches: []plan.Dispatch{
		{Kernel: "qmv", Reads: []plan.Range{{Buffer: 0, Len: 1000}}, Writes: []plan.Range{{Buffer: 1, Len: 500}}, FLOPs: 2000},
		{Kernel: "norm", Reads: []plan.Range{{Buffer: 1, Len: 300}}},
		{Kernel: "qmv", Reads: []plan.Range{{Buffer: 2, Len: 1000}}, Writes: []plan.Range{{Buffer: 3, Len: 500}}, FLOPs: 2000},
	}}
	var timings []exec.Timing
	for step, mode := range []string{"sample", "chunk8", "sample"} {
		for d, sec := range []float64{1e-3, 3e-3, 1.0 / 3 * 1e-3} {
			timings = append(timings, exec.Timing{Step: step, Mode: mode, Dispatch: d, Kernel: model.Dispatches[d].Kernel, Seconds: sec})
		}
	}
	chip := plan.Chip{Name: "M4 Max", Bandwidth: 546e9}
	st := plan.Stats{Bytes: 3300, FLOPs: 4000}
	p, err := newStep(model, st, timings, "sample", 7, chip)
	if err != nil {
		t.Fatal(err)
	}
	if p.Mode != "sample" || p.Context != 7 || p.Steps != 2 || p.StepBytes != 3300 || p.StepFLOPs != 4000 || len(p.Kernels) != 2 {
		t.Fatalf("%+v", p)
	}
	norm, qmv := p.Kernels[0], p.Kernels[1] // norm's 3 ms before qmv's 1.333 ms
	if norm.Kernel != "norm" || norm.Dispatches != 1 || norm.MS != 3 || norm.Bytes != 300 || norm.FLOPs != 0 || norm.GBs != 0.0001 || norm.GFLOPs != 0 {
		t.Errorf("norm %+v", norm)
	}
	if qmv.Kernel != "qmv" || qmv.Dispatches != 2 || qmv.MS != 1.33333 || qmv.Bytes != 3000 || qmv.FLOPs != 4000 || qmv.GBs != 0.00225 || qmv.GFLOPs != 0.003 {
		t.Errorf("qmv %+v", qmv)
	}
	if want := significant(3000 / (4.0 / 3 * 1e-3) / 546e9); qmv.PeakShare != want || want == 0 {
		t.Errorf("qmv peak_share %g, want %g", qmv.PeakShare, want)
	}
	if p.StepMS != 4.333333 {
		t.Errorf("step_ms %g", p.StepMS)
	}
	if p, err := newStep(model, st, timings, "sample", 7, plan.Chip{}); err != nil || p.Kernels[0].PeakShare != 0 {
		t.Errorf("without a chip: %v %+v", err, p)
	}
	if _, err := newStep(model, st, timings, "chunk16", 7, chip); err == nil || !strings.Contains(err.Error(), "no step ran in mode chunk16") {
		t.Errorf("no step: %v", err)
	}
}

// TestOptions: the context a profile needs holds the prompt and the longer of the chunk and
// the decode steps; a prompt too short is an error, not a panic.
func TestOptions(t *testing.T) {
	for _, c := range []struct {
		o               Options
		positions, plen int
	}{
		{Options{Context: 4, Prefill: 8, Steps: 1}, 4 + 9 + 1, 13},
		{Options{Context: 1024, Prefill: 512, Steps: 4, Warmup: true}, 1024 + 513 + 1, 1537},
		{Options{Context: 4, Steps: 16, Warmup: true}, 4 + 17 + 1, 5},
	} {
		if c.o.Positions() != c.positions || c.o.PromptLen() != c.plen {
			t.Errorf("%+v: positions %d, prompt %d; want %d, %d", c.o, c.o.Positions(), c.o.PromptLen(), c.positions, c.plen)
		}
	}
	if _, err := Run(context.Background(), nil, make([]int, 12), Options{Context: 4, Prefill: 8, Steps: 1}); err == nil || !strings.Contains(err.Error(), "12 prompt tokens, want 13") {
		t.Errorf("short prompt: %v", err)
	}
	if _, err := Run(context.Background(), nil, make([]int, 13), Options{Context: 4, Prefill: 8}); err == nil || !strings.Contains(err.Error(), "0 steps") {
		t.Errorf("no steps: %v", err)
	}
}

// TestPrint: the text form names each step and lists its kernels.
func TestPrint(t *testing.T) {
	k := Kernel{Kernel: "qmv_q4", Dispatches: 3, MS: 1.5, Bytes: 4096, FLOPs: 8192, GBs: 2.7, GFLOPs: 5.4, PeakShare: 0.25}
	out := &Output{
		Profile:        &Step{Device: "Apple M4 Max", Timing: "gpu", Chip: "M4 Max", PeakGBs: 546, Mode: "sample", Context: 1024, Steps: 4, StepMS: 1.5, StepBytes: 4096, StepFLOPs: 8192, Kernels: []Kernel{k}},
		PrefillProfile: &Step{Device: "emu", Timing: "wall", Mode: "chunk8", Context: 4, Chunk: 8, Steps: 1, Kernels: []Kernel{k}},
	}
	var b bytes.Buffer
	out.Print(&b)
	for _, want := range []string{
		"decode step (sample) at context 1024 on Apple M4 Max, gpu time, mean of 4: 1.500 ms, modeled 4096 bytes, 8192 FLOPs; peak bandwidth: M4 Max's 546 GB/s\n",
		"prefill chunk of 8 tokens after 4 cached on emu, wall time, mean of 1: 0.000 ms, modeled 0 bytes, 0 FLOPs; peak bandwidth: none (--chip names one)\n",
		"qmv_q4                       3     1.5000           4096         8192      2.70      5.40   25.0\n",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("no %q in\n%s", want, b.String())
		}
	}
	if n := strings.Count(b.String(), "kernel "); n != 2 {
		t.Errorf("%d table headers:\n%s", n, b.String())
	}
}
