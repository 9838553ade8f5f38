//go:build linux

package cases

import (
	"encoding/binary"
	"strings"
	"testing"

	"github.com/lilyformac/lily/metal/emu"
)

// TestQMVBatchCatchesOneULP is the negative control of the batch-invariance check: one ulp
// added to row 1 of a 2-row result passes the reference's tolerance but fails the case, as the
// bits differ from the one-row dispatch on that row.
func TestQMVBatchCatchesOneULP(t *testing.T) {
	c := qmvBatchCase(qmvShape{bits: 4, rows: []int{13}, k: 192, xs: 1, batch: 2})
	bump := func(_ Case, buf string, out []byte) {
		if buf == "y0" {
			at := 4 * (13 + 5) // row 1, element 5
			binary.LittleEndian.PutUint32(out[at:], binary.LittleEndian.Uint32(out[at:])+1)
		}
	}
	dev := EmuDevice(library(t, emu.Options{}), emu.Shuffle, 1)
	if r := Run(c, dev, Options{Kind: Emu}); !r.Pass {
		t.Fatalf("unaltered: %s", r.Failure())
	}
	r := Run(c, dev, Options{Kind: Emu, Corrupt: bump})
	if r.Pass || r.Err == nil || !(r.Error <= r.Tolerance) || !strings.HasPrefix(r.Err.Error(), "not batch-invariant (want the one-row dispatch on the row alone): row 1 of 2: y[5] = ") {
		t.Fatalf("one ulp off in row 1: %+v", r)
	}
}
