// Package exec runs a plan's dispatches on a device — the MSL emulator on Linux, Metal on macOS —
// through one encoder loop, so what CI tests on the emulator is the code path Metal runs.
package exec

import (
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"time"

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
	hung atomic.Pointer[error] // set when a step did not complete in time
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
		if err := fitGroup(d.Group, pipe); err != nil {
			return nil, fmt.Errorf("exec: dispatch %d (%s): %w", i, d.Kernel, err)
		}
		e.pipes = append(e.pipes, pipe)
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

// fitGroup checks a dispatch's threadgroup against its pipeline's limit when the pipeline is
// made: Metal would only fail the dispatch when it is encoded, mid-token.
func fitGroup(group [3]int, p Pipeline) error {
	g := [3]int{max(group[0], 1), max(group[1], 1), max(group[2], 1)} // 0 means 1, as in Dispatch
	if n, limit := g[0]*g[1]*g[2], p.MaxThreads(); n > limit {
		return fmt.Errorf("threadgroups of %d threads %v, but this GPU runs the pipeline with at most %d per threadgroup (maxTotalThreadsPerThreadgroup): the kernel needs a smaller geometry", n, g, limit)
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

// Pending is a submitted step.
type Pending struct {
	enc Encoder
	x   *Executor
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
	go func() { done <- p.enc.Wait() }()
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
	barrier := false
	for i := range e.p.Dispatches {
		d := &e.p.Dispatches[i]
		if barrier = barrier || d.Barrier; !d.RunsIn(e.Mode) {
			continue // its barrier, if any, goes before the next dispatch that runs
		}
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
	return Pending{enc, e}, nil
}
