package profile

import (
	"fmt"
	"io"
	"math"

	"github.com/lilyformac/lily/metal/exec"
	"github.com/lilyformac/lily/metal/gpu"
	"github.com/lilyformac/lily/metal/plan"
)

// Output is `lily bench --profile --output json`: the decode step's kernels and a prefill
// chunk's, or with --rows the step of 1 to N sequences.
type Output struct {
	Profile        *Step `json:"profile,omitempty"`
	PrefillProfile *Step `json:"prefill_profile,omitempty"`
	RowsProfile    *Rows `json:"rows_profile,omitempty"` // --rows, instead of the kernels
}

// Step is one step's profile: the decode step (mode "sample": a sampled request's step, as
// `bench --plan` models it) or a prefill chunk (mode "chunkM").
type Step struct {
	Device string `json:"device"`
	// Timing says what a kernel's ms are: "gpu" (Metal's command buffer GPU times, one dispatch
	// per command buffer) or "wall" (the emulator's CPU wall time per dispatch).
	Timing  string  `json:"timing"`
	Chip    string  `json:"chip,omitempty"`
	PeakGBs float64 `json:"peak_gb_s,omitempty"`
	Mode    string  `json:"mode"`
	Context int     `json:"context"`         // positions cached before the step
	Chunk   int     `json:"chunk,omitempty"` // prompt tokens of a prefill chunk
	Steps   int     `json:"steps"`           // steps timed; kernel figures are their mean
	StepMS  float64 `json:"step_ms"`         // the kernels' time summed
	// StepBytes and StepFLOPs are the step's modeled traffic and FLOPs, plan.Stats as `bench
	// --plan` reports them; the kernels' bytes add up to StepBytes plus the decode step's
	// readback (step_copy, 24 bytes).
	StepBytes int64    `json:"step_bytes"`
	StepFLOPs float64  `json:"step_flops"`
	Kernels   []Kernel `json:"kernels"`
}

// Kernel is one kernel's share of a Step.
type Kernel struct {
	Kernel     string  `json:"kernel"`
	Dispatches int     `json:"dispatches"`
	MS         float64 `json:"ms"`
	Bytes      int64   `json:"bytes"`
	FLOPs      float64 `json:"flops"`
	GBs        float64 `json:"gb_s"`
	GFLOPs     float64 `json:"gflop_s"`
	// PeakShare is the achieved bandwidth's share of the chip's peak (0 without a chip).
	PeakShare float64 `json:"peak_share"`
}

// fill names the device, its timing and its chip.
func (p *Step) fill(g *gpu.GPU, o Options) {
	p.Device, p.Timing = o.Device, "wall"
	if g.Name() == "metal" {
		p.Timing = "gpu"
	}
	if o.Chip.Name != "" {
		p.Chip, p.PeakGBs = o.Chip.Name, o.Chip.Bandwidth/1e9
	}
}

// newStep sums timings by kernel (gpu.Profile) with each kernel's achieved rates and share of
// chip's peak bandwidth.
func newStep(model *plan.Plan, st plan.Stats, timings []exec.Timing, mode string, ctx int, chip plan.Chip) (*Step, error) {
	ks, n := gpu.Profile(model, timings, mode)
	if n == 0 {
		return nil, fmt.Errorf("profile: no step ran in mode %s", mode)
	}
	p := &Step{Mode: mode, Context: ctx, Steps: n, StepBytes: st.Bytes, StepFLOPs: st.FLOPs, Kernels: []Kernel{}}
	for _, k := range ks {
		kp := Kernel{Kernel: k.Kernel, Dispatches: k.Dispatches, MS: k.Seconds * 1e3, Bytes: k.Bytes, FLOPs: k.FLOPs}
		if k.Seconds > 0 {
			kp.GBs = float64(k.Bytes) / k.Seconds / 1e9
			kp.GFLOPs = k.FLOPs / k.Seconds / 1e9
			if chip.Bandwidth > 0 {
				kp.PeakShare = float64(k.Bytes) / k.Seconds / chip.Bandwidth
			}
		}
		p.StepMS += kp.MS
		kp.MS, kp.GBs, kp.GFLOPs, kp.PeakShare = significant(kp.MS), significant(kp.GBs), significant(kp.GFLOPs), significant(kp.PeakShare)
		p.Kernels = append(p.Kernels, kp)
	}
	p.StepMS = round(p.StepMS, 6)
	return p, nil
}

// Print writes the profiles as `lily bench --profile --output text` shows them: a table of
// kernels per step, or of rows and contexts.
func (o *Output) Print(w io.Writer) {
	if o.RowsProfile != nil {
		o.RowsProfile.Print(w)
	}
	for _, p := range []*Step{o.Profile, o.PrefillProfile} {
		if p == nil {
			continue
		}
		what := fmt.Sprintf("decode step (%s) at context %d", p.Mode, p.Context)
		if p.Chunk > 0 {
			what = fmt.Sprintf("prefill chunk of %d tokens after %d cached", p.Chunk, p.Context)
		}
		peak := "none (--chip names one)"
		if p.Chip != "" {
			peak = fmt.Sprintf("%s's %.0f GB/s", p.Chip, p.PeakGBs)
		}
		fmt.Fprintf(w, "%s on %s, %s time, mean of %d: %.3f ms, modeled %d bytes, %.4g FLOPs; peak bandwidth: %s\n",
			what, p.Device, p.Timing, p.Steps, p.StepMS, p.StepBytes, p.StepFLOPs, peak)
		fmt.Fprintf(w, "%-24s %5s %10s %14s %12s %9s %9s %6s\n", "kernel", "disp", "ms", "bytes", "flops", "GB/s", "GFLOP/s", "peak%")
		for _, k := range p.Kernels {
			fmt.Fprintf(w, "%-24s %5d %10.4f %14d %12.4g %9.2f %9.2f %6.1f\n", k.Kernel, k.Dispatches, k.MS, k.Bytes, k.FLOPs, k.GBs, k.GFLOPs, 100*k.PeakShare)
		}
	}
}

// round rounds x to digits decimals.
func round(x float64, digits int) float64 {
	f := math.Pow(10, float64(digits))
	return math.Round(x*f) / f
}

// significant rounds x to 6 significant digits.
func significant(x float64) float64 {
	if x == 0 || math.IsInf(x, 0) || math.IsNaN(x) {
		return x
	}
	return round(x, 5-int(math.Floor(math.Log10(math.Abs(x)))))
}
