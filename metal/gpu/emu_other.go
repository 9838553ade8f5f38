//go:build !linux

package gpu

import (
	"fmt"
	"runtime"

	"github.com/lilyformac/lily/engine/model"
)

// EmuOptions configure the emulated backend (Linux only).
type EmuOptions struct {
	MaxCtx      int
	WorkingSet  int64
	KVBits      int
	PageSize    int
	Pages       int
	CacheBytes  int64
	Chunks      []int
	ChunkLogits bool
	Parallel    int
	// PrefillRoute is GPUOptions.PrefillRoute.
	PrefillRoute string
}

// NewEmu reports that the MSL emulator runs on Linux only.
func NewEmu(*model.Weights, EmuOptions) (*GPU, error) {
	return nil, fmt.Errorf("backend emu (the MSL emulator) runs on Linux only (this is %s/%s)", runtime.GOOS, runtime.GOARCH)
}
