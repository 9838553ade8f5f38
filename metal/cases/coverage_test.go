package cases

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/lilyformac/lily/metal/kernels"
)

// TestCoverageCatchesUncheckedInstance: with every shipped instance run, coverage passes; a
// template instance or a kernel no case runs fails it, named with its file; an exempt one does
// not.
func TestCoverageCatchesUncheckedInstance(t *testing.T) {
	files := map[string]string{}
	ran := map[string]bool{}
	for _, n := range kernels.Files() {
		files[n] = kernels.Source(n)
		for _, k := range Instances(files[n]) {
			ran[k] = true
		}
	}
	if !ran["qmm_q8_m16"] || !ran["add_rmsnorm"] || ran["qmm"] {
		t.Fatalf("instances: %v", ran)
	}
	if err := Coverage(files, ran, nil); err != nil {
		t.Fatalf("every instance run: %v", err)
	}
	delete(ran, "qmm_q8_m16")
	files["new.metal"] = "#include <metal_stdlib>\nusing namespace metal;\nkernel void new_kernel(device float* x [[buffer(0)]]) { x[0] = 1.0f; }\n"
	err := Coverage(files, ran, nil)
	const want = "metal/kernels/new.metal: compiled, but no case runs new_kernel\nmetal/kernels/qmm.metal: compiled, but no case runs qmm_q8_m16"
	if err == nil || err.Error() != want {
		t.Fatalf("coverage with unrun instances: %v", err)
	}
	if err := Coverage(files, ran, map[string]string{"new_kernel": "a test", "qmm_q8_m16": "a test"}); err != nil {
		t.Fatalf("exempt: %v", err)
	}
}

// TestBatchCoverage: every multi-row instance (qmv's, add_rmsnorm, embed_q4) has a case at every
// row count of the multi-row decode step (qmvBatches); without the 3-row cases of qmv_q8 the
// coverage names it.
func TestBatchCoverage(t *testing.T) {
	rows := batchVariants(qmvBatches)
	instances := append(Instances(kernels.Source("qmv.metal")), "add_rmsnorm", "embed_q4")
	all := All()
	if err := VariantCoverage(instances, all, rows); err != nil {
		t.Error(err)
	}
	less := slices.DeleteFunc(slices.Clone(all), func(c Case) bool { return strings.HasPrefix(c.Name, "qmv_q8+rows3/") })
	err := VariantCoverage(instances, less, rows)
	if err == nil || err.Error() != "no case runs qmv_q8 in rows3" {
		t.Errorf("without qmv_q8's 3-row cases: %v", err)
	}
}

// batchVariants are the variant suffixes of row counts: "rows1", "rows2", …
func batchVariants(rows []int) []string {
	var out []string
	for _, r := range rows {
		out = append(out, fmt.Sprintf("rows%d", r))
	}
	return out
}
