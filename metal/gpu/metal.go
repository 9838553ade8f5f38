package gpu

import (
	"github.com/lilyformac/lily/engine/model"
	"github.com/lilyformac/lily/metal/exec"
	"github.com/lilyformac/lily/metal/kernels"
)

// NewMetal compiles the kernels on the default Metal device, builds the decode plan for w and
// uploads the weights (macOS; elsewhere it fails with metal/mtl's "only on macOS" error). A
// session holds maxCtx positions; 0: as many as the device's working set holds beside the
// weights, up to the model's context. kvBits is the KV cache's format (16, or 8).
func NewMetal(w *model.Weights, maxCtx, kvBits int) (*GPU, error) {
	srcs := map[string]string{}
	for _, n := range KernelFiles {
		srcs[n] = kernels.Source(n)
	}
	dev, err := exec.NewMetalDevice(srcs)
	if err != nil {
		return nil, err
	}
	return NewGPU("metal", w, dev, GPUOptions{MaxCtx: maxCtx, WorkingSet: dev.WorkingSet(), KVBits: kvBits})
}
