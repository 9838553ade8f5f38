package report

import (
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/lilyformac/lily/metal/exec"
)

// ResidencyOf is the selftest device's residency: whether its weights would stay wired.
func ResidencyOf(dev exec.Device) Residency {
	m, ok := dev.(*exec.MetalDevice)
	if !ok {
		return Residency{Status: "n/a", Detail: "the emulator has no residency", PipelineCacheWarnings: []string{}}
	}
	r := Residency{Status: "resident", PipelineCacheWarnings: []string{}}
	if m.NotResident != nil {
		r.Status, r.Detail = "not_resident", m.NotResident.Error()
	}
	for _, w := range m.Warnings {
		r.PipelineCacheWarnings = append(r.PipelineCacheWarnings, w.Error())
	}
	return r
}

// PipelineRecorder notes every distinct pipeline made on its device with the limits exec.New
// checks it against (exec.Pipeline, exec.Limited).
type PipelineRecorder struct {
	exec.Device
	mu    sync.Mutex
	seen  map[string]bool
	pipes []Pipeline
}

// Pipeline makes the pipeline on the device and notes it, or the error making it.
func (r *PipelineRecorder) Pipeline(kernel string, constants map[int]any) (exec.Pipeline, error) {
	p, err := r.Device.Pipeline(kernel, constants)
	keys := make([]int, 0, len(constants))
	for k := range constants {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var cs []string
	for _, k := range keys {
		cs = append(cs, fmt.Sprintf("%d=%v", k, constants[k]))
	}
	rp := Pipeline{Kernel: kernel, Constants: strings.Join(cs, " ")}
	if err != nil {
		rp.Error = err.Error()
	} else {
		rp.MaxTotalThreadsPerGroup = p.MaxThreads()
		if l, ok := p.(exec.Limited); ok {
			rp.ThreadExecutionWidth, rp.StaticThreadgroupMemory, rp.MaxThreadgroupMemory = l.ThreadExecutionWidth(), l.StaticThreadgroupMemoryLength(), l.MaxThreadgroupMemoryLength()
		}
	}
	key := rp.Kernel + "\x00" + rp.Constants
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.seen == nil {
		r.seen = map[string]bool{}
	}
	if !r.seen[key] {
		r.seen[key] = true
		r.pipes = append(r.pipes, rp)
	}
	return p, err
}

// List is the pipelines by kernel, then constants.
func (r *PipelineRecorder) List() []Pipeline {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := append([]Pipeline{}, r.pipes...)
	slices.SortStableFunc(out, func(a, b Pipeline) int {
		return strings.Compare(a.Kernel+"\x00"+a.Constants, b.Kernel+"\x00"+b.Constants)
	})
	return out
}
