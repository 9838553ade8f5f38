package exec

import (
	"fmt"
	"sync"
	"time"
)

// Timing is one timed dispatch of a profiled step.
type Timing struct {
	Step     int    // the profiled step it belongs to, from 0
	Mode     string // the executor's Mode for that step
	Dispatch int    // index into the plan's dispatches
	Kernel   string
	Seconds  float64 // GPU time on Metal (the command buffer's GPUEndTime − GPUStartTime); wall time on the emulator
}

// StartProfile switches the executor to its profiling mode: until StopProfile, every dispatch of
// a step is encoded into a command buffer of its own, committed and waited for before the next
// one is encoded, and timed. Apple GPUs sample their timers only at stage boundaries, so a
// command buffer per dispatch is what gives each dispatch a time: Metal's GPUStartTime and
// GPUEndTime of that command buffer (profile_darwin.go); on the emulator, which runs a dispatch
// when it is committed, the wall time of the commit. The results are those of an ordinary step
// (the dispatches run one after another, in plan order), only slower: nothing overlaps, and each
// dispatch pays a command buffer's launch. Submit still returns a Pending, already complete.
func (e *Executor) StartProfile() {
	if _, ok := e.dev.(*profileDevice); ok {
		return
	}
	e.dev = &profileDevice{Device: e.dev, x: e, step: -1}
}

// StopProfile leaves the profiling mode and returns the timings of every dispatch run since
// StartProfile, in the order they ran.
func (e *Executor) StopProfile() []Timing {
	pd, ok := e.dev.(*profileDevice)
	if !ok {
		return nil
	}
	e.dev = pd.Device
	pd.mu.Lock()
	defer pd.mu.Unlock()
	return pd.timings
}

// profileDevice is the device of an executor in its profiling mode: its encoders run each
// dispatch alone.
type profileDevice struct {
	Device
	x *Executor

	mu      sync.Mutex
	timings []Timing
	step    int    // the step being run (-1 before the first)
	left    []int  // the dispatches of that step still to come, by plan index
	mode    string // its mode
}

// gpuTimer is an Encoder that knows how long the GPU ran its command buffer (Metal): waitGPU
// waits for it, as Wait does, and returns the GPU's time besides the error.
type gpuTimer interface {
	waitGPU() (seconds float64, err error)
}

// next names the next dispatch to run: the executor encodes, in plan order, the dispatches that
// run in its Mode, so the k-th dispatch the device sees is known without the executor saying it.
func (d *profileDevice) next() (step, index int, mode string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.left) == 0 {
		d.step++
		d.mode = d.x.Mode
		for i := range d.x.p.Dispatches {
			if d.x.p.Dispatches[i].RunsIn(d.mode) {
				d.left = append(d.left, i)
			}
		}
		if len(d.left) == 0 {
			return d.step, -1, d.mode
		}
	}
	index, d.left = d.left[0], d.left[1:]
	return d.step, index, d.mode
}

func (d *profileDevice) record(t Timing) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.timings = append(d.timings, t)
}

// Begin starts a step's encoder, which begins a command buffer of the device's own per dispatch.
func (d *profileDevice) Begin() (Encoder, error) {
	return &profileEncoder{d: d, bufs: map[int]binding{}, tgMem: map[int]int{}}, nil
}

type binding struct {
	m   Memory
	off int64
}

// profileEncoder records the bindings as a Metal encoder keeps them, and runs each dispatch in
// a command buffer of its own, waiting for it.
type profileEncoder struct {
	d     *profileDevice
	pipe  Pipeline
	bufs  map[int]binding
	tgMem map[int]int
	err   error
}

func (e *profileEncoder) SetPipeline(p Pipeline) { e.pipe = p }

func (e *profileEncoder) SetBuffer(m Memory, offset int64, index int) {
	e.bufs[index] = binding{m, offset}
}

func (e *profileEncoder) SetThreadgroupMemory(length, index int) { e.tgMem[index] = length }

// Dispatch runs the dispatch alone and times it; after an error the step's later dispatches are
// skipped, as a failed command buffer's are.
func (e *profileEncoder) Dispatch(threadgroups, group [3]int) {
	step, index, mode := e.d.next()
	if e.err != nil {
		return
	}
	enc, err := e.d.Device.Begin()
	if err != nil {
		e.err = err
		return
	}
	enc.SetPipeline(e.pipe)
	for i, b := range e.bufs {
		enc.SetBuffer(b.m, b.off, i)
	}
	for i, n := range e.tgMem {
		enc.SetThreadgroupMemory(n, i)
	}
	enc.Dispatch(threadgroups, group)
	kernel := "?"
	if index >= 0 {
		kernel = e.d.x.p.Dispatches[index].Kernel
	}
	seconds, err := e.d.wait(enc, kernel)
	if err != nil {
		e.err = fmt.Errorf("exec: profiled dispatch %d (%s): %w", index, kernel, err)
		return
	}
	e.d.record(Timing{Step: step, Mode: mode, Dispatch: index, Kernel: kernel, Seconds: seconds})
}

// wait commits enc and waits for it, at most the executor's WaitTimeout (a hang marks the
// executor hung, as Pending.Wait does), and returns how long the dispatch ran.
func (d *profileDevice) wait(enc Encoder, kernel string) (float64, error) {
	type result struct {
		seconds float64
		err     error
	}
	done := make(chan result, 1)
	start := time.Now()
	enc.Commit() // the emulator runs the dispatch here
	go func() {
		if t, ok := enc.(gpuTimer); ok {
			s, err := t.waitGPU()
			done <- result{s, err}
			return
		}
		err := enc.Wait()
		done <- result{time.Since(start).Seconds(), err}
	}()
	timeout := d.x.WaitTimeout
	if timeout <= 0 {
		timeout = DefaultWaitTimeout
	}
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case r := <-done:
		return r.seconds, r.err
	case <-t.C:
		err := fmt.Errorf("%w: a profiled dispatch (%s) still running after %v; this executor takes no more work", ErrHung, kernel, timeout)
		d.x.hung.CompareAndSwap(nil, &err)
		return 0, err
	}
}

// Barrier does nothing: every dispatch has completed before the next one is encoded.
func (e *profileEncoder) Barrier() {}

// Commit does nothing: each dispatch was committed (and waited for) when it was encoded.
func (e *profileEncoder) Commit() {}

// Wait returns the error of the step's dispatches.
func (e *profileEncoder) Wait() error { return e.err }

func (e *profileEncoder) Finish() error { return e.err }
