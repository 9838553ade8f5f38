package plan

import (
	"strings"
	"testing"
)

func TestStatsCountDistinctBytes(t *testing.T) {
	p := &Plan{
		Buffers: []Buffer{{"w", 1000, Weights}, {"x", 100, Activations}, {"y", 100, Activations}},
		Dispatches: []Dispatch{
			{Kernel: "a", Reads: []Range{{0, 0, 600}, {0, 400, 400}, {1, 0, 100}, {1, 0, 100}}, Writes: []Range{{2, 0, 100}}},
			{Kernel: "b", Barrier: true, Reads: []Range{{2, 0, 100}, {0, 900, 50}, {0, 950, 50}}, Writes: []Range{{1, 10, 20}, {1, 20, 20}}},
		},
	}
	s := p.Stats("")
	// a: w 0..800 (800) + x 100 read, y 100 written; b: y 100 + w 900..1000 (100) read, x 10..40 (30) written.
	if s.Dispatches != 2 || s.Barriers != 1 || s.Bytes != 800+100+100+100+100+30 {
		t.Fatalf("stats %+v", s)
	}
	if err := p.Validate(); err != nil {
		t.Fatal(err)
	}
	p.Dispatches[1].Writes = append(p.Dispatches[1].Writes, Range{1, 90, 20})
	if err := p.Validate(); err == nil || !strings.Contains(err.Error(), "dispatch 1 (b)") {
		t.Fatalf("out-of-bounds range: %v", err)
	}
}

// TestModes: a dispatch with modes counts only in those modes, and the barrier of a skipped one
// is kept before the next dispatch that runs.
func TestModes(t *testing.T) {
	p := &Plan{
		Buffers: []Buffer{{"x", 8, Activations}},
		Dispatches: []Dispatch{
			{Kernel: "a"},
			{Kernel: "g", Barrier: true, Modes: []string{"greedy"}},
			{Kernel: "s", Modes: []string{"sample"}},
			{Kernel: "both", Modes: []string{"greedy", "sample"}},
			{Kernel: "end", Barrier: true},
		},
	}
	for mode, want := range map[string]Stats{"greedy": {Dispatches: 4, Barriers: 2}, "sample": {Dispatches: 4, Barriers: 2}, "prefill": {Dispatches: 2, Barriers: 1}} {
		if got := p.Stats(mode); got != want {
			t.Errorf("mode %q: %+v, want %+v", mode, got, want)
		}
	}
}

// TestStatsTensorFLOPs: a tensor-op dispatch's FLOPs count among the plan's FLOPs and apart as
// its tensor FLOPs, which Work carries to the time model.
func TestStatsTensorFLOPs(t *testing.T) {
	p := &Plan{Dispatches: []Dispatch{{Kernel: "gemm", FLOPs: 10, IdealFLOPs: 8}, {Kernel: "gemm_tensor", FLOPs: 30, IdealFLOPs: 24, Tensor: true}}}
	s := p.Stats("")
	if s.FLOPs != 40 || s.IdealFLOPs != 32 || s.TensorFLOPs != 30 || s.Work() != (Work{FLOPs: 40, TensorFLOPs: 30}) {
		t.Fatalf("stats %+v, work %+v", s, s.Work())
	}
}
