//go:build linux

package cases

import (
	"encoding/binary"
	"slices"
	"strings"
	"testing"

	"github.com/lilyformac/lily/metal/emu"
)

// sampleBatchInstances are the sampler's kernels made multi-row on the grid.
var sampleBatchInstances = []string{"sample_penalties", "sample_select", "sample_final", "logprob_partial", "logprob_final"}

// TestSampleBatchCoverage: every sampler kernel has a case at every row count of the multi-row
// decode step; without the 3-row cases the coverage names each of them.
func TestSampleBatchCoverage(t *testing.T) {
	rows := batchVariants(qmvBatches)
	all := All()
	if err := VariantCoverage(sampleBatchInstances, all, rows); err != nil {
		t.Error(err)
	}
	less := slices.DeleteFunc(slices.Clone(all), func(c Case) bool { return strings.HasPrefix(c.Name, "sample_select+rows3/") })
	err := VariantCoverage(sampleBatchInstances, less, rows)
	want := "no case runs sample_penalties in rows3\nno case runs sample_select in rows3\nno case runs sample_final in rows3\n" +
		"no case runs logprob_partial in rows3\nno case runs logprob_final in rows3"
	if err == nil || err.Error() != want {
		t.Errorf("without the 3-row sampler cases: %v", err)
	}
}

// TestSampleBatchCatchesOneULP is the negative control of the sampler's batch-invariance checks:
// one ulp added to an element of row 1 of a 2-row output (the penalised logits, logprob_partial's
// sum) after the step passes the reference's comparison but fails the case, the bits differing
// from the one-row dispatch's; a row holding another row's step entry fails the reference.
func TestSampleBatchCatchesOneULP(t *testing.T) {
	dev := EmuDevice(library(t, emu.Options{}), emu.Shuffle, 1)
	c := sampleBatchCase(sampleBatchShapes[0], 2)
	if r := Run(c, dev, Options{Kind: Emu}); !r.Pass {
		t.Fatalf("unaltered: %s", r.Failure())
	}
	n, groups := sampleBatchShapes[0].n, 3
	for _, tc := range []struct {
		buf, want string
		at        int // the 32-bit word in the buffer
	}{
		{"adjusted", "not batch-invariant (want the one-row dispatch on the row alone): row 1 of 2: step 0: adjusted[5] = ", n + 5},
		{"ms", "not batch-invariant (want the one-row dispatch on the row alone): row 1 of 2: step 0: ms[3] = ", 2*groups + 3},
		{"step", "row 1 of 2: step 0: step.pos = ", 2},
	} {
		bump := func(_ Case, buf string, out []byte) {
			if buf == tc.buf {
				binary.LittleEndian.PutUint32(out[4*tc.at:], binary.LittleEndian.Uint32(out[4*tc.at:])+1)
			}
		}
		r := Run(c, dev, Options{Kind: Emu, Corrupt: bump})
		if r.Pass || r.Err == nil || !(r.Error <= r.Tolerance) || !strings.HasPrefix(r.Err.Error(), tc.want) {
			t.Errorf("%s: one off in row 1: %+v", tc.buf, r)
		}
	}
}
