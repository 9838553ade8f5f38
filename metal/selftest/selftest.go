// Package selftest checks Lily's Metal kernels on a device against their Go references, and the
// whole GPU decode step against engine/cpu on a tiny checkpoint. It is device-agnostic: `lily
// doctor --selftest` runs it on the real GPU (macOS), CI runs it on the MSL emulator (Linux).
//
// The kernel cases are metal/cases' registry: Run runs every case once on the device, with the
// tolerance of its kind (cases.Emu on the emulator, cases.Metal elsewhere). The kernel families
// not yet moved there keep a hand-written check below (checks.go).
//
// Each kernel check builds a one- or few-dispatch plan.Plan at a moderate shape (production widths
// where cheap), fills the inputs with seeded random data through exec.Executor.Bytes, runs one
// Step and compares the outputs with the kernel's Go reference (metal/kernels). Output buffers are
// pre-filled with 0xFF, so an element the kernel does not write reads as NaN and fails the check.
//
// DefaultDevice compiles every kernel file the product ships, and Run fails a "coverage" result
// naming each kernel instance ([[host_name]] or kernel function) that no case or check ran.
//
// Tolerances are the kernels' own test tolerances (measured on the emulator: IEEE float32, libm),
// loosened where Metal's fast math (approximate exp/rsqrt/sin/cos, FMA contraction,
// reassociation) may legitimately differ; each check documents its own.
package selftest

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/lilyformac/lily/engine/backend"
	"github.com/lilyformac/lily/engine/model"
	"github.com/lilyformac/lily/metal/cases"
	"github.com/lilyformac/lily/metal/exec"
	"github.com/lilyformac/lily/metal/kernels"
)

// KernelFiles are the kernel files DefaultDevice compiles: every one the product ships
// (kernels.Files), so a compile error in any fails the selftest, and the "coverage" check fails
// when no check runs a file's kernels.
var KernelFiles = kernels.Files()

// Sources maps each file of KernelFiles to its text (the argument of exec.NewMetalDevice).
func Sources() map[string]string {
	m := map[string]string{}
	for _, n := range KernelFiles {
		m[n] = kernels.Source(n)
	}
	return m
}

// Result is the outcome of one check.
type Result struct {
	Case       string        // the case's or check's name (Options.Only selects by it)
	Kernel     string        // the kernel instances a case runs; a check's name
	Shape      string        // what it ran on
	Pass       bool          // ran without error and WorstError <= Tolerance
	WorstError float64       // the check's error measure (each check defines it)
	Tolerance  float64       // the largest WorstError that passes
	Worst      string        // where a case measured WorstError: the output element, its value and the reference's
	Duration   time.Duration // building the plan, the inputs, the run and the comparison
	Err        error         // the check could not run, or failed a structural test (unwritten output, wrong id)
}

// GPUBackend makes the GPU decode backend for a checkpoint (gpu.NewMetal or gpu.NewEmu).
type GPUBackend func(w *model.Weights) (backend.Backend, error)

// Options configure Run.
type Options struct {
	Seed uint64 // random inputs (0: 1)
	// Kind picks the cases' tolerances ("": cases.Emu on an exec.EmuDevice, else cases.Metal).
	Kind cases.Kind
	// Only, when set, names the cases and checks to run (Result.Case, or a case's kernel family:
	// the part of its name before "/"); the end-to-end check is "e2e".
	Only []string
	// Weights and GPU enable the end-to-end check: GPU(Weights) against engine/cpu on Weights.
	Weights *model.Weights
	GPU     GPUBackend
	E2E     E2EOptions
	// Progress, when set, is called after each check.
	Progress func(Result)

	// corrupt, for tests, alters a check's output buffers after the step, before the comparison.
	corrupt func(check string, out []byte)
}

// check is one kernel check: run returns the worst error and an error for structural failures.
type check struct {
	name, shape string
	tol         float64
	run         func(c *env) (float64, error)
}

// env is what a check runs with.
type env struct {
	dev     exec.Device
	r       *rand.Rand
	name    string
	corrupt func(string, []byte)
}

// Names lists the kernel cases and checks Run performs, in order. After them come "coverage"
// (every kernel instance of KernelFiles ran, when all run) and the end-to-end check, "e2e".
func Names() []string {
	var out []string
	for _, c := range cases.All() {
		out = append(out, c.Name)
	}
	for _, c := range checks() {
		out = append(out, c.name)
	}
	return out
}

// Run performs every kernel check on dev, then the end-to-end check when opts has Weights and GPU.
// A cancelled ctx stops before the next check.
func Run(ctx context.Context, dev exec.Device, opts Options) []Result {
	seed := opts.Seed
	if seed == 0 {
		seed = 1
	}
	want := func(name string) bool { return selected(opts.Only, name) }
	kind := opts.Kind
	if kind == "" {
		kind = kindOf(dev)
	}
	var out []Result
	emit := func(r Result) {
		out = append(out, r)
		if opts.Progress != nil {
			opts.Progress(r)
		}
	}
	rec := &recorder{Device: dev, ran: map[string]bool{}}
	var corrupt func(cases.Case, string, []byte)
	if opts.corrupt != nil {
		corrupt = func(c cases.Case, _ string, out []byte) { opts.corrupt(c.Name, out) }
	}
	for _, c := range cases.All() {
		if !want(c.Name) {
			continue
		}
		if err := ctx.Err(); err != nil {
			emit(Result{Case: c.Name, Kernel: strings.Join(c.Kernels, " "), Shape: c.Shape, Tolerance: c.Tol.For(kind), WorstError: math.NaN(), Err: err})
			continue
		}
		r := cases.Run(c, dev, cases.Options{Kind: kind, Seed: seed, Corrupt: corrupt})
		for _, k := range r.Ran {
			rec.ran[k] = true
		}
		emit(caseResult(r))
	}
	for i, c := range checks() {
		if !want(c.name) {
			continue
		}
		if err := ctx.Err(); err != nil {
			emit(Result{Case: c.name, Kernel: c.name, Shape: c.shape, Tolerance: c.tol, Err: err})
			continue
		}
		e := &env{dev: rec, r: rand.New(rand.NewPCG(seed, uint64(i))), name: c.name, corrupt: opts.corrupt}
		start := time.Now()
		worst, err := runCheck(c, e)
		r := Result{Case: c.name, Kernel: c.name, Shape: c.shape, WorstError: worst, Tolerance: c.tol, Duration: time.Since(start), Err: err}
		r.Pass = err == nil && worst <= c.tol // NaN fails
		emit(r)
	}
	if len(opts.Only) == 0 && ctx.Err() == nil {
		err := cases.Coverage(Sources(), rec.ran, notCovered)
		emit(Result{Case: "coverage", Kernel: "coverage", Shape: fmt.Sprintf("every kernel instance of %d kernel files", len(KernelFiles)), Pass: err == nil, Err: err})
	}
	if opts.Weights != nil && opts.GPU != nil && want("e2e") {
		if err := ctx.Err(); err != nil {
			emit(Result{Case: "e2e", Kernel: "e2e", Err: err})
		} else {
			emit(EndToEnd(ctx, opts.Weights, opts.GPU, opts.E2E))
		}
	}
	return out
}

// recorder notes the kernels whose pipelines the checks make.
type recorder struct {
	exec.Device
	ran map[string]bool
}

func (r *recorder) Pipeline(kernel string, constants map[int]any) (exec.Pipeline, error) {
	r.ran[kernel] = true
	return r.Device.Pipeline(kernel, constants)
}

// runCheck turns a panic in a check (a reference given a bad shape) into its error.
func runCheck(c check, e *env) (worst float64, err error) {
	defer func() {
		if p := recover(); p != nil {
			worst, err = math.NaN(), fmt.Errorf("panic: %v", p)
		}
	}()
	return c.run(e)
}

// Failed counts the results that did not pass.
func Failed(rs []Result) int {
	n := 0
	for _, r := range rs {
		if !r.Pass {
			n++
		}
	}
	return n
}

// ---- plan building ----------------------------------------------------------------------------

// pb builds a small plan with its input data (metal/cases' builder).
type pb struct{ *cases.Builder }

func newPB() *pb { return &pb{cases.NewBuilder()} }

// run makes the executor, uploads the data, runs steps steps (before(i) first, when set) and
// applies the test corruption to the outputs.
func (b *pb) run(e *env, steps int, before func(x *exec.Executor, step int), after func(x *exec.Executor, step int) error) (*exec.Executor, error) {
	x, err := exec.New(e.dev, &b.Plan)
	if err != nil {
		return nil, err
	}
	b.Upload(x)
	for s := range steps {
		if before != nil {
			before(x, s)
		}
		if err := x.Step(); err != nil {
			return nil, err
		}
		if e.corrupt != nil {
			for _, o := range b.Outputs {
				e.corrupt(e.name, x.Bytes(o))
			}
		}
		if after != nil {
			if err := after(x, s); err != nil {
				return nil, err
			}
		}
	}
	return x, nil
}

// ---- encoding and comparison ------------------------------------------------------------------

// The checks' encoding (metal/cases').
var (
	enc  = cases.Encode
	f32s = cases.F32s
	u32s = cases.U32s
)

// absErr is max|got-want|, NaN when got holds a NaN.
func absErr(got, want []float32) float64 {
	var d float64
	for i := range want {
		if math.IsNaN(float64(got[i])) {
			return math.NaN()
		}
		d = max(d, math.Abs(float64(got[i])-float64(want[i])))
	}
	return d
}

// nanMax is max that propagates NaN (a NaN error must fail the check).
func nanMax(a, b float64) float64 {
	if math.IsNaN(a) || math.IsNaN(b) {
		return math.NaN()
	}
	return max(a, b)
}

// The kernel checks' random inputs and error measure.
var (
	randFloats = kernels.RandFloats
	relErr     = kernels.RelErr
)
