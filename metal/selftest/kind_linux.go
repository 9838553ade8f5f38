//go:build linux

package selftest

import (
	"github.com/lilyformac/lily/metal/cases"
	"github.com/lilyformac/lily/metal/exec"
)

// kindOf is the device kind whose tolerances apply on dev: the emulator's for exec.EmuDevice,
// Metal's for anything else.
func kindOf(dev exec.Device) cases.Kind {
	if _, ok := dev.(*exec.EmuDevice); ok {
		return cases.Emu
	}
	return cases.Metal
}
