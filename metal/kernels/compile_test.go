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
		// A file of tensor ops is MSL 4.0, and only such a file: it must say so in its source.
		want, tensor := MSLVersion, strings.Contains(Source(name), "<metal_tensor>")
		if tensor {
			want = mtl.LanguageVersion4_0
		}
		if o.LanguageVersion != want || TensorFile(name) != tensor {
			t.Errorf("%s: language version %#x, tensor file %v; want %#x (the source includes <metal_tensor>: %v)", name, o.LanguageVersion, TensorFile(name), want, tensor)
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
