//go:build linux

package cases

import (
	"encoding/binary"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/lilyformac/lily/metal/emu"
	"github.com/lilyformac/lily/metal/kernels"
)

// recurrentInstances are the per-sequence decode kernels made multi-row on the grid.
var recurrentInstances = []string{"conv1d_step", "gdn_step", "argmax_partial", "argmax_final"}

// TestRecurrentBatchCoverage: conv1d_step, gdn_step and the greedy selection have a case at
// every row count of the multi-row decode step; without argmax_final's 3-row cases the coverage
// names it.
func TestRecurrentBatchCoverage(t *testing.T) {
	rows := batchVariants(qmvBatches)
	all := All()
	if err := VariantCoverage(recurrentInstances, all, rows); err != nil {
		t.Error(err)
	}
	less := slices.DeleteFunc(slices.Clone(all), func(c Case) bool { return strings.HasPrefix(c.Name, "argmax_partial+rows3/") })
	err := VariantCoverage(recurrentInstances, less, rows)
	if err == nil || err.Error() != "no case runs argmax_partial in rows3\nno case runs argmax_final in rows3" {
		t.Errorf("without the 3-row argmax cases: %v", err)
	}
}

// TestRecurrentBatchCatchesOneULP is the negative control of the batch-invariance checks: one
// ulp added to row 1 of a 2-row result (conv's u, the DeltaNet state, an argmax key) passes the
// reference's comparison but fails the case, the bits differing from the one-row dispatch.
func TestRecurrentBatchCatchesOneULP(t *testing.T) {
	dev := EmuDevice(library(t, emu.Options{}), emu.Shuffle, 1)
	for _, tc := range []struct {
		c          Case
		buf        string
		at, size   int // the element in row 1 and its bytes
		wantPrefix string
	}{
		{convBatchCase(31, 32, 2, 2), "u", 31 + 5, 4, "row 1 of 2: step 0: u[5] = "},
		{gdnBatchCase(kernels.GDNShape{HK: 1, HV: 3, DK: 32, DV: 33}, 2, 2, 2, false), "state", 3*33*32 + 7, 4, "row 1 of 2: step 0: state[7] = "},
		{argmaxBatchCase(1000, 3, 40, 2, false), "partial", 3 + 1, 8, "row 1 of 2: partial[1] = "},
	} {
		bump := func(_ Case, buf string, out []byte) {
			if buf == tc.buf {
				at := tc.size * tc.at
				binary.LittleEndian.PutUint32(out[at:], binary.LittleEndian.Uint32(out[at:])+1) // the low word
			}
		}
		if r := Run(tc.c, dev, Options{Kind: Emu}); !r.Pass {
			t.Fatalf("unaltered: %s", r.Failure())
		}
		r := Run(tc.c, dev, Options{Kind: Emu, Corrupt: bump})
		want := "not batch-invariant (want the one-row dispatch on the row alone): " + tc.wantPrefix
		if r.Pass || r.Err == nil || !(r.Error <= r.Tolerance) || !strings.HasPrefix(r.Err.Error(), want) {
			t.Errorf("%s: one ulp off in row 1: %+v", tc.c.Name, r)
		}
	}
}

// TestRecurrentBatchCatchesRowMixUp: a row holding another row's result (a kernel reading the
// wrong sequence) fails the reference comparison, as the rows' data differ.
func TestRecurrentBatchCatchesRowMixUp(t *testing.T) {
	dev := EmuDevice(library(t, emu.Options{}), emu.Shuffle, 1)
	c := convBatchCase(300, kernels.ConvThreads, 3, 2)
	swap := func(_ Case, buf string, out []byte) {
		if buf == "u" {
			copy(out[4*300:4*600], out[:4*300]) // row 1 := row 0
		}
	}
	r := Run(c, dev, Options{Kind: Emu, Corrupt: swap})
	if r.Pass || !(r.Error > 0.1) || math.IsNaN(r.Error) || !strings.HasPrefix(r.Worst, "row 1 of 3: step 0: u[") {
		t.Errorf("row 1 holding row 0's u: %+v", r)
	}
}
