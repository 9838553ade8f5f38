package gpu

import (
	"log"

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
	if dev.NotResident != nil { // macOS 14: the weights' pages may be re-wired on later requests
		logf := o.Logf
		if logf == nil {
			logf = log.Printf
		}
		logf("metal: %v", dev.NotResident)
	}
	o.WorkingSet = dev.WorkingSet()
	g, err := newGPU("metal", w, dev, deviceOf("metal", dev, dev.Name()), o)
	if err != nil {
		dev.Close()
		return nil, err
	}
	g.closeDev = dev.Close // the GPU made the device, so its Close releases it
	return g, nil
}
