//go:build !linux

package gpu

import (
	"fmt"
	"runtime"

	"github.com/lilyformac/lily/engine/model"
)

// EmuOptions configure the emulated backend (Linux only): GPUOptions.
type EmuOptions struct {
	GPUOptions
}

// NewEmu reports that the MSL emulator runs on Linux only.
func NewEmu(*model.Weights, EmuOptions) (*GPU, error) {
	return nil, fmt.Errorf("backend emu (the MSL emulator) runs on Linux only (this is %s/%s)", runtime.GOOS, runtime.GOARCH)
}
