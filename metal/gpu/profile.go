package gpu

import (
	"cmp"
	"fmt"
	"slices"

	"github.com/lilyformac/lily/metal/decode"
	"github.com/lilyformac/lily/metal/exec"
	"github.com/lilyformac/lily/metal/plan"
)

// StartProfile puts the session's executor in its profiling mode (exec.Executor.StartProfile):
// every dispatch of the steps it runs until StopProfile runs alone and is timed. The steps
// compute what they compute otherwise.
func (s *Session) StartProfile() error {
	if err := s.lock(); err != nil {
		return err
	}
	defer s.e.mu.Unlock()
	s.x.StartProfile()
	return nil
}

// StopProfile ends the profiling mode and returns the timings of the dispatches run since
// StartProfile; their Dispatch indices are those of ModelPlan's plan.
func (s *Session) StopProfile() []exec.Timing {
	if s.lane == nil {
		return nil
	}
	s.e.mu.Lock()
	defer s.e.mu.Unlock()
	return s.x.StopProfile()
}

// StartRowsProfile puts the executor of the step over R sessions at once (2 ≤ R ≤ the
// backend's rows: the R-row plan ContinueRows and StepRows run them through, rows.go) in its
// profiling mode, as StartProfile does a session's; StopRowsProfile ends it.
func (e *GPU) StartRowsProfile(R int) error {
	l, err := e.multiLane(R)
	if err != nil {
		return err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	l.x.StartProfile()
	return nil
}

// StopRowsProfile ends the R-row step's profiling mode and returns the timings of its dispatches
// since StartRowsProfile (indices into the R-row plan with its readback); none without that step.
func (e *GPU) StopRowsProfile(R int) []exec.Timing {
	l, err := e.multiLane(R)
	if err != nil {
		return nil
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	return l.x.StopProfile()
}

// multiLane is the R-row step's lane.
func (e *GPU) multiLane(R int) (*lane, error) {
	n := 1
	if e.rows != nil {
		n = len(e.rows.ones)
	}
	if R < 2 || R > n || e.rows.multi[R] == nil {
		return nil, fmt.Errorf("gpu: no %d-row step: this backend steps at most %d sequence(s) together (GPUOptions.Parallel)", R, n)
	}
	return e.rows.multi[R], nil
}

// ModelPlan is the plan the backend's sessions run — the decode step with its chunk modes, and the
// readback dispatch — built again with its bytes and FLOPs modelled at ctx cached positions
// (decode.Options.TrafficCtx), so dispatch i of it models dispatch i of a session's steps; step is
// the decode step it was made from (step.Plan is the plan without the readback, which plan.Stats
// models as `lily bench --plan` does).
func (e *GPU) ModelPlan(ctx int) (p *plan.Plan, step *decode.Step, err error) {
	s := e.step
	tctx := ctx
	if ctx == 0 {
		tctx = -1 // none cached
	}
	step, err = decode.Build(s.Config, decode.Options{MaxCtx: s.MaxCtx, KVBits: s.KVBits, Chunks: s.Chunks, ChunkLogits: s.ChunkLogits > 0,
		PageSize: s.Attn.PageSize, Pages: s.Attn.Pages, TrafficCtx: tctx, PrefillRoute: e.size.Route})
	if err != nil {
		return nil, nil, err
	}
	p, _, _ = withReadback(step)
	run, _, _ := withReadback(s)
	if len(p.Dispatches) != len(run.Dispatches) {
		return nil, nil, fmt.Errorf("gpu: the modelled plan has %d dispatches, the running one %d", len(p.Dispatches), len(run.Dispatches))
	}
	for i := range p.Dispatches {
		if p.Dispatches[i].Kernel != run.Dispatches[i].Kernel {
			return nil, nil, fmt.Errorf("gpu: modelled dispatch %d is %s, the running one %s", i, p.Dispatches[i].Kernel, run.Dispatches[i].Kernel)
		}
	}
	return p, step, nil
}

// KernelProfile is one kernel's share of a profiled step: its dispatches in the step, their mean
// time per step, and their modelled bytes and FLOPs (plan.Dispatch.Bytes and FLOPs, summed).
type KernelProfile struct {
	Kernel     string
	Dispatches int
	Seconds    float64
	Bytes      int64
	FLOPs      float64
}

// Profile sums the timings of the steps that ran in mode by kernel, with p's model of each
// dispatch, slowest kernel first (then by name). Steps is how many steps of mode it found; each
// kernel's figures are per step (the mean over them).
func Profile(p *plan.Plan, timings []exec.Timing, mode string) (kernels []KernelProfile, steps int) {
	byName := map[string]*KernelProfile{}
	seen := map[int]bool{}
	for _, t := range timings {
		if t.Mode != mode || t.Dispatch < 0 || t.Dispatch >= len(p.Dispatches) {
			continue
		}
		seen[t.Step] = true
		k := byName[t.Kernel]
		if k == nil {
			k = &KernelProfile{Kernel: t.Kernel}
			byName[t.Kernel] = k
		}
		d := &p.Dispatches[t.Dispatch]
		k.Dispatches++
		k.Seconds += t.Seconds
		k.Bytes += d.Bytes()
		k.FLOPs += d.FLOPs
	}
	steps = len(seen)
	for _, k := range byName {
		k.Dispatches /= steps
		k.Seconds /= float64(steps)
		k.Bytes /= int64(steps)
		k.FLOPs /= float64(steps)
		kernels = append(kernels, *k)
	}
	slices.SortFunc(kernels, func(a, b KernelProfile) int {
		return cmp.Or(cmp.Compare(b.Seconds, a.Seconds), cmp.Compare(a.Kernel, b.Kernel))
	})
	return kernels, steps
}
