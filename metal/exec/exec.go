// Package exec runs a plan's dispatches on a device — the MSL emulator on Linux, Metal on macOS —
// through one encoder loop, so what CI tests on the emulator is the code path Metal runs.
package exec

import (
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	"github.com/lilyformac/lily/metal/mtl"
	"github.com/lilyformac/lily/metal/plan"
)

// Device turns the executor's calls into device work.
type Device interface {
	// Alloc makes the memory of one plan buffer; Bytes is its host view (unified memory).
	Alloc(b plan.Buffer) (Memory, error)
	// Free gives back memory from Alloc (or a Wrapper's Wrap); no step may still use it.
	// Nothing relies on finalizers: GPU memory is returned here or never.
	Free(m Memory)
	// Pipeline specialises a kernel with function constants.
	Pipeline(kernel string, constants map[int]any) (Pipeline, error)
	// Begin starts encoding one step.
	Begin() (Encoder, error)
	// Encode runs f, which encodes and commits one step (Begin to Commit), in the per-thread
	// context the device needs. Metal autoreleases objects while encoding; they are drained only by
	// an autorelease pool, which belongs to an OS thread, and steps are submitted from HTTP
	// goroutines that migrate between threads: MetalDevice runs f in a pool with the goroutine
	// pinned (mtl.WithPool).
	Encode(f func())
}

// Memory is a device buffer.
type Memory interface{ Bytes() []byte }

// Wrapper is a Device that can serve existing host memory as a buffer without copying it (Metal
// over the memory-mapped checkpoint). The returned Memory starts at the page boundary below
// data; offset is where data begins inside it.
type Wrapper interface {
	Wrap(data []byte) (m Memory, offset int64, err error)
}

// Closer is a Device that holds resources until Close: a MetalDevice its command queue,
// libraries and pipelines (the emulator holds none).
type Closer interface {
	Close()
}

// TensorDevice is a Device that says whether it runs Metal 4 tensor-op kernels
// (kernels.TensorFile), and why or why not.
type TensorDevice interface {
	TensorOps() (bool, string)
}

// TensorOps asks dev whether it runs tensor-op kernels: a Device that does not say runs none.
func TensorOps(dev Device) (bool, string) {
	if t, ok := dev.(TensorDevice); ok {
		return t.TensorOps()
	}
	return false, "the device does not run tensor-op kernels"
}

// View is a Memory that begins offset bytes into another device buffer, as Wrapper returns them;
// the executor binds the underlying buffer at offset + the binding's own offset.
type View struct {
	Mem    Memory
	Offset int64
	Size   int64
}

// Bytes is the view's part of the underlying buffer.
func (v View) Bytes() []byte { return v.Mem.Bytes()[v.Offset : v.Offset+v.Size] }

// Pipeline is a device's compiled, specialised kernel.
type Pipeline interface {
	// MaxThreads is the most threads a threadgroup of the pipeline may have. Metal reports it per
	// pipeline (maxTotalThreadsPerThreadgroup), below the device's 1,024 for kernels that need
	// many registers.
	MaxThreads() int
}

// SIMDWidth is the SIMD-group width the kernels are written for (32 lanes: `partial[32]` per
// simdgroup, threadgroups of 32·simdgroups threads). Every Apple GPU reports it; New refuses a
// pipeline that reports another.
const SIMDWidth = 32

// Limited is a Pipeline that reports the rest of the limits New checks before the first
// dispatch (Metal and the emulator both do; a Pipeline without it is checked for MaxThreads only).
type Limited interface {
	// ThreadExecutionWidth is the pipeline's SIMD-group width (threadExecutionWidth).
	ThreadExecutionWidth() int
	// StaticThreadgroupMemoryLength is the threadgroup memory the kernel declares itself, in bytes
	// (staticThreadgroupMemoryLength; 0 where unknown).
	StaticThreadgroupMemoryLength() int
	// MaxThreadgroupMemoryLength is the device's limit on a threadgroup's memory, declared and
	// set per dispatch together (maxThreadgroupMemoryLength).
	MaxThreadgroupMemoryLength() int
}

// Encoder records one step's dispatches; Commit submits them without waiting, Wait waits for
// them and returns their error, Finish is Commit then Wait. Work committed on one device runs in
// commit order (one Metal command queue), so a step may read what the step committed before it
// wrote without the host waiting in between.
type Encoder interface {
	SetPipeline(p Pipeline)
	SetBuffer(m Memory, offset int64, index int)
	SetThreadgroupMemory(length, index int)
	Dispatch(threadgroups, group [3]int)
	// Barrier orders everything encoded before it before everything after it; dispatches
	// between two barriers may run concurrently.
	Barrier()
	Commit()
	Wait() error
	Finish() error
}

// Executor owns a plan's device buffers and pipelines.
type Executor struct {
	dev   Device
	p     *plan.Plan
	mem   []Memory
	pipes []Pipeline // per dispatch

	// WaitTimeout bounds Pending.Wait (0: DefaultWaitTimeout).
	WaitTimeout time.Duration
	// Mode selects the plan's mode-specific dispatches (plan.Dispatch.Modes) that steps run.
	Mode string
	// Budget bounds the modeled work of one command buffer (zero fields: DefaultBudget's): a step
	// that models more is committed as several, in order.
	Budget Budget
	hung   atomic.Pointer[error] // set when a step did not complete in time
	work   []work                // per dispatch: its modeled cost, for Budget
}

// Budget bounds what one command buffer carries, so that none runs long enough for macOS's GPU
// watchdog to end it: on a Mac driving a display, a command buffer that keeps the GPU for too
// long fails with a timeout ("impacting interactivity"), and after repeated ones the system
// ignores the process's GPU work. Apple documents no limit; it has been hit by single command
// buffers of long prefills (several seconds). A step is split between dispatches when the next
// one would take the command buffer past any bound; a dispatch is never split, and one over a
// bound gets a command buffer of its own. Decode steps stay whole; prefill chunks are split.
type Budget struct {
	Bytes      int64   // modeled DRAM bytes (plan.Dispatch.Bytes)
	FLOPs      float64 // modeled FLOPs (plan.Dispatch.FLOPs)
	Dispatches int     // dispatches, for work the model leaves out
}

// DefaultBudget keeps a command buffer's modeled work to about a quarter of a second at the peak
// rates of the slowest GPU Lily runs on, the 8-core M1 (68 GB/s, 2.6 TFLOPS in float32), so about
// half a second at the kernels' real efficiency: far below the seconds the watchdog has been seen
// to allow, and far above a decode step (a few GB and GFLOPs), which is never split. A
// 4,096-token prefill chunk of a 3B-active model (about 25 TFLOP) becomes some 40 command
// buffers, each costing microseconds of encoding. The dispatch bound, above a chunk's 522
// dispatches, only catches plans whose dispatches model no cost.
var DefaultBudget = Budget{Bytes: 17e9, FLOPs: 0.65e12, Dispatches: 1024}

type work struct {
	bytes int64
	flops float64
}

// DefaultWaitTimeout is how long Wait lets a step run before calling the GPU hung. A decode step
// takes milliseconds, but the first after loading may page the memory-mapped checkpoint in from
// disk (tens of GB, wrapped without copying).
const DefaultWaitTimeout = time.Minute

// ErrHung is wrapped by the error of a step still running after the executor's WaitTimeout, and
// by every later Submit or Wait of that executor: its command buffer may still write the
// executor's buffers, and the queue runs later steps only after it.
var ErrHung = errors.New("exec: the GPU did not complete a step in time")

// New allocates every buffer and builds every pipeline of p once.
func New(dev Device, p *plan.Plan) (*Executor, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	e := &Executor{dev: dev, p: p}
	for _, b := range p.Buffers {
		m, err := dev.Alloc(b)
		if err != nil {
			e.Close()
			return nil, fmt.Errorf("exec: buffer %s (%d bytes): %w", b.Name, b.Size, err)
		}
		e.mem = append(e.mem, m)
	}
	cache := map[string]Pipeline{}
	for i, d := range p.Dispatches {
		key := fmt.Sprint(d.Kernel, sortedConstants(d.Constants))
		pipe, ok := cache[key]
		if !ok {
			var err error
			if pipe, err = dev.Pipeline(d.Kernel, d.Constants); err != nil {
				return nil, fmt.Errorf("exec: dispatch %d (%s): %w", i, d.Kernel, err)
			}
			cache[key] = pipe
		}
		if err := fitDispatch(&d, pipe); err != nil {
			return nil, fmt.Errorf("exec: dispatch %d (%s): %w", i, d.Kernel, err)
		}
		e.pipes = append(e.pipes, pipe)
		e.work = append(e.work, work{d.Bytes(), d.FLOPs})
	}
	return e, nil
}

// Close gives every buffer back to the device. After a hang (ErrHung) the buffers are kept: the
// stuck command buffer may still write them.
func (e *Executor) Close() {
	if e.hangErr() != nil {
		return
	}
	for _, m := range e.mem {
		e.dev.Free(m)
	}
	e.mem = nil
}

// fitDispatch checks a dispatch against its pipeline's limits when the pipeline is made — the
// threadgroup's threads, the SIMD-group width and the threadgroup memory (declared plus set per
// dispatch) — where Metal would fail or misbehave only when the dispatch runs, mid-token.
func fitDispatch(d *plan.Dispatch, p Pipeline) error {
	g := [3]int{max(d.Group[0], 1), max(d.Group[1], 1), max(d.Group[2], 1)} // 0 means 1, as in Dispatch
	if n, limit := g[0]*g[1]*g[2], p.MaxThreads(); n > limit {
		return fmt.Errorf("threadgroups of %d threads %v, but this GPU runs the pipeline with at most %d per threadgroup (maxTotalThreadsPerThreadgroup): the kernel needs a smaller geometry", n, g, limit)
	}
	l, ok := p.(Limited)
	if !ok {
		return nil
	}
	if w := l.ThreadExecutionWidth(); w > 0 && w != SIMDWidth {
		return fmt.Errorf("the pipeline's SIMD-group width (threadExecutionWidth) is %d, but the kernels are written for %d", w, SIMDWidth)
	}
	dynamic := 0
	for _, n := range d.ThreadgroupMem {
		dynamic += n
	}
	static, limit := l.StaticThreadgroupMemoryLength(), l.MaxThreadgroupMemoryLength()
	if limit > 0 && static+dynamic > limit {
		return fmt.Errorf("threadgroup memory of %d bytes (%d declared by the kernel + %d set by the dispatch), but this GPU allows %d per threadgroup (maxThreadgroupMemoryLength)", static+dynamic, static, dynamic, limit)
	}
	return nil
}

func sortedConstants(c map[int]any) []any {
	keys := make([]int, 0, len(c))
	for k := range c {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	out := make([]any, 0, 2*len(keys))
	for _, k := range keys {
		out = append(out, k, c[k])
	}
	return out
}

// Bytes is the host view of plan buffer i (to upload weights, read logits).
func (e *Executor) Bytes(i int) []byte { return e.mem[i].Bytes() }

// binding resolves a plan buffer to the device buffer to bind and the offset of its first byte.
func (e *Executor) binding(i int) (Memory, int64) {
	if v, ok := e.mem[i].(View); ok {
		return v.Mem, v.Offset
	}
	return e.mem[i], 0
}

// Step encodes every dispatch of the plan in order, with its barriers, and runs them.
func (e *Executor) Step() error {
	p, err := e.Submit()
	if err != nil {
		return err
	}
	return p.Wait()
}

// Pending is a submitted step: its command buffers, in commit order (more than one when the
// step models more work than the executor's Budget).
type Pending struct {
	encs []Encoder
	x    *Executor
}

// Wait waits for the step to complete, at most the executor's WaitTimeout, and returns its error.
// On a timeout the device's wait is left running (a goroutine, and on Metal the command buffer,
// until the GPU gives up) and the executor takes no more work.
func (p Pending) Wait() error {
	if err := p.x.hangErr(); err != nil {
		return err
	}
	timeout := p.x.WaitTimeout
	if timeout <= 0 {
		timeout = DefaultWaitTimeout
	}
	done := make(chan error, 1)
	go func() { done <- p.wait() }()
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case err := <-done:
		return err
	case <-t.C:
		err := fmt.Errorf("%w: %s still running after %v; this executor takes no more work", ErrHung, p.x.describe(), timeout)
		p.x.hung.CompareAndSwap(nil, &err)
		return p.x.hangErr()
	}
}

// wait waits for every command buffer (each must be waited for once) and returns the first error,
// saying which command buffer it came from; a watchdog kill (mtl.ErrWatchdog) says so.
func (p Pending) wait() error {
	var first error
	for i, enc := range p.encs {
		if err := enc.Wait(); err != nil && first == nil {
			first = fmt.Errorf("exec: %s, command buffer %d of %d: %w", p.x.describe(), i+1, len(p.encs), err)
			if errors.Is(err, mtl.ErrWatchdog) {
				first = fmt.Errorf("%w (the GPU watchdog: the executor's Budget lets a command buffer carry too much work for this GPU)", first)
			}
		}
	}
	return first
}

// describe names the step for errors: its size and first and last kernels.
func (e *Executor) describe() string {
	ds := e.p.Dispatches
	if len(ds) == 0 {
		return "an empty step"
	}
	return fmt.Sprintf("a step of %d dispatches (%s … %s)", len(ds), ds[0].Kernel, ds[len(ds)-1].Kernel)
}

func (e *Executor) hangErr() error {
	if h := e.hung.Load(); h != nil {
		return *h
	}
	return nil
}

// Submit encodes every dispatch of the plan, as Step does, and commits them without waiting,
// inside the device's Encode. The plan is read at Submit time: changing a dispatch's bindings
// afterwards affects only later submissions.
func (e *Executor) Submit() (p Pending, err error) {
	if err := e.hangErr(); err != nil {
		return Pending{}, err
	}
	e.dev.Encode(func() { p, err = e.submit() })
	return p, err
}

func (e *Executor) submit() (Pending, error) {
	enc, err := e.dev.Begin()
	if err != nil {
		return Pending{}, err
	}
	pend := Pending{x: e}
	b := e.budget()
	var used work
	n := 0 // dispatches in enc
	barrier := false
	for i := range e.p.Dispatches {
		d := &e.p.Dispatches[i]
		if barrier = barrier || d.Barrier; !d.RunsIn(e.Mode) {
			continue // its barrier, if any, goes before the next dispatch that runs
		}
		w := e.work[i]
		if n > 0 && (n+1 > b.Dispatches || used.bytes+w.bytes > b.Bytes || used.flops+w.flops > b.FLOPs) {
			// The command buffer is full: commit it and go on in a new one. The queue runs them
			// in commit order, which orders this dispatch after everything before it.
			enc.Commit()
			pend.encs = append(pend.encs, enc)
			if enc, err = e.dev.Begin(); err != nil {
				_ = pend.wait() // what is committed still runs; its command buffers are waited for
				return Pending{}, err
			}
			used, n, barrier = work{}, 0, false
		}
		used.bytes, used.flops, n = used.bytes+w.bytes, used.flops+w.flops, n+1
		if barrier {
			enc.Barrier()
			barrier = false
		}
		enc.SetPipeline(e.pipes[i])
		for idx, b := range d.Buffers {
			m, base := e.binding(b.Buffer)
			enc.SetBuffer(m, base+b.Offset, idx)
		}
		for idx, n := range d.ThreadgroupMem {
			enc.SetThreadgroupMemory(n, idx)
		}
		enc.Dispatch(d.Threadgroups, d.Group)
	}
	enc.Commit()
	pend.encs = append(pend.encs, enc)
	return pend, nil
}

// budget is the executor's Budget with DefaultBudget's values for zero fields.
func (e *Executor) budget() Budget {
	b := e.Budget
	if b.Bytes <= 0 {
		b.Bytes = DefaultBudget.Bytes
	}
	if b.FLOPs <= 0 {
		b.FLOPs = DefaultBudget.FLOPs
	}
	if b.Dispatches <= 0 {
		b.Dispatches = DefaultBudget.Dispatches
	}
	return b
}
