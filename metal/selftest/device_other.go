//go:build !linux

package selftest

import "github.com/lilyformac/lily/metal/exec"

// DefaultDevice is where `lily doctor --selftest` runs the kernels: the default Metal device with
// every kernel of KernelFiles compiled (macOS; elsewhere it fails with metal/mtl's error).
func DefaultDevice() (dev exec.Device, name string, err error) {
	d, err := exec.NewMetalDevice(Sources())
	if err != nil {
		return nil, "", err
	}
	return d, "metal", nil
}
