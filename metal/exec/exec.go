// Package exec runs a plan's dispatches on a device — the MSL emulator on Linux, Metal on macOS —
// through one encoder loop, so what CI tests on the emulator is the code path Metal runs.
package exec

import (
	"fmt"
	"slices"

	"github.com/lilyformac/lily/metal/plan"
)

// Device turns the executor's calls into device work.
type Device interface {
	// Alloc makes the memory of one plan buffer; Bytes is its host view (unified memory).
	Alloc(b plan.Buffer) (Memory, error)
	// Pipeline specialises a kernel with function constants.
	Pipeline(kernel string, constants map[int]any) (Pipeline, error)
	// Begin starts encoding one step.
	Begin() (Encoder, error)
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
type Pipeline any

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
}

// New allocates every buffer and builds every pipeline of p once.
func New(dev Device, p *plan.Plan) (*Executor, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	e := &Executor{dev: dev, p: p}
	for _, b := range p.Buffers {
		m, err := dev.Alloc(b)
		if err != nil {
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
		e.pipes = append(e.pipes, pipe)
	}
	return e, nil
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
type Pending struct{ enc Encoder }

// Wait waits for the step to complete and returns its error.
func (p Pending) Wait() error { return p.enc.Wait() }

// Submit encodes every dispatch of the plan, as Step does, and commits them without waiting.
// The plan is read at Submit time: changing a dispatch's bindings afterwards affects only later
// submissions.
func (e *Executor) Submit() (Pending, error) {
	enc, err := e.dev.Begin()
	if err != nil {
		return Pending{}, err
	}
	for i := range e.p.Dispatches {
		d := &e.p.Dispatches[i]
		if d.Barrier {
			enc.Barrier()
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
	return Pending{enc}, nil
}
