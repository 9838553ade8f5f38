package kernels

import (
	"testing"

	"github.com/lilyformac/lily/metal/emu/gen"
)

// TestShippedKernelsPassMetalLint runs gen.Lint over every .metal file the product ships: names
// Metal reserves and C++ that MSL lacks compile on the emulator but not on a Mac.
func TestShippedKernelsPassMetalLint(t *testing.T) {
	files := Files()
	if len(files) == 0 {
		t.Fatal("no embedded .metal files")
	}
	for _, name := range files {
		for _, f := range gen.Lint(Source(name)) {
			t.Errorf("%s:%d: %s", Path(name), f.Line, f.Msg)
		}
	}
}
