package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/lilyformac/lily/engine/backend"
	"github.com/lilyformac/lily/engine/sample"
	"github.com/lilyformac/lily/metal/decode"
	"github.com/lilyformac/lily/metal/exec"
	"github.com/lilyformac/lily/metal/gpu"
	"github.com/lilyformac/lily/metal/mtl"
	"github.com/lilyformac/lily/metal/plan"
)

// profileOptions are `lily bench --profile`'s own flags.
type profileOptions struct {
	on   bool
	chip string
}

// profileSteps is how many decode steps --profile times unless --decode-steps says.
const profileSteps = 4

func addProfileFlags(f *pflag.FlagSet, o *profileOptions) {
	f.BoolVar(&o.on, "profile", false, "time every kernel of the decode step (and with --prefill M of one chunk of M prompt tokens) on --backend metal or emu, each dispatch alone, against the plan's modeled bytes and FLOPs; "+
		fmt.Sprintf("--decode-steps steps are timed (default %d with --profile)", profileSteps))
	var names []string
	for _, c := range plan.Chips {
		names = append(names, c.Name)
	}
	f.StringVar(&o.chip, "chip", "", "with --profile: the chip whose peak bandwidth peak_share is a share of (default: this Mac's GPU; on emu none): "+strings.Join(names, ", "))
}

// profileOutput is `lily bench --profile --output json`.
type profileOutput struct {
	Profile        *stepProfile `json:"profile"`
	PrefillProfile *stepProfile `json:"prefill_profile,omitempty"`
}

// stepProfile is one step's profile: the decode step (mode "sample": a sampled request's step,
// as `bench --plan` models it) or a prefill chunk (mode "chunkM").
type stepProfile struct {
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
	StepBytes int64           `json:"step_bytes"`
	StepFLOPs float64         `json:"step_flops"`
	Kernels   []kernelProfile `json:"kernels"`
}

type kernelProfile struct {
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

// runBenchProfile runs the production decode step, and with --prefill one chunk, on a GPU
// backend with every dispatch timed, and prints the time per kernel against the plan's model.
func runBenchProfile(cmd *cobra.Command, o benchOptions) error {
	switch {
	case o.plan:
		return errors.New("--profile runs the kernels; --plan only models them: pick one")
	case o.trace != "":
		return errors.New("--profile and --agent-trace are exclusive")
	case o.backend != "emu" && o.backend != "metal":
		return fmt.Errorf("--profile times the Metal kernels: --backend metal (or emu, the emulator), not %s", o.backend)
	case o.prefill < 0:
		return fmt.Errorf("--prefill %d: expected a positive number of tokens", o.prefill)
	}
	if err := checkKVBits(o.kvBits, o.backend); err != nil {
		return err
	}
	var chip plan.Chip
	device := "emu (the MSL emulator on the CPU)"
	if o.backend == "metal" {
		name, _, _, ok, reason := mtl.Probe()
		if !ok {
			return fmt.Errorf("metal: %s", reason)
		}
		device = name
		chip, _ = plan.ChipNamed(name)
	}
	if o.profile.chip != "" {
		c, ok := plan.ChipNamed(o.profile.chip)
		if !ok {
			return fmt.Errorf("--chip %q: not in the chip table (M1 to M5, base, Pro, Max, Ultra)", o.profile.chip)
		}
		chip = c
	}
	steps := profileSteps
	if cmd.Flags().Changed("decode-steps") {
		steps = o.steps
	}
	if err := o.useDemo(); err != nil {
		return err
	}
	out, err := profileModel(cmd.Context(), o, steps, chip, device)
	if err != nil {
		return err
	}
	if o.output == "json" {
		return json.NewEncoder(cmd.OutOrStdout()).Encode(out)
	}
	w := cmd.OutOrStdout()
	for _, p := range []*stepProfile{out.Profile, out.PrefillProfile} {
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
	return nil
}

// profileModel profiles the decode step (and with o.prefill one chunk) of the checkpoint in
// o.model on o.backend, steps steps timed, against chip's peak bandwidth, on the device named.
func profileModel(ctx context.Context, o benchOptions, steps int, chip plan.Chip, device string) (*profileOutput, error) {
	warm := 0
	if o.warmup {
		warm = 1
	}
	chunk := o.prefillChunk
	if o.prefill > 0 {
		chunk = o.prefill // the chunk mode profiled must be in the plan
	}
	b, cfg, closeBackend, err := openBackend(o.backend, o.model, backendOptions{ctx: o.ctx + max(o.prefill+1, warm+steps) + 1, kvBits: o.kvBits, prefillChunk: chunk, prefillRoute: o.prefillRoute})
	if err != nil {
		return nil, err
	}
	defer closeBackend()
	g, ok := b.(*gpu.GPU)
	if !ok {
		return nil, fmt.Errorf("backend %s is not a GPU backend", o.backend)
	}
	prompt := benchPrompt(o.ctx+o.prefill+1, cfg.VocabSize)
	s, ok := g.NewSession().(*gpu.Session)
	if !ok {
		return nil, errors.New("gpu: not a GPU session")
	}
	defer s.Close()
	if _, err := s.Forward(prompt[:o.ctx], false); err != nil {
		return nil, err
	}
	var snap backend.Snapshot // the prompt's state, for the prefill chunk
	if o.prefill > 0 {
		if snap, err = s.Save(); err != nil {
			return nil, err
		}
		defer snap.Close()
	}
	timing := "wall"
	if o.backend == "metal" {
		timing = "gpu"
	}
	fill := func(p *stepProfile) {
		p.Device, p.Timing = device, timing
		if chip.Name != "" {
			p.Chip, p.PeakGBs = chip.Name, chip.Bandwidth/1e9
		}
	}

	// The decode step as a sampled request runs it (bench --plan's mode): a warm-up step, then
	// the timed ones.
	seed := uint64(1)
	params := sample.Params{Temperature: 0.7, TopK: 20, TopP: 0.8, Seed: &seed}
	generate := func(n int) error { // n steps: the greedy token Forward left, then n−1 more
		_, err := g.ContinueRows(ctx, []backend.GenRow{{Session: s, Params: params, Prompt: prompt[:s.Pos()], Generated: []int{s.NextToken()}, Max: n - 1}})
		return err
	}
	if warm > 0 {
		if err := generate(warm); err != nil {
			return nil, err
		}
	}
	var out profileOutput
	out.Profile, err = profileRun(g, s.Pos(), decode.ModeSample, func() error { return generate(steps) }, s, chip)
	if err != nil {
		return nil, err
	}
	fill(out.Profile)

	// One chunk of --prefill tokens after --ctx, from the prompt's snapshot: M + 1 tokens, so the
	// chunk runs in its plain mode (Run) and the last token through the decode step.
	if o.prefill > 0 {
		tokens := prompt[o.ctx : o.ctx+o.prefill+1]
		run := func(profiled bool) error {
			rs, err := snap.Restore()
			if err != nil {
				return err
			}
			defer rs.Close()
			r := rs.(*gpu.Session)
			if !profiled {
				_, err := r.Forward(tokens, false)
				return err
			}
			out.PrefillProfile, err = profileRun(g, o.ctx, decode.ChunkModes(o.prefill).Run, func() error {
				_, err := r.Forward(tokens, false)
				return err
			}, r, chip)
			return err
		}
		if warm > 0 {
			if err := run(false); err != nil {
				return nil, err
			}
		}
		if err := run(true); err != nil {
			return nil, err
		}
		out.PrefillProfile.Chunk = o.prefill
		fill(out.PrefillProfile)
	}
	return &out, nil
}

// profileRun times what run runs on s and sums it by kernel for the steps in mode, against
// the plan's model at ctx cached positions.
func profileRun(g *gpu.GPU, ctx int, mode string, run func() error, s *gpu.Session, chip plan.Chip) (*stepProfile, error) {
	model, step, err := g.ModelPlan(ctx)
	if err != nil {
		return nil, err
	}
	if err := s.StartProfile(); err != nil {
		return nil, err
	}
	err = run()
	timings := s.StopProfile()
	if err != nil {
		return nil, err
	}
	return newStepProfile(model, step.Plan.Stats(mode), timings, mode, ctx, chip)
}

// newStepProfile sums timings by kernel (gpu.Profile) with each kernel's achieved rates and share
// of chip's peak bandwidth.
func newStepProfile(model *plan.Plan, st plan.Stats, timings []exec.Timing, mode string, ctx int, chip plan.Chip) (*stepProfile, error) {
	ks, n := gpu.Profile(model, timings, mode)
	if n == 0 {
		return nil, fmt.Errorf("profile: no step ran in mode %s", mode)
	}
	p := &stepProfile{Mode: mode, Context: ctx, Steps: n, StepBytes: st.Bytes, StepFLOPs: st.FLOPs, Kernels: []kernelProfile{}}
	for _, k := range ks {
		kp := kernelProfile{Kernel: k.Kernel, Dispatches: k.Dispatches, MS: k.Seconds * 1e3, Bytes: k.Bytes, FLOPs: k.FLOPs}
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
