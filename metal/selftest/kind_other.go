//go:build !linux

package selftest

import (
	"github.com/lilyformac/lily/metal/cases"
	"github.com/lilyformac/lily/metal/exec"
)

// kindOf is the device kind whose tolerances apply on dev: Metal's (the emulator runs on Linux
// only).
func kindOf(exec.Device) cases.Kind { return cases.Metal }
