// Package selftest checks Lily's Metal kernels on a device against their Go references, and the
// whole GPU decode step against engine/cpu on a tiny checkpoint. It is device-agnostic: `lily
// doctor --selftest` runs it on the real GPU (macOS), CI runs it on the MSL emulator (Linux).
//
// The kernel cases are metal/cases' registry: Run runs every case once on the device, with the
// tolerance of its kind (cases.Emu on the emulator, cases.Metal elsewhere). Each case builds a
// one- or few-dispatch plan.Plan, fills its inputs with seeded random data, runs it through
// metal/exec and compares the outputs with the kernel's Go reference (metal/kernels); output
// buffers are pre-filled with 0xFF, so an element the kernel does not write reads as NaN and fails
// the case. The selftest has no kernel checks of its own.
//
// DefaultDevice compiles every kernel file the product ships, and Run fails a "coverage" result
// naming each kernel instance ([[host_name]] or kernel function) that no case ran.
//
// Tolerances are the kernels' emulator bounds (IEEE float32, libm), loosened on Metal where fast
// math (approximate exp/rsqrt/sin/cos, FMA contraction, reassociation) may legitimately differ;
// each case documents its own.
package selftest

import (
	"context"
	"fmt"
	"maps"
	"math"
	"strings"
	"time"

	"github.com/lilyformac/lily/engine/backend"
	"github.com/lilyformac/lily/engine/model"
	"github.com/lilyformac/lily/metal/cases"
	"github.com/lilyformac/lily/metal/exec"
	"github.com/lilyformac/lily/metal/kernels"
)

// KernelFiles are the kernel files DefaultDevice compiles: every one the product ships
// (kernels.Files), so a compile error in any fails the selftest, and the "coverage" result fails
// when no case runs one of a file's kernel instances.
var KernelFiles = kernels.Files()

// Sources maps each file of KernelFiles to its text (the argument of exec.NewMetalDevice).
func Sources() map[string]string {
	m := map[string]string{}
	for _, n := range KernelFiles {
		m[n] = kernels.Source(n)
	}
	return m
}

// Result is the outcome of one kernel case, of the coverage check or of the end-to-end check.
type Result struct {
	Case   string // the case's name, "coverage" or "e2e" (Options.Only selects by it)
	Kernel string // the kernel instances a case runs; "coverage" or "e2e"
	Shape  string // what it ran on
	Pass   bool   // ran without error and WorstError <= Tolerance, or was skipped
	// Skipped says why a case did not run: a tensor-op case on a device without tensor ops
	// (exec.TensorOps). It passes, and its kernels are not asked of the coverage check.
	Skipped    string
	WorstError float64       // the case's error measure (each case defines it)
	Tolerance  float64       // the largest WorstError that passes
	Worst      string        // where a case measured WorstError: the output element, its value and the reference's
	Duration   time.Duration // building the plan, the inputs, the run and the comparison
	Err        error         // the case could not run, or failed a structural test (a wrong id, an inexact copy)
}

// GPUBackend makes the GPU decode backend for a checkpoint (gpu.NewMetal or gpu.NewEmu).
type GPUBackend func(w *model.Weights) (OwnedBackend, error)

// OwnedBackend is a backend its caller gives back: Close frees its device memory (gpu.GPU: its
// weights, and the Metal device it made).
type OwnedBackend interface {
	backend.Backend
	Close()
}

// Options configure Run.
type Options struct {
	Seed uint64 // random inputs (0: 1)
	// Kind picks the cases' tolerances ("": cases.Emu on an exec.EmuDevice, else cases.Metal).
	Kind cases.Kind
	// Only, when set, names the cases to run (Result.Case, or a case's kernel family:
	// the part of its name before "/"); the end-to-end check is "e2e".
	Only []string
	// Weights and GPU enable the end-to-end check: GPU(Weights) against engine/cpu on Weights.
	Weights *model.Weights
	GPU     GPUBackend
	E2E     E2EOptions
	// Progress, when set, is called after each result.
	Progress func(Result)

	// corrupt, for tests, alters a case's output buffers after each step, before the comparison.
	corrupt func(name string, out []byte)
}

// Names lists the kernel cases Run performs, in order. After them come "coverage" (every kernel
// instance of KernelFiles ran, when all run) and the end-to-end check, "e2e".
func Names() []string {
	var out []string
	for _, c := range cases.All() {
		out = append(out, c.Name)
	}
	return out
}

// Run performs every kernel case on dev, then the end-to-end check when opts has Weights and GPU.
// A cancelled ctx stops before the next case.
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
	ran, exempt := map[string]bool{}, maps.Clone(notCovered)
	tensor, noTensor := exec.TensorOps(dev)
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
		if c.Tensor && !tensor {
			emit(Result{Case: c.Name, Kernel: strings.Join(c.Kernels, " "), Shape: c.Shape, Tolerance: c.Tol.For(kind), WorstError: math.NaN(), Pass: true, Skipped: noTensor})
			for _, k := range c.Instances() {
				exempt[k] = "skipped: " + noTensor
			}
			continue
		}
		r := cases.Run(c, dev, cases.Options{Kind: kind, Seed: seed, Corrupt: corrupt})
		for _, k := range r.Ran {
			ran[k] = true
		}
		emit(caseResult(r))
	}
	if len(opts.Only) == 0 && ctx.Err() == nil {
		err := cases.Coverage(Sources(), ran, exempt)
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

// ---- comparison (the end-to-end check) ------------------------------------------------------

// absErr is max|got-want|, NaN when got holds a NaN.
var absErr = kernels.AbsErr

// nanMax is max that propagates NaN (a NaN error must fail the check).
func nanMax(a, b float64) float64 {
	if math.IsNaN(a) || math.IsNaN(b) {
		return math.NaN()
	}
	return max(a, b)
}
