package report

import (
	"context"
	"fmt"
	"io"
	"runtime"
	"time"

	"github.com/lilyformac/lily/engine/lifecycle"
	"github.com/lilyformac/lily/engine/lifecycle/syscheck"
	"github.com/lilyformac/lily/internal/wiredlimit"
	"github.com/lilyformac/lily/metal/cases"
	"github.com/lilyformac/lily/metal/exec"
	"github.com/lilyformac/lily/metal/gpu"
	"github.com/lilyformac/lily/metal/plan"
	"github.com/lilyformac/lily/metal/profile"
	"github.com/lilyformac/lily/metal/selftest"
)

// Gatherer gathers a report into Path. What needs the command's backends and demo checkpoint
// comes in as functions: the selftest's run and a model's profile (RunSelftest and Profile are
// required).
type Gatherer struct {
	Path   string
	Out    io.Writer       // progress lines; nil: none
	Model  string          // --model: the checkpoint profiled ("": the pinned pull, where it is complete)
	Checks syscheck.Config // lily doctor's system checks
	Only   []string        // the selftest's cases (selftest.Options.Only); nil: all

	// RunSelftest runs the selftest on dev with opts, the end-to-end check included.
	RunSelftest func(ctx context.Context, dev exec.Device, opts selftest.Options) []selftest.Result
	GPU         selftest.GPUBackend           // the end-to-end check's GPU backend
	Progress    func(selftest.Result)         // called after each selftest result
	Wrap        func(exec.Device) exec.Device // wraps the selftest's device (tests inject failures); nil leaves it
	// Profile profiles model ("demo": the demo checkpoint) on the backend named, its KV cache in
	// kvBits bits.
	Profile func(ctx context.Context, backend, model string, kvBits int, o profile.Options) (*profile.Output, error)
}

// Gather gathers the report phase by phase, writing Path after each, the last time with
// Complete set. It fails only when the file cannot be written; what could not be gathered is in
// the report's Errors.
func (g *Gatherer) Gather(ctx context.Context) (*Report, error) {
	r := &Report{SchemaVersion: Schema, Created: time.Now().UTC().Format(time.RFC3339), Lily: CurrentBuild(),
		Pipelines: []Pipeline{}, Profiles: []ModelProfile{}, Errors: []string{}}
	r.system(ctx, g.Checks)
	if err := g.save(r); err != nil {
		return r, err
	}
	fmt.Fprintf(g.out(), "writing the report to %s\n", g.Path)
	g.selftest(ctx, r)
	if err := g.save(r); err != nil {
		return r, err
	}
	if err := g.profiles(ctx, r); err != nil {
		return r, err
	}
	r.complete()
	return r, g.save(r)
}

// complete is the last phase before the last write: the report is whole, and ok when the
// selftest passed and nothing failed to be gathered.
func (r *Report) complete() {
	r.Complete, r.OK = true, r.Selftest.OK && r.Selftest.Error == "" && len(r.Errors) == 0
}

func (g *Gatherer) out() io.Writer {
	if g.Out == nil {
		return io.Discard
	}
	return g.Out
}

func (g *Gatherer) save(r *Report) error {
	if err := r.Save(g.Path); err != nil {
		return fmt.Errorf("report: %w", err)
	}
	return nil
}

// fail notes what could not be gathered.
func (r *Report) fail(format string, a ...any) {
	r.Errors = append(r.Errors, fmt.Sprintf(format, a...))
}

// system is the first phase: the machine, and lily doctor's checks of it.
func (r *Report) system(ctx context.Context, cfg syscheck.Config) {
	sys := syscheck.Probe()
	r.System = System{OS: sys.OS, CPUs: runtime.NumCPU(), MemoryBytes: sys.MemBytes, MemorySource: sys.MemSource}
	var macOSBuild string
	r.GPU, macOSBuild = probeGPU()
	if sys.OS == "darwin" {
		version, chip := sys.OSVersion, sys.Chip
		if macOSBuild != "" {
			version = macOSBuild
		}
		r.System.MacOS, r.System.Chip = &version, &chip
		current, suggested := wiredlimit.CurrentMB(), wiredlimit.SuggestedMB(sys.MemBytes)
		r.System.WiredLimitMB, r.System.SuggestedWiredLimitMB = &current, &suggested
	}
	r.Checks = syscheck.Run(ctx, cfg)
}

// selftest is the second phase: the selftest, with every pipeline's limits and the device's
// residency.
func (g *Gatherer) selftest(ctx context.Context, r *Report) {
	r.Selftest = Selftest{Only: g.Only, Checks: []Check{}}
	start := time.Now()
	defer func() { r.Selftest.Seconds = time.Since(start).Round(time.Millisecond).Seconds() }()
	dev, name, err := selftest.DefaultDevice()
	if err != nil {
		r.Selftest.Error = fmt.Sprintf("device: %v", err)
		r.fail("selftest: device: %v", err)
		return
	}
	r.Selftest.Device, r.Selftest.Emulated, r.Selftest.Kind = name, name != "metal", string(cases.Metal)
	if name == "emu" {
		r.Selftest.Kind = string(cases.Emu)
	}
	fmt.Fprintf(g.out(), "selftest on %s\n", name)
	run := dev
	if g.Wrap != nil {
		run = g.Wrap(run)
	}
	rec := &PipelineRecorder{Device: run}
	opts := selftest.Options{Only: g.Only, GPU: g.GPU, Kind: cases.Kind(r.Selftest.Kind), Progress: g.Progress}
	r.Selftest.add(g.RunSelftest(ctx, rec, opts))
	r.device(dev, rec)
}

// device notes what the selftest's device made and keeps: every pipeline's limits and the
// residency. It then closes the device.
func (r *Report) device(dev exec.Device, rec *PipelineRecorder) {
	r.Pipelines = rec.List()
	r.Residency = ResidencyOf(dev)
	if c, ok := dev.(exec.Closer); ok { // exec.MetalDevice: free it before the profiles load models
		c.Close()
	}
}

// add records the selftest's results.
func (s *Selftest) add(results []selftest.Result) {
	for _, res := range results {
		c := CheckOf(res)
		s.Checks = append(s.Checks, c)
		switch res.Case {
		case "e2e":
			s.E2E = &c
		case "coverage":
			s.Coverage = &c
		}
	}
	s.Failed = selftest.Failed(results)
	s.Passed = len(results) - s.Failed
	s.OK = s.Failed == 0
}

// profiles is the last phase: the per-kernel profile of the demo model, then of the installed
// model where one is, the report written after each.
func (g *Gatherer) profiles(ctx context.Context, r *Report) error {
	backend, chip := "emu", plan.Chip{}
	device := "emu (the MSL emulator on the CPU)"
	if runtime.GOOS == "darwin" {
		backend = "metal"
		if r.GPU != nil && r.GPU.Name != "" {
			device = r.GPU.Name
			chip, _ = plan.ChipNamed(r.GPU.Name)
		}
	}
	for _, p := range g.profiled(backend) {
		p.Backend = backend
		if p.Skipped == "" {
			g.profile(ctx, r, &p, chip, device)
		}
		r.Profiles = append(r.Profiles, p)
		if p.Skipped == "" {
			if err := g.save(r); err != nil {
				return err
			}
		}
	}
	return nil
}

// profiled is the models the report profiles: the demo model, and the installed one (--model,
// else the pinned pull where it is complete) or why not.
func (g *Gatherer) profiled(backend string) []ModelProfile {
	profiles := []ModelProfile{{Model: "demo"}}
	installed, err := lifecycle.ResolveModelDir(g.Model)
	switch {
	case err != nil:
		return append(profiles, ModelProfile{Model: lifecycle.ModelDir(lifecycle.DefaultRepo), Skipped: err.Error()})
	case backend == "emu" && g.Model == "":
		return append(profiles, ModelProfile{Model: installed, Skipped: "the emulator profiles an installed model only when --model names it (the 35B checkpoint would take hours)"})
	}
	return append(profiles, ModelProfile{Model: installed})
}

// profile profiles p.Model on p.Backend: a few positions on the emulator, a long context on
// Metal with the KV cache's bits as serve would pick them.
func (g *Gatherer) profile(ctx context.Context, r *Report, p *ModelProfile, chip plan.Chip, device string) {
	p.Context, p.Prefill, p.Steps = 4, 8, 1
	kvBits, warmup := 16, false
	if p.Backend == "metal" {
		p.Context, p.Prefill, p.Steps, warmup = 1024, 512, profile.DefaultSteps, true
		kvBits = gpu.DefaultsFor(int64(r.System.MemoryBytes)).KVBits
	}
	fmt.Fprintf(g.out(), "profiling %s on %s: a decode step after %d tokens, a prefill chunk of %d\n", p.Model, p.Backend, p.Context, p.Prefill)
	start := time.Now()
	o := profile.Options{Context: p.Context, Prefill: p.Prefill, Steps: p.Steps, Warmup: warmup, Chip: chip, Device: device}
	if out, err := g.Profile(ctx, p.Backend, p.Model, kvBits, o); err != nil {
		p.Error = err.Error()
		r.fail("profile %s: %s", p.Model, p.Error)
	} else {
		p.Decode, p.PrefillCk = out.Profile, out.PrefillProfile
	}
	p.Seconds = time.Since(start).Round(time.Millisecond).Seconds()
}
