package exec

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/lilyformac/lily/metal/mtl"
	"github.com/lilyformac/lily/metal/plan"
)

// costPlan is n dispatches of flops FLOPs each, every other one after a barrier.
func costPlan(n int, flops float64) *plan.Plan {
	p := &plan.Plan{Buffers: []plan.Buffer{{Name: "x", Size: 64}}}
	for i := range n {
		p.Dispatches = append(p.Dispatches, plan.Dispatch{Kernel: fmt.Sprintf("k%d", i), Buffers: map[int]plan.Binding{0: {Buffer: 0}},
			Threadgroups: [3]int{1}, Group: [3]int{32}, Barrier: i%2 == 1, FLOPs: flops,
			Reads: []plan.Range{{Buffer: 0, Len: 64}}})
	}
	return p
}

// commandBuffers splits the recorded calls at each Begin.
func commandBuffers(calls []string) []string {
	var out []string
	for _, c := range calls {
		if c == "Begin" {
			out = append(out, "")
			continue
		}
		if c == "Dispatch" {
			out[len(out)-1] += "D"
		}
		if c == "Barrier" {
			out[len(out)-1] += "|"
		}
	}
	return out
}

// TestStepSplitByBudget: a step whose modeled work exceeds the executor's Budget is committed as
// several command buffers, each within the bound (FLOPs, bytes or dispatches), split only between
// dispatches, with no barrier leading a command buffer (the queue's order replaces it); a step
// within the budget stays one command buffer, and Wait waits for every part.
func TestStepSplitByBudget(t *testing.T) {
	for _, c := range []struct {
		name   string
		budget Budget
		flops  float64
		want   string
	}{
		{"default budget", Budget{}, 1e9, "D|DD|DD|DD"},
		{"FLOPs", Budget{FLOPs: 3e9}, 1e9, "D|DD DD|D D"},
		{"one dispatch over the bound", Budget{FLOPs: 0.5e9}, 1e9, "D D D D D D D"},
		{"bytes", Budget{Bytes: 128}, 0, "D|D D|D D|D D"},
		{"dispatches", Budget{Dispatches: 3}, 0, "D|DD DD|D D"},
	} {
		t.Run(c.name, func(t *testing.T) {
			d := &fakeDevice{complete: make(chan struct{})}
			close(d.complete)
			x, err := New(d, costPlan(7, c.flops))
			if err != nil {
				t.Fatal(err)
			}
			x.Budget = c.budget
			if err := x.Step(); err != nil {
				t.Fatal(err)
			}
			if got := strings.Join(commandBuffers(d.calls), " "); got != c.want {
				t.Fatalf("command buffers %q, want %q", got, c.want)
			}
			if n := strings.Count(strings.Join(d.calls, " "), "Commit"); n != strings.Count(c.want, " ")+1 {
				t.Fatalf("%d commits for %q", n, c.want)
			}
		})
	}
}

// failDevice's command buffers fail with err from the fail-th one on (counting from 1).
type failDevice struct {
	fakeDevice
	begun int
	fail  int
	err   error
}

func (d *failDevice) Begin() (Encoder, error) {
	d.begun++
	var err error
	if d.begun >= d.fail {
		err = d.err
	}
	return failEncoder{fakeEncoder{&d.fakeDevice}, err}, nil
}

type failEncoder struct {
	fakeEncoder
	err error
}

func (e failEncoder) Wait() error { return e.err }

// TestWatchdogErrorNamed: a command buffer the GPU watchdog ended (MTLCommandBufferErrorTimeout)
// fails the step with an error that matches mtl.ErrWatchdog, says which command buffer of the
// step it was, and points at the budget; another failure is reported as itself.
func TestWatchdogErrorNamed(t *testing.T) {
	d := &failDevice{fail: 2, err: &mtl.CommandBufferError{Code: mtl.CommandBufferErrorTimeout}}
	x, err := New(d, costPlan(4, 1e9))
	if err != nil {
		t.Fatal(err)
	}
	x.Budget = Budget{FLOPs: 2e9}
	err = x.Step()
	if !errors.Is(err, mtl.ErrWatchdog) {
		t.Fatalf("Step: %v, want a watchdog error", err)
	}
	for _, want := range []string{"a step of 4 dispatches (k0 … k3), command buffer 2 of 2", "timeout", "GPU watchdog", "Budget"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%q lacks %q", err, want)
		}
	}
	d = &failDevice{fail: 1, err: &mtl.CommandBufferError{Code: mtl.CommandBufferErrorPageFault}}
	x, _ = New(d, costPlan(4, 1e9))
	if err = x.Step(); errors.Is(err, mtl.ErrWatchdog) || !strings.Contains(err.Error(), "page fault") {
		t.Fatalf("a page fault: %v", err)
	}
}
