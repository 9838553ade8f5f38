package exec

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/lilyformac/lily/metal/plan"
)

// fakeDevice records the encoder calls of each step, each with whether it ran inside Encode, and
// completes a step's Wait only when complete is closed.
type fakeDevice struct {
	inEncode bool
	calls    []string // "call" inside Encode, "call!" outside
	complete chan struct{}
}

type fakeMemory []byte

func (m fakeMemory) Bytes() []byte { return m }

type fakePipeline struct{}

func (fakePipeline) MaxThreads() int { return 1024 }

func (d *fakeDevice) Free(Memory) {}

func (d *fakeDevice) Alloc(b plan.Buffer) (Memory, error)            { return make(fakeMemory, b.Size), nil }
func (d *fakeDevice) Pipeline(string, map[int]any) (Pipeline, error) { return fakePipeline{}, nil }
func (d *fakeDevice) Encode(f func())                                { d.inEncode = true; defer func() { d.inEncode = false }(); f() }
func (d *fakeDevice) Begin() (Encoder, error)                        { d.record("Begin"); return fakeEncoder{d}, nil }
func (d *fakeDevice) record(call string) {
	if !d.inEncode {
		call += "!"
	}
	d.calls = append(d.calls, call)
}

type fakeEncoder struct{ d *fakeDevice }

func (e fakeEncoder) SetPipeline(Pipeline)          { e.d.record("SetPipeline") }
func (e fakeEncoder) SetBuffer(Memory, int64, int)  { e.d.record("SetBuffer") }
func (e fakeEncoder) SetThreadgroupMemory(int, int) { e.d.record("SetThreadgroupMemory") }
func (e fakeEncoder) Dispatch([3]int, [3]int)       { e.d.record("Dispatch") }
func (e fakeEncoder) Barrier()                      { e.d.record("Barrier") }
func (e fakeEncoder) Commit()                       { e.d.record("Commit") }
func (e fakeEncoder) Finish() error                 { e.Commit(); return e.Wait() }
func (e fakeEncoder) Wait() error                   { <-e.d.complete; return nil }

func fakePlan() *plan.Plan {
	return &plan.Plan{
		Buffers: []plan.Buffer{{Name: "x", Size: 64}},
		Dispatches: []plan.Dispatch{
			{Kernel: "first", Buffers: map[int]plan.Binding{0: {Buffer: 0}}, ThreadgroupMem: map[int]int{0: 16}, Threadgroups: [3]int{1}, Group: [3]int{32}},
			{Kernel: "last", Buffers: map[int]plan.Binding{0: {Buffer: 0}}, Threadgroups: [3]int{1}, Group: [3]int{32}, Barrier: true},
		},
	}
}

// TestStepEncodesInsideEncode: a step's whole encoding, Begin to Commit, runs inside the
// device's Encode (on Metal, one autorelease pool with the goroutine pinned).
func TestStepEncodesInsideEncode(t *testing.T) {
	d := &fakeDevice{complete: make(chan struct{})}
	close(d.complete)
	x, err := New(d, fakePlan())
	if err != nil {
		t.Fatal(err)
	}
	if err := x.Step(); err != nil {
		t.Fatal(err)
	}
	want := "Begin SetPipeline SetBuffer SetThreadgroupMemory Dispatch Barrier SetPipeline SetBuffer Dispatch Commit"
	if got := strings.Join(d.calls, " "); got != want {
		t.Fatalf("calls %q, want %q (a ! marks a call outside Encode)", got, want)
	}
}

// TestWaitOnHungStepTimesOut: a command buffer that never completes makes Wait fail after the
// executor's WaitTimeout with ErrHung naming the step, and the executor refuses later steps
// at once instead of queueing them behind it.
func TestWaitOnHungStepTimesOut(t *testing.T) {
	d := &fakeDevice{complete: make(chan struct{})}
	t.Cleanup(func() { close(d.complete) }) // lets the abandoned wait goroutine end
	x, err := New(d, fakePlan())
	if err != nil {
		t.Fatal(err)
	}
	x.WaitTimeout = 50 * time.Millisecond
	start := time.Now()
	errc := make(chan error, 1)
	go func() { errc <- x.Step() }()
	select {
	case err = <-errc:
	case <-time.After(5 * time.Second):
		t.Fatal("Step on a hung command buffer did not return within 5 s")
	}
	if !errors.Is(err, ErrHung) || !strings.Contains(err.Error(), "a step of 2 dispatches (first … last) still running after 50ms") {
		t.Fatalf("Step: %v", err)
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Fatalf("Step returned after %v, want about the 50ms timeout", took)
	}
	if _, err := x.Submit(); !errors.Is(err, ErrHung) {
		t.Fatalf("Submit after a hang: %v, want ErrHung", err)
	}
}
