package kernels

import (
	"strings"
	"testing"

	"github.com/lilyformac/lily/metal/mtl"
)

// TestCompileOptions: every shipped file has options, pinned to MSL 3.1 (bfloat's floor), and the
// files whose results are compared exactly are compiled with IEEE math.
func TestCompileOptions(t *testing.T) {
	if MSLVersion != 3<<16+1 { // MTLLanguageVersion3_1
		t.Errorf("MSLVersion = %#x, want MTLLanguageVersion3_1 = %#x", MSLVersion, 3<<16+1)
	}
	exact := map[string]bool{"moe.metal": true, "sample.metal": true, "argmax.metal": true}
	for _, name := range Files() {
		o, err := CompileOptions(name)
		if err != nil {
			t.Error(err)
			continue
		}
		if o.LanguageVersion != MSLVersion {
			t.Errorf("%s: language version %#x, want %#x", name, o.LanguageVersion, MSLVersion)
		}
		if strings.Contains(Source(name), "bfloat") && o.LanguageVersion < mtl.LanguageVersion3_1 {
			t.Errorf("%s uses bfloat, which needs MSL 3.1", name)
		}
		switch {
		case exact[name] && o.Math != mtl.MathSafe:
			t.Errorf("%s: math mode %d, want MathSafe (its results are compared exactly)", name, o.Math)
		case o.Math != mtl.MathSafe && o.Math != mtl.MathRelaxed:
			t.Errorf("%s: math mode %d, want MathSafe or MathRelaxed (chosen, and never Fast)", name, o.Math)
		}
	}
	if _, err := CompileOptions("new.metal"); err == nil || !strings.Contains(err.Error(), "new.metal has no math mode") {
		t.Fatalf("a file without a chosen mode: %v", err)
	}
}
