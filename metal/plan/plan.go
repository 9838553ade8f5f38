// Package plan describes a GPU step as buffers allocated once and a static list of dispatches
// over them, in order, with their barriers and the modes each runs in (decode tails, prefill
// chunks, on the simdgroup or the tensor route), and models its cost: each dispatch's DRAM
// traffic and FLOPs, a decode token's ideal traffic (each byte it needs moved once), and the
// time on Apple's chips.
package plan

import (
	"fmt"
	"slices"
)

// Kind classifies a buffer for the traffic model and for allocation.
type Kind int

const (
	Weights     Kind = iota // checkpoint tensors (no-copy views of the mapped files where possible)
	Activations             // per-step scratch vectors
	State                   // DeltaNet state and conv windows: live across steps
	KVCache                 // bf16 K and V rows: live across steps
	Control                 // the step buffer {pos, token} and other small GPU-resident values
)

// Buffer is one device allocation, made once when the plan is built.
type Buffer struct {
	Name string
	Size int64
	Kind Kind
}

// Binding is a buffer argument of a dispatch.
type Binding struct {
	Buffer int // index into Plan.Buffers
	Offset int64
}

// Range is a span of a buffer that a dispatch reads or writes in device memory.
type Range struct {
	Buffer      int
	Offset, Len int64
}

// Dispatch is one kernel launch of the step.
type Dispatch struct {
	Kernel         string
	Constants      map[int]any // function constants (pipeline specialisation)
	Buffers        map[int]Binding
	ThreadgroupMem map[int]int
	Threadgroups   [3]int
	Group          [3]int // threads per threadgroup
	// Barrier makes the dispatch wait for every earlier one (a buffer memory barrier in a
	// concurrent encoder); without it, it may overlap with the dispatches since the last barrier.
	Barrier bool
	// Reads and Writes are the device bytes the dispatch touches, for the traffic model: a range
	// many threadgroups re-read counts once per dispatch (caches absorb the rest).
	Reads, Writes []Range
	// FLOPs are the multiply-adds (×2) the dispatch executes, padding included, and IdealFLOPs the
	// useful ones, for the compute model; elementwise work, norms and dequantisation count none.
	FLOPs, IdealFLOPs float64
	// Tensor says the dispatch's FLOPs run on Metal 4 tensor ops (the neural accelerators,
	// Chip.TensorFLOPs) rather than on the shader ALUs: the kernel is a tensor-op form, which only
	// a chip with neural accelerators runs.
	Tensor bool
	// Fallback, on the tensor route, is why a dispatch of a kernel with a tensor-op form runs its
	// simdgroup form instead: a shape the tensor form cannot run (kernels.TensorFits). Empty
	// elsewhere.
	Fallback string
	// Modes, when set, make the dispatch run only in those modes of the step (exec.Executor's
	// Mode): one plan holds alternative tails, e.g. greedy selection, sampling, or none for a
	// prefill token whose logits nobody reads. Barriers are derived as if every dispatch ran; a
	// skipped dispatch's barrier is kept before the next one that runs, so each mode stays ordered.
	Modes []string
}

// Plan is a static decode step: the buffers and the dispatches, in order.
type Plan struct {
	Buffers    []Buffer
	Dispatches []Dispatch
}

// Fallbacks are the reasons dispatches running in mode kept their simdgroup form on the tensor
// route (Dispatch.Fallback), one line per kernel and reason: "attn_prefill ×10: why".
func (p *Plan) Fallbacks(mode string) []string {
	type key struct{ kernel, why string }
	var order []key
	count := map[key]int{}
	for _, d := range p.Dispatches {
		if d.Fallback == "" || !d.RunsIn(mode) {
			continue
		}
		k := key{d.Kernel, d.Fallback}
		if count[k] == 0 {
			order = append(order, k)
		}
		count[k]++
	}
	var out []string
	for _, k := range order {
		out = append(out, fmt.Sprintf("%s ×%d: %s", k.kernel, count[k], k.why))
	}
	return out
}

// Stats summarise a plan's cost per token.
type Stats struct {
	Dispatches int
	Barriers   int
	Bytes      int64 // modelled DRAM traffic: distinct bytes read plus distinct bytes written, per dispatch
	// FLOPs and IdealFLOPs are the dispatches' Dispatch.FLOPs and Dispatch.IdealFLOPs summed;
	// TensorFLOPs the part of FLOPs that tensor-op dispatches (Dispatch.Tensor) execute.
	FLOPs, IdealFLOPs, TensorFLOPs float64
}

// Work is what the step costs, for Chip.Time.
func (s Stats) Work() Work { return Work{Bytes: s.Bytes, FLOPs: s.FLOPs, TensorFLOPs: s.TensorFLOPs} }

// Stats computes dispatch, barrier and traffic counts of the step in mode (see Dispatch.Modes).
func (p *Plan) Stats(mode string) Stats {
	var s Stats
	barrier := false
	for _, d := range p.Dispatches {
		barrier = barrier || d.Barrier
		if !d.RunsIn(mode) {
			continue
		}
		s.Dispatches++
		if barrier {
			s.Barriers++
		}
		barrier = false
		s.Bytes += d.Bytes()
		s.FLOPs += d.FLOPs
		s.IdealFLOPs += d.IdealFLOPs
		if d.Tensor {
			s.TensorFLOPs += d.FLOPs
		}
	}
	return s
}

// Bytes is the dispatch's modelled DRAM traffic: the distinct bytes it reads plus the distinct
// bytes it writes. Stats sums it over a step; a per-kernel profile attributes it per dispatch.
func (d *Dispatch) Bytes() int64 { return Distinct(d.Reads) + Distinct(d.Writes) }

// RunsIn reports whether the dispatch runs in mode.
func (d *Dispatch) RunsIn(mode string) bool {
	if len(d.Modes) == 0 {
		return true
	}
	for _, m := range d.Modes {
		if m == mode {
			return true
		}
	}
	return false
}

// Validate checks that every binding and range stays inside its buffer.
func (p *Plan) Validate() error {
	inside := func(b int, off, n int64) bool {
		return b >= 0 && b < len(p.Buffers) && off >= 0 && n >= 0 && off+n <= p.Buffers[b].Size
	}
	for i, d := range p.Dispatches {
		for idx, bind := range d.Buffers {
			if !inside(bind.Buffer, bind.Offset, 0) {
				return fmt.Errorf("plan: dispatch %d (%s): buffer(%d) binding %+v is outside its buffer", i, d.Kernel, idx, bind)
			}
		}
		for _, r := range append(slices.Clone(d.Reads), d.Writes...) {
			if !inside(r.Buffer, r.Offset, r.Len) {
				return fmt.Errorf("plan: dispatch %d (%s): range %+v is outside its buffer", i, d.Kernel, r)
			}
		}
	}
	return nil
}

// Distinct is the number of bytes covered by ranges, overlaps counted once.
func Distinct(ranges []Range) int64 {
	rs := slices.Clone(ranges)
	slices.SortFunc(rs, func(a, b Range) int {
		if a.Buffer != b.Buffer {
			return a.Buffer - b.Buffer
		}
		return int(min(max(a.Offset-b.Offset, -1), 1))
	})
	var total, end int64
	buf := -1
	for _, r := range rs {
		if r.Buffer != buf {
			buf, end = r.Buffer, 0
		}
		start := max(r.Offset, end)
		if stop := r.Offset + r.Len; stop > start {
			total += stop - start
			end = stop
		}
	}
	return total
}
