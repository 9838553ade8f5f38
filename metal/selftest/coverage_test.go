package selftest

import (
	"testing"

	"github.com/lilyformac/lily/metal/exec"
	"github.com/lilyformac/lily/metal/kernels"
)

// TestCoverageCatchesUncheckedFile: a new kernel file that ships (is embedded) but that no check
// runs fails the coverage check, which names it; the shipped files with a kernel run pass.
func TestCoverageCatchesUncheckedFile(t *testing.T) {
	files := Sources()
	if len(files) != len(kernels.Files()) {
		t.Fatalf("Sources has %d files, kernels ships %d", len(files), len(kernels.Files()))
	}
	ran := map[string]bool{}
	for _, src := range files {
		ran[exec.KernelNames(src)[0]] = true // one kernel per file is enough
	}
	if err := coverage(files, ran); err != nil {
		t.Fatalf("every file has a kernel run: %v", err)
	}
	files["new.metal"] = "#include <metal_stdlib>\nusing namespace metal;\nkernel void new_kernel(device float* x [[buffer(0)]]) { x[0] = 1.0f; }\n"
	err := coverage(files, ran)
	if err == nil || err.Error() != "metal/kernels/new.metal: compiled, but no check runs its kernels (new_kernel)" {
		t.Fatalf("coverage with an unchecked file: %v", err)
	}
}
