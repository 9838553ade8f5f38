package exec

import (
	"slices"
	"strings"
	"testing"

	"github.com/lilyformac/lily/metal/plan"
)

// TestProfileTimesEachDispatchAlone: in the profiling mode every dispatch of the executor's
// mode gets a command buffer of its own, committed and waited for before the next is encoded,
// and a timing naming its step, mode, plan index and kernel; StopProfile goes back to one
// command buffer per step.
func TestProfileTimesEachDispatchAlone(t *testing.T) {
	d := &fakeDevice{complete: make(chan struct{})}
	close(d.complete)
	p := fakePlan()
	p.Dispatches = slices.Insert(p.Dispatches, 1, plan.Dispatch{Kernel: "other", Modes: []string{"b"}, Threadgroups: [3]int{1}, Group: [3]int{32}})
	x, err := New(d, p)
	if err != nil {
		t.Fatal(err)
	}
	x.Mode = "a"
	x.StartProfile()
	x.StartProfile() // a second start changes nothing
	for range 2 {
		if err := x.Step(); err != nil {
			t.Fatal(err)
		}
	}
	got := x.StopProfile()
	want := []Timing{{0, "a", 0, "first", 0}, {0, "a", 2, "last", 0}, {1, "a", 0, "first", 0}, {1, "a", 2, "last", 0}}
	if len(got) != len(want) {
		t.Fatalf("timings %+v, want %+v", got, want)
	}
	for i := range got {
		if got[i].Seconds < 0 {
			t.Fatalf("timing %d: %v s", i, got[i].Seconds)
		}
		got[i].Seconds = 0
		if got[i] != want[i] {
			t.Fatalf("timing %d: %+v, want %+v", i, got[i], want[i])
		}
	}
	one := "Begin SetPipeline SetBuffer SetThreadgroupMemory Dispatch Commit Begin SetPipeline SetBuffer SetThreadgroupMemory Dispatch Commit"
	if calls := strings.Join(d.calls, " "); calls != one+" "+one {
		t.Fatalf("profiled calls %q, want %q twice (each dispatch alone, bindings kept as an encoder keeps them)", calls, one)
	}
	if x.StopProfile() != nil {
		t.Fatal("a second StopProfile returned timings")
	}
	d.calls = nil
	if err := x.Step(); err != nil {
		t.Fatal(err)
	}
	if calls := strings.Join(d.calls, " "); strings.Count(calls, "Begin") != 1 {
		t.Fatalf("after StopProfile a step still runs per dispatch: %q", calls)
	}
}
