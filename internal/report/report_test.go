package report

import (
	"encoding/json"
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/lilyformac/lily/metal/exec"
	"github.com/lilyformac/lily/metal/selftest"
)

// fakeDevice makes pipelines with fixed limits, and fails the kernel "broken".
type fakeDevice struct{ exec.Device }

type fakePipeline struct{}

func (fakePipeline) MaxThreads() int                    { return 768 }
func (fakePipeline) ThreadExecutionWidth() int          { return 32 }
func (fakePipeline) StaticThreadgroupMemoryLength() int { return 4096 }
func (fakePipeline) MaxThreadgroupMemoryLength() int    { return 32768 }

func (fakeDevice) Pipeline(kernel string, _ map[int]any) (exec.Pipeline, error) {
	if kernel == "broken" {
		return nil, errors.New("no such function")
	}
	return fakePipeline{}, nil
}

// TestPipelineRecorder: each distinct kernel and constants is noted once, with its limits or
// its error, listed by kernel then constants; the constants are written in index order.
func TestPipelineRecorder(t *testing.T) {
	r := &PipelineRecorder{Device: fakeDevice{}}
	for _, c := range []struct {
		kernel    string
		constants map[int]any
	}{
		{"qmv_q8", map[int]any{1: 2048, 0: true}},
		{"broken", nil},
		{"argmax", nil},
		{"qmv_q8", map[int]any{0: true, 1: 2048}},
		{"qmv_q8", map[int]any{0: false}},
	} {
		r.Pipeline(c.kernel, c.constants)
	}
	got := r.List()
	want := []Pipeline{
		{Kernel: "argmax", MaxTotalThreadsPerGroup: 768, ThreadExecutionWidth: 32, StaticThreadgroupMemory: 4096, MaxThreadgroupMemory: 32768},
		{Kernel: "broken", Error: "no such function"},
		{Kernel: "qmv_q8", Constants: "0=false", MaxTotalThreadsPerGroup: 768, ThreadExecutionWidth: 32, StaticThreadgroupMemory: 4096, MaxThreadgroupMemory: 32768},
		{Kernel: "qmv_q8", Constants: "0=true 1=2048", MaxTotalThreadsPerGroup: 768, ThreadExecutionWidth: 32, StaticThreadgroupMemory: 4096, MaxThreadgroupMemory: 32768},
	}
	if len(got) != len(want) {
		t.Fatalf("%+v", got)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("pipeline %d: %+v, want %+v", i, got[i], want[i])
		}
	}
	if res := ResidencyOf(fakeDevice{}); res.Status != "n/a" || res.PipelineCacheWarnings == nil {
		t.Errorf("residency of a device that is not Metal: %+v", res)
	}
}

// TestCheckOf: an error that is not a number is null; a failure and a skip say why.
func TestCheckOf(t *testing.T) {
	c := CheckOf(selftest.Result{Case: "qmv_q8/256x2048", Kernel: "qmv_q8", Shape: "256x2048", Pass: true, WorstError: 1e-6, Tolerance: 1e-5, Duration: 1500 * time.Microsecond})
	if c.Error == nil || *c.Error != 1e-6 || !c.Pass || c.Ms != 1.5 || c.Failure != "" {
		t.Errorf("%+v", c)
	}
	c = CheckOf(selftest.Result{Case: "e2e", WorstError: math.NaN(), Err: errors.New("demo checkpoint: gone"), Skipped: ""})
	raw, _ := json.Marshal(c)
	if !strings.Contains(string(raw), `"error":null`) || c.Failure != "demo checkpoint: gone" || c.Pass {
		t.Errorf("%s", raw)
	}
	if c := CheckOf(selftest.Result{Case: "tensor", WorstError: math.Inf(1), Pass: true, Skipped: "no tensor ops"}); c.Error != nil || c.Skipped != "no tensor ops" {
		t.Errorf("%+v", c)
	}
}
