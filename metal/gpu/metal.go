package gpu

import (
	"github.com/lilyformac/lily/engine/model"
	"github.com/lilyformac/lily/metal/exec"
	"github.com/lilyformac/lily/metal/kernels"
)

// NewMetal compiles the kernels on the default Metal device, builds the decode plan for w and
// uploads the weights (macOS; elsewhere it fails with metal/mtl's "only on macOS" error). o's
// WorkingSet is the device's (recommendedMaxWorkingSetSize); MaxCtx 0 is as many positions as it
// holds beside the weights, up to the model's context.
func NewMetal(w *model.Weights, o GPUOptions) (*GPU, error) {
	srcs := map[string]string{}
	for _, n := range KernelFiles {
		srcs[n] = kernels.Source(n)
	}
	dev, err := exec.NewMetalDevice(srcs)
	if err != nil {
		return nil, err
	}
	o.WorkingSet = dev.WorkingSet()
	return NewGPU("metal", w, dev, o)
}
