// Package cases is the registry of Lily's kernel cases: each case of a Metal kernel — its name,
// the kernel instances it dispatches, its shape, its input generator, its Go reference and its
// tolerance per device kind — is written once here and run by both
//
//   - go test (Linux): every case on the MSL emulator in every thread order (emu.Orders) and under
//     AddressSanitizer (cases_linux_test.go), and
//   - `lily doctor --selftest` (metal/selftest): every case once on the device — Metal on a Mac,
//     the emulator on Linux — through metal/exec, so the code path is the one production runs.
//
// A case builds a small plan.Plan through its Ctx (inputs, outputs pre-filled with 0xFF so an
// unwritten element reads as NaN, the kernels' Call constructors), runs it with exec and compares
// the outputs with the kernel's Go reference (metal/kernels). A comparison records its error and
// the worst element; structural failures (an inexact copy, a wrong id, a NaN) are the case's
// error. The result names the case, its kernels, its shape, the error, the tolerance and the worst
// element.
//
// Instances: Case.Kernels spells each kernel as its [[host_name]] (or kernel function) does,
// with "+suffix" for a variant of the same instance (a function-constant mode, e.g. "qmv_q4+add").
// Run records the pipelines the case made; the go test checks they are exactly the declared
// instances, and the selftest's coverage result fails for a shipped instance no case runs.
package cases

import (
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/lilyformac/lily/metal/exec"
)

// Kind is a kind of device, which picks a case's tolerance.
type Kind string

const (
	Emu   Kind = "emu"   // the MSL emulator: IEEE float32, libm
	Metal Kind = "metal" // Metal: MathRelaxed files may use fast math (kernels/compile.go)
)

// Tol is a case's tolerance per device kind: the largest error that passes.
type Tol struct {
	Emu   float64 // the emulator's (the kernel tests' documented bound)
	Metal float64 // Metal's: the emulator's loosened where fast math may legitimately differ
}

// For is the tolerance on a device of kind k.
func (t Tol) For(k Kind) float64 {
	if k == Emu {
		return t.Emu
	}
	return t.Metal
}

// Case is one kernel case.
type Case struct {
	Name    string   // unique: "<kernel>/<shape tag>"
	Kernels []string // the instances it dispatches ([[host_name]] or kernel name, "+suffix" for a variant)
	Shape   string   // what it runs on, in words
	Tol     Tol
	// Heavy marks a production-sized case (or one of hundreds of steps): go test runs it in one
	// thread order and not under ASan (as the kernel tests ran their production shapes); the
	// selftest runs it like any other.
	Heavy bool
	// Tensor marks a case of a Metal 4 tensor-op kernel: the emulator runs it under several
	// random cooperative-tensor layouts; a device without tensor ops cannot run it, and the
	// selftest says so instead of failing it.
	Tensor bool
	// Run builds the case's plan through c, runs it and compares the outputs (c.Rel, c.Bits, …);
	// it returns an error for a failure that no error measure describes.
	Run func(c *Ctx) error
}

// Instances are the case's kernel instances (Kernels without their "+suffix").
func (c Case) Instances() []string {
	var out []string
	for _, k := range c.Kernels {
		k, _, _ = strings.Cut(k, "+")
		if !slices.Contains(out, k) {
			out = append(out, k)
		}
	}
	return out
}

// Options configure one run of a case.
type Options struct {
	Kind Kind   // which tolerance applies
	Seed uint64 // with the case's name, seeds its inputs (0: 1)
	// Corrupt, for tests of the runners, alters each output buffer (by name) after each step,
	// before the comparison.
	Corrupt func(c Case, buffer string, out []byte)
}

// Result is the outcome of one run of a case.
type Result struct {
	Case      string
	Kernel    string // the case's Kernels, space-separated
	Shape     string
	Error     float64 // the worst error over the case's comparisons (NaN: unwritten or poisoned output)
	Tolerance float64
	Worst     string // the element the worst error was measured at: "out[17] = 1.25, want 1.5"
	Pass      bool   // ran without Err and Error <= Tolerance
	Err       error  // the case could not run, or failed a structural comparison
	Ran       []string
	Duration  time.Duration
}

// Failure says why a result did not pass ("" when it passed): the kernel, the shape, the worst
// element and its error.
func (r Result) Failure() string {
	if r.Pass {
		return ""
	}
	where := ""
	if r.Worst != "" {
		where = " at " + r.Worst
	}
	msg := fmt.Sprintf("%s (kernel %s, shape %s): error %.3g, tolerance %.3g%s", r.Case, r.Kernel, r.Shape, r.Error, r.Tolerance, where)
	if r.Err != nil {
		msg += ": " + r.Err.Error()
	}
	return msg
}

// Run runs case c once on dev. A panic in the case (a reference given a bad shape) is its error.
func Run(c Case, dev exec.Device, o Options) (r Result) {
	seed := o.Seed
	if seed == 0 {
		seed = 1
	}
	h := fnv.New64a()
	h.Write([]byte(c.Name))
	rec := &recorder{Device: dev}
	ctx := &Ctx{Kind: o.Kind, R: rand.New(rand.NewPCG(seed, h.Sum64())), dev: rec, Builder: NewBuilder(), c: c, tol: c.Tol.For(o.Kind), corrupt: o.Corrupt}
	r = Result{Case: c.Name, Kernel: strings.Join(c.Kernels, " "), Shape: c.Shape, Tolerance: c.Tol.For(o.Kind)}
	start := time.Now()
	defer func() {
		if p := recover(); p != nil {
			r.Err = fmt.Errorf("panic: %v", p)
		}
		ctx.close()
		r.Error, r.Worst, r.Ran, r.Duration = ctx.err, ctx.worst, rec.ran, time.Since(start)
		r.Pass = r.Err == nil && r.Error <= r.Tolerance // NaN fails
	}()
	r.Err = c.Run(ctx)
	return r
}

// recorder notes the kernels whose pipelines a case makes.
type recorder struct {
	exec.Device
	ran []string
}

func (r *recorder) Pipeline(kernel string, constants map[int]any) (exec.Pipeline, error) {
	if !slices.Contains(r.ran, kernel) {
		r.ran = append(r.ran, kernel)
	}
	return r.Device.Pipeline(kernel, constants)
}

// All is every registered case, family by family.
func All() []Case {
	var out []Case
	for _, f := range families {
		out = append(out, f()...)
	}
	return out
}

// families are the migrated kernel families' case lists, simplest first.
var families = []func() []Case{embedCases, rmsnormCases, convCases, qmvCases, argmaxCases, qmmCases, qmmTensorCases, moeTensorCases, gdnCases, attnCases, ropeCases, logprobCases, sampleCases, moeCases, vitCases, vitTensorCases, vitAttnCases}
