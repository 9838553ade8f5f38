// Package selftest checks Lily's Metal kernels on a device against their Go references, and the
// whole GPU decode step against engine/cpu on a tiny checkpoint. It is device-agnostic: `lily
// doctor --selftest` runs it on the real GPU (macOS), CI runs it on the MSL emulator (Linux).
//
// Each kernel check builds a one- or few-dispatch plan.Plan at a moderate shape (production widths
// where cheap), fills the inputs with seeded random data through exec.Executor.Bytes, runs one
// Step and compares the outputs with the kernel's Go reference (metal/kernels). Output buffers are
// pre-filled with 0xFF, so an element the kernel does not write reads as NaN and fails the check.
//
// DefaultDevice compiles every kernel file the product ships, and Run fails a "coverage" result
// naming any file none of whose kernels a check ran.
//
// Tolerances are the kernels' own test tolerances (measured on the emulator: IEEE float32, libm),
// loosened where Metal's fast math (approximate exp/rsqrt/sin/cos, FMA contraction,
// reassociation) may legitimately differ; each check documents its own.
package selftest

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/lilyformac/lily/engine/backend"
	"github.com/lilyformac/lily/engine/model"
	"github.com/lilyformac/lily/metal/exec"
	"github.com/lilyformac/lily/metal/kernels"
	"github.com/lilyformac/lily/metal/plan"
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
	Kernel     string        // the check's name: the kernel(s) it runs, and a mode
	Shape      string        // what it ran on
	Pass       bool          // ran without error and WorstError <= Tolerance
	WorstError float64       // the check's error measure (each check defines it)
	Tolerance  float64       // the largest WorstError that passes
	Duration   time.Duration // building the plan, the inputs, the run and the comparison
	Err        error         // the check could not run, or failed a structural test (unwritten output, wrong id)
}

// GPUBackend makes the GPU decode backend for a checkpoint (gpu.NewMetal or gpu.NewEmu).
type GPUBackend func(w *model.Weights) (backend.Backend, error)

// Options configure Run.
type Options struct {
	Seed uint64 // random inputs (0: 1)
	// Only, when set, names the checks to run (Result.Kernel); the end-to-end check is "e2e".
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

// Names lists the kernel checks Run performs, in order. After them come "coverage" (every file of
// KernelFiles had a kernel run, when all checks run) and the end-to-end check, "e2e".
func Names() []string {
	var out []string
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
	want := func(name string) bool {
		if len(opts.Only) == 0 {
			return true
		}
		for _, n := range opts.Only {
			if n == name {
				return true
			}
		}
		return false
	}
	var out []Result
	emit := func(r Result) {
		out = append(out, r)
		if opts.Progress != nil {
			opts.Progress(r)
		}
	}
	rec := &recorder{Device: dev, ran: map[string]bool{}}
	for i, c := range checks() {
		if !want(c.name) {
			continue
		}
		if err := ctx.Err(); err != nil {
			emit(Result{Kernel: c.name, Shape: c.shape, Tolerance: c.tol, Err: err})
			continue
		}
		e := &env{dev: rec, r: rand.New(rand.NewPCG(seed, uint64(i))), name: c.name, corrupt: opts.corrupt}
		start := time.Now()
		worst, err := runCheck(c, e)
		r := Result{Kernel: c.name, Shape: c.shape, WorstError: worst, Tolerance: c.tol, Duration: time.Since(start), Err: err}
		r.Pass = err == nil && worst <= c.tol // NaN fails
		emit(r)
	}
	if len(opts.Only) == 0 && ctx.Err() == nil {
		err := coverage(Sources(), rec.ran)
		emit(Result{Kernel: "coverage", Shape: fmt.Sprintf("%d kernel files", len(KernelFiles)), Pass: err == nil, Err: err})
	}
	if opts.Weights != nil && opts.GPU != nil && want("e2e") {
		if err := ctx.Err(); err != nil {
			emit(Result{Kernel: "e2e", Err: err})
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

// coverage names each of files (name → source) none of whose kernels ran: a file shipped but
// checked by nothing.
func coverage(files map[string]string, ran map[string]bool) error {
	var errs []error
	for _, name := range slices.Sorted(maps.Keys(files)) {
		ks := exec.KernelNames(files[name])
		if !slices.ContainsFunc(ks, func(k string) bool { return ran[k] }) {
			errs = append(errs, fmt.Errorf("%s: compiled, but no check runs its kernels (%s)", kernels.Path(name), strings.Join(ks, ", ")))
		}
	}
	return errors.Join(errs...)
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

// pb builds a small plan with its input data.
type pb struct {
	p       plan.Plan
	data    map[int][]byte // initial contents
	outputs []int          // buffers the comparison reads (corrupted by tests)
}

func newPB() *pb { return &pb{data: map[int][]byte{}} }

// in declares a buffer holding v ([]float32, []uint32, []uint16).
func (b *pb) in(name string, v any) int {
	raw := enc(v)
	b.p.Buffers = append(b.p.Buffers, plan.Buffer{Name: name, Size: int64(max(len(raw), 4)), Kind: plan.Activations})
	i := len(b.p.Buffers) - 1
	b.data[i] = raw
	return i
}

// inout declares a buffer holding v that the kernels update (compared afterwards).
func (b *pb) inout(name string, v any) int {
	i := b.in(name, v)
	b.outputs = append(b.outputs, i)
	return i
}

// out declares an output of n bytes, pre-filled with 0xFF (NaN floats) so unwritten elements show.
func (b *pb) out(name string, n int) int {
	raw := make([]byte, n)
	for i := range raw {
		raw[i] = 0xFF
	}
	b.p.Buffers = append(b.p.Buffers, plan.Buffer{Name: name, Size: int64(n), Kind: plan.Activations})
	i := len(b.p.Buffers) - 1
	b.data[i] = raw
	b.outputs = append(b.outputs, i)
	return i
}

// qm declares a quantized matrix's three buffers.
func (b *pb) qm(name string, m qmatrix) kernels.QMatrixBuffers[int] {
	return kernels.QMatrixBuffers[int]{Words: b.in(name+".w", m.Words), Scales: b.in(name+".s", m.Scales), Biases: b.in(name+".b", m.Biases)}
}

// add appends the dispatch of a kernel call on the plan's buffers; barrier makes it wait for the
// dispatches before it.
func (b *pb) add(c kernels.Call[int], barrier bool) {
	bs := map[int]plan.Binding{}
	for idx, buf := range c.Buffers {
		bs[idx] = plan.Binding{Buffer: buf}
	}
	b.p.Dispatches = append(b.p.Dispatches, plan.Dispatch{
		Kernel: c.Kernel, Constants: c.Constants, Buffers: bs, ThreadgroupMem: c.ThreadgroupMem,
		Threadgroups: c.Threadgroups, Group: c.Group, Barrier: barrier,
	})
}

// run makes the executor, uploads the data, runs steps steps (before(i) first, when set) and
// applies the test corruption to the outputs.
func (b *pb) run(e *env, steps int, before func(x *exec.Executor, step int), after func(x *exec.Executor, step int) error) (*exec.Executor, error) {
	x, err := exec.New(e.dev, &b.p)
	if err != nil {
		return nil, err
	}
	for i, raw := range b.data {
		copy(x.Bytes(i), raw)
	}
	for s := range steps {
		if before != nil {
			before(x, s)
		}
		if err := x.Step(); err != nil {
			return nil, err
		}
		if e.corrupt != nil {
			for _, o := range b.outputs {
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

func enc(v any) []byte {
	switch s := v.(type) {
	case []byte:
		return slices.Clone(s)
	case []float32:
		out := make([]byte, 4*len(s))
		for i, f := range s {
			binary.LittleEndian.PutUint32(out[4*i:], math.Float32bits(f))
		}
		return out
	case []uint32:
		out := make([]byte, 4*len(s))
		for i, w := range s {
			binary.LittleEndian.PutUint32(out[4*i:], w)
		}
		return out
	case []uint16:
		out := make([]byte, 2*len(s))
		for i, w := range s {
			binary.LittleEndian.PutUint16(out[2*i:], w)
		}
		return out
	}
	panic(fmt.Sprintf("selftest: cannot encode %T", v))
}

func f32s(b []byte) []float32 {
	out := make([]float32, len(b)/4)
	for i := range out {
		out[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return out
}

func u32s(b []byte) []uint32 {
	out := make([]uint32, len(b)/4)
	for i := range out {
		out[i] = binary.LittleEndian.Uint32(b[4*i:])
	}
	return out
}

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
