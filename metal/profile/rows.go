package profile

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/lilyformac/lily/engine/backend"
	"github.com/lilyformac/lily/engine/draft"
	"github.com/lilyformac/lily/engine/sample"
	"github.com/lilyformac/lily/metal/decode"
	"github.com/lilyformac/lily/metal/exec"
	"github.com/lilyformac/lily/metal/gpu"
)

// DefaultRowsSteps is how many steps RunRows times per shape unless told otherwise.
const DefaultRowsSteps = 8

// RowsOptions say what RunRows times.
type RowsOptions struct {
	MaxRows  int   // shapes of 1 to MaxRows rows (sequences at once, one row each)
	Contexts []int // positions each sequence has cached before the steps (at least 1)
	Steps    int   // steps timed per shape and way of timing, at least 1
	Warmup   bool  // run each shape's step once, untimed, first
	// Model prices the same shapes (the GroupModel of the backend's checkpoint, context and KV
	// format on the chip compared with).
	Model  *decode.GroupModel
	Device string // the device as the output names it
}

// Positions is how many positions a sequence must hold for RunRows: the longest context, the
// warm-up step and the steps of both ways of timing the generation loop, or the verify steps,
// which take up to MaxRows positions each.
func (o RowsOptions) Positions() int {
	return slices.Max(o.Contexts) + max(o.warm()+2*o.Steps, (o.warm()+o.Steps)*o.MaxRows) + 1
}

// PromptLen is how many prompt tokens RunRows needs.
func (o RowsOptions) PromptLen() int { return slices.Max(o.Contexts) }

func (o RowsOptions) warm() int {
	if o.Warmup {
		return 1
	}
	return 0
}

// Rows is `lily bench --profile --rows`: the decode step of 1 to MaxRows rows at each context,
// measured and modeled.
type Rows struct {
	Device string `json:"device"`
	// KernelTiming says what kernels_s sums: "gpu" (Metal's command buffer GPU times) or "wall"
	// (the emulator's CPU wall time per dispatch). step_s is wall time on both.
	KernelTiming string  `json:"kernel_timing"`
	Chip         string  `json:"chip"` // the chip the model prices
	KVBits       int     `json:"kv_bits"`
	Steps        int     `json:"steps"`
	Shapes       []Shape `json:"shapes"`
	// CalibrationFile is where the shapes were written as the chip's calibration, if anywhere.
	CalibrationFile string `json:"calibration,omitempty"`
}

// Shape is one (rows, context): Rows sequences, one row each, after Context cached positions.
type Shape struct {
	Rows    int `json:"rows"`
	Context int `json:"context"`
	// StepS is the seconds per step of the generation loop as it runs (ContinueRows: two steps
	// in flight on Metal), its wall time over its steps: the c(n) the gate weighs.
	StepS float64 `json:"step_s"`
	// KernelsS is the step's dispatches each run and timed alone, summed (the --profile way):
	// above StepS by a launch per dispatch and the lost overlap.
	KernelsS float64 `json:"kernels_s"`
	ModeledS float64 `json:"modeled_s"` // the GroupModel's time for Rows groups of one row after Context
	Ratio    float64 `json:"ratio"`     // StepS / ModeledS
	// VsOne and ModeledVsOne are the step over the one-row step at the same context, measured
	// and modeled: c(n)/c(1).
	VsOne        float64 `json:"vs_one"`
	ModeledVsOne float64 `json:"modeled_vs_one"`
	// VerifyS is a step that verifies drafts as the engine loop runs it (StepRows, then Keep):
	// one sequence's next token and Rows−1 drafts, every row kept (Rows 1: a host-driven plain
	// step); VerifyModeledS the model's time for that group, and VerifyVsOne VerifyS over the
	// one-row step of the generation loop: what a step with drafts costs against a plain one,
	// which the gate weighs.
	VerifyS        float64 `json:"verify_s"`
	VerifyModeledS float64 `json:"verify_modeled_s"`
	VerifyVsOne    float64 `json:"verify_vs_one"`
}

// RunRows times g's decode step of 1 to o.MaxRows sequences at each of o.Contexts cached
// positions (a prefix of prompt): a session is prefilled once per context and saved, and each
// shape's sequences are restored from it. g must run o.MaxRows sequences in one step
// (gpu.GPUOptions.Parallel) and hold o.Positions() positions each.
func RunRows(ctx context.Context, g *gpu.GPU, prompt []int, o RowsOptions) (*Rows, error) {
	if err := o.check(len(prompt)); err != nil {
		return nil, err
	}
	out := &Rows{Device: o.Device, KernelTiming: "wall", Chip: o.Model.Chip.Name, KVBits: o.Model.KVBits, Steps: o.Steps}
	if g.Name() == "metal" {
		out.KernelTiming = "gpu"
	}
	for _, c := range o.Contexts {
		shapes, err := rowsAt(ctx, g, prompt[:c], o)
		if err != nil {
			return nil, fmt.Errorf("profile: %d positions: %w", c, err)
		}
		out.Shapes = append(out.Shapes, shapes...)
	}
	return out, nil
}

func (o RowsOptions) check(prompt int) error {
	switch {
	case o.MaxRows < 1 || o.MaxRows > decode.MaxRows:
		return fmt.Errorf("profile: %d rows: want 1 to %d", o.MaxRows, decode.MaxRows)
	case len(o.Contexts) == 0 || slices.Min(o.Contexts) < 1 || len(slices.Compact(slices.Sorted(slices.Values(o.Contexts)))) != len(o.Contexts):
		return fmt.Errorf("profile: contexts %v: want at least one, distinct, each of at least 1 position", o.Contexts)
	case o.Steps < 1:
		return fmt.Errorf("profile: %d steps: want at least 1", o.Steps)
	case o.Model == nil:
		return errors.New("profile: no model to compare with")
	case prompt < o.PromptLen():
		return fmt.Errorf("profile: %d prompt tokens, want %d", prompt, o.PromptLen())
	}
	return nil
}

// rowsAt times every row count after prompt, from one prefill saved.
func rowsAt(ctx context.Context, g *gpu.GPU, prompt []int, o RowsOptions) ([]Shape, error) {
	s, ok := g.NewSession().(*gpu.Session)
	if !ok {
		return nil, errors.New("gpu: not a GPU session")
	}
	_, err := s.Forward(prompt, false)
	var snap backend.Snapshot
	if err == nil {
		snap, err = s.Save()
	}
	s.Close() // the snapshot keeps its pages
	if err != nil {
		return nil, err
	}
	defer snap.Close()
	var out []Shape
	for R := 1; R <= o.MaxRows; R++ {
		sh, err := timeRows(ctx, g, snap, R, o)
		if err != nil {
			return nil, fmt.Errorf("%d rows: %w", R, err)
		}
		out = append(out, sh)
	}
	for i := range out {
		out[i].VsOne = significant(out[i].StepS / out[0].StepS)
		out[i].ModeledVsOne = significant(out[i].ModeledS / out[0].ModeledS)
		out[i].VerifyVsOne = significant(out[i].VerifyS / out[0].StepS)
	}
	return out, nil
}

// timeRows restores R sequences from snap and times their steps together: first as the
// generation loop runs them, then each dispatch alone.
func timeRows(ctx context.Context, g *gpu.GPU, snap backend.Snapshot, R int, o RowsOptions) (Shape, error) {
	ss, err := restore(snap, R)
	defer func() {
		for _, s := range ss {
			s.Close()
		}
	}()
	if err != nil {
		return Shape{}, err
	}
	if w := o.warm(); w > 0 {
		if _, err := generate(ctx, g, ss, w); err != nil {
			return Shape{}, err
		}
	}
	wall, err := generate(ctx, g, ss, o.Steps)
	if err != nil {
		return Shape{}, err
	}
	kernels, err := profiled(g, ss, func() error {
		_, err := generate(ctx, g, ss, o.Steps)
		return err
	})
	if err != nil {
		return Shape{}, err
	}
	verify, err := verifySteps(g, snap, R, o)
	if err != nil {
		return Shape{}, fmt.Errorf("verify steps: %w", err)
	}
	groups := make([]draft.Group, R)
	for i := range groups {
		groups[i] = draft.Group{Rows: 1, Ctx: snap.Pos()}
	}
	modeled := o.Model.Step(groups)
	return Shape{Rows: R, Context: snap.Pos(), StepS: significant(wall), KernelsS: significant(kernels),
		ModeledS: significant(modeled), Ratio: significant(wall / modeled),
		VerifyS: significant(verify), VerifyModeledS: significant(o.Model.Step([]draft.Group{{Rows: R, Ctx: snap.Pos()}}))}, nil
}

// verifySteps restores one sequence from snap and times its steps as the engine loop runs a
// step that verifies R−1 drafts: StepRows with its next token and the drafts as one Verify row
// (the host reads every row's logits), then Keep of all R, which commits them. The ids do not
// change the time. Rows 1: a plain row through StepRows, which runs it on the host's side.
func verifySteps(g *gpu.GPU, snap backend.Snapshot, R int, o RowsOptions) (float64, error) {
	ss, err := restore(snap, 1)
	defer func() {
		for _, s := range ss {
			s.Close()
		}
	}()
	if err != nil {
		return 0, err
	}
	s := ss[0]
	tokens := slices.Repeat([]int{s.NextToken()}, R)
	step := func() error {
		res := g.StepRows([]backend.Row{{Session: s, Tokens: tokens, Verify: R > 1}})
		if res[0].Err != nil || R == 1 {
			return res[0].Err
		}
		return s.Keep(R)
	}
	for range o.warm() {
		if err := step(); err != nil {
			return 0, err
		}
	}
	start := time.Now()
	for range o.Steps {
		if err := step(); err != nil {
			return 0, err
		}
	}
	return time.Since(start).Seconds() / float64(o.Steps), nil
}

// restore starts n sessions from snap (those it started, and why it stopped).
func restore(snap backend.Snapshot, n int) ([]*gpu.Session, error) {
	var ss []*gpu.Session
	for range n {
		r, err := snap.Restore()
		if err != nil {
			return ss, err
		}
		s, ok := r.(*gpu.Session)
		if !ok {
			r.Close()
			return ss, errors.New("gpu: not a GPU session")
		}
		ss = append(ss, s)
	}
	return ss, nil
}

// generate runs n steps of ss together, each going on from its last token and sampling as a
// sampled request does (the mode the model prices), and returns the wall seconds per step: the
// call's time over n. That holds the call's setup, each row's sampler state written once, which
// without a prompt (a request without penalties needs none) is a few small copies; timing from
// the first token instead would, on the emulator, where a step runs when it is submitted, span
// no step at all.
func generate(ctx context.Context, g *gpu.GPU, ss []*gpu.Session, n int) (float64, error) {
	seed := uint64(1)
	params := sample.Params{Temperature: 0.7, TopK: 20, TopP: 0.8, Seed: &seed}
	rows := make([]backend.GenRow, len(ss))
	for i, s := range ss {
		rows[i] = backend.GenRow{Session: s, Params: params, Generated: []int{s.NextToken()}, Max: n - 1}
	}
	start := time.Now()
	if _, err := g.ContinueRows(ctx, rows); err != nil {
		return 0, err
	}
	return time.Since(start).Seconds() / float64(n), nil
}

// profiled runs run with the executor of ss's step (a session's own for one, the multi-row
// plan's for more) in its profiling mode, and returns its dispatches' seconds per step.
func profiled(g *gpu.GPU, ss []*gpu.Session, run func() error) (float64, error) {
	start, stop := ss[0].StartProfile, ss[0].StopProfile
	if R := len(ss); R > 1 {
		start = func() error { return g.StartRowsProfile(R) }
		stop = func() []exec.Timing { return g.StopRowsProfile(R) }
	}
	if err := start(); err != nil {
		return 0, err
	}
	err := run()
	timings := stop()
	if err != nil {
		return 0, err
	}
	return perStep(timings, decode.ModeSample)
}

// perStep is the mean over the profiled steps in mode of their dispatches' seconds summed.
func perStep(timings []exec.Timing, mode string) (float64, error) {
	var sum float64
	steps := map[int]bool{}
	for _, t := range timings {
		if t.Mode == mode {
			sum += t.Seconds
			steps[t.Step] = true
		}
	}
	if len(steps) == 0 {
		return 0, fmt.Errorf("profile: no step ran in mode %s", mode)
	}
	return sum / float64(len(steps)), nil
}

// Calibration is the shapes as a calibration of their chip (decode.Calibration) against m, the
// model they were compared with, for the checkpoint named model.
func (r *Rows) Calibration(m *decode.GroupModel, model string) *decode.Calibration {
	points := make([]decode.CalibrationPoint, len(r.Shapes))
	for i, s := range r.Shapes {
		points[i] = decode.CalibrationPoint{Rows: s.Rows, Context: s.Context, StepS: s.StepS, ModeledS: s.ModeledS,
			VerifyS: s.VerifyS, VerifyModeledS: s.VerifyModeledS}
	}
	return decode.NewCalibration(m, r.Device, model, points)
}

// Print writes the shapes as `lily bench --profile --rows --output text` shows them.
func (r *Rows) Print(w io.Writer) {
	fmt.Fprintf(w, "decode step of 1 to N sequences (one row each) on %s against the %s model, %d-bit KV; mean of %d steps (step: wall time as generation runs it; kernels: each dispatch alone, %s time)\n",
		r.Device, r.Chip, r.KVBits, r.Steps, r.KernelTiming)
	fmt.Fprintf(w, "%4s %8s %12s %12s %12s %8s %8s %9s %12s %10s\n", "rows", "context", "step ms", "kernels ms", "modeled ms", "ratio", "vs 1", "mod. vs 1", "verify ms", "verify/1")
	for _, s := range r.Shapes {
		fmt.Fprintf(w, "%4d %8d %12.4f %12.4f %12.4f %8.4g %8.3f %9.3f %12.4f %10.3f\n", s.Rows, s.Context, 1e3*s.StepS, 1e3*s.KernelsS, 1e3*s.ModeledS, s.Ratio, s.VsOne, s.ModeledVsOne,
			1e3*s.VerifyS, s.VerifyVsOne)
	}
	if r.CalibrationFile != "" {
		fmt.Fprintf(w, "calibration written to %s\n", r.CalibrationFile)
	}
}
