package profile

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/lilyformac/lily/engine/config"
	"github.com/lilyformac/lily/metal/decode"
	"github.com/lilyformac/lily/metal/exec"
	"github.com/lilyformac/lily/metal/plan"
)

// TestPerStep: a profiled step's time is its dispatches' in the mode summed, averaged over the
// steps of that mode; none of it is an error.
func TestPerStep(t *testing.T) {
	timings := []exec.Timing{
		{Step: 0, Mode: "sample", Seconds: 1}, {Step: 0, Mode: "sample", Seconds: 2},
		{Step: 1, Mode: "greedy", Seconds: 50},
		{Step: 2, Mode: "sample", Seconds: 4}, {Step: 2, Mode: "sample", Seconds: 1},
	}
	if got, err := perStep(timings, "sample"); err != nil || got != 4 {
		t.Errorf("%g s a step (%v), want (1+2+4+1)/2", got, err)
	}
	if _, err := perStep(timings, "chunk8"); err == nil || !strings.Contains(err.Error(), "no step ran in mode chunk8") {
		t.Errorf("no step: %v", err)
	}
}

// TestRowsOptions: a sequence holds the longest context and every step timed; shapes it cannot
// time are errors, not panics.
func TestRowsOptions(t *testing.T) {
	m := &decode.GroupModel{}
	o := RowsOptions{MaxRows: 8, Contexts: []int{4096, 1, 32768}, Steps: 8, Warmup: true, Model: m}
	if o.Positions() != 32768+(1+8)*8+1 || o.PromptLen() != 32768 { // the verify steps: 8 positions each
		t.Errorf("positions %d, prompt %d", o.Positions(), o.PromptLen())
	}
	for _, c := range []struct {
		change func(*RowsOptions)
		want   string
	}{
		{func(o *RowsOptions) { o.MaxRows = 9 }, "9 rows: want 1 to 8"},
		{func(o *RowsOptions) { o.Contexts = []int{0, 4} }, "each of at least 1 position"},
		{func(o *RowsOptions) { o.Contexts = []int{4, 1, 4} }, "distinct"},
		{func(o *RowsOptions) { o.Steps = 0 }, "0 steps"},
		{func(o *RowsOptions) { o.Model = nil }, "no model"},
		{func(o *RowsOptions) { o.Contexts = []int{40000} }, "32768 prompt tokens, want 40000"},
	} {
		bad := o
		c.change(&bad)
		if _, err := RunRows(context.Background(), nil, make([]int, 32768), bad); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want %q", bad, err, c.want)
		}
	}
}

// TestRowsOutput: the text form lists every shape; the calibration holds them against the
// model they were compared with.
func TestRowsOutput(t *testing.T) {
	chip, _ := plan.ChipNamed("M4 Max")
	m, err := decode.NewGroupModel(config.Production(), 64, 16, chip)
	if err != nil {
		t.Fatal(err)
	}
	r := &Rows{Device: "Apple M4 Max", KernelTiming: "gpu", Chip: "M4 Max", KVBits: 16, Steps: 8, CalibrationFile: "/c/m4-max.json", Shapes: []Shape{
		{Rows: 1, Context: 1, StepS: 0.02, KernelsS: 0.03, ModeledS: 0.01, Ratio: 2, VsOne: 1, ModeledVsOne: 1},
		{Rows: 2, Context: 1, StepS: 0.03, KernelsS: 0.04, ModeledS: 0.0125, Ratio: 2.4, VsOne: 1.5, ModeledVsOne: 1.25, VerifyS: 0.035, VerifyModeledS: 0.0124, VerifyVsOne: 1.75},
	}}
	var b bytes.Buffer
	(&Output{RowsProfile: r}).Print(&b)
	for _, want := range []string{
		"on Apple M4 Max against the M4 Max model, 16-bit KV; mean of 8 steps",
		"   2        1      30.0000      40.0000      12.5000      2.4    1.500     1.250      35.0000      1.750\n",
		"calibration written to /c/m4-max.json\n",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("no %q in\n%s", want, b.String())
		}
	}
	c := r.Calibration(m, "Qwen/Qwen3.6-35B-A3B@main")
	if c.Chip != "M4 Max" || c.Device != "Apple M4 Max" || c.ModelID != m.ID() || c.KVBits != 16 || len(c.Points) != 2 ||
		c.Points[1] != (decode.CalibrationPoint{Rows: 2, Context: 1, StepS: 0.03, ModeledS: 0.0125, VerifyS: 0.035, VerifyModeledS: 0.0124}) {
		t.Errorf("calibration %+v", c)
	}
}
