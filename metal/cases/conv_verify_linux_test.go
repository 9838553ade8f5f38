//go:build linux

package cases

import (
	"encoding/binary"
	"strings"
	"testing"

	"github.com/lilyformac/lily/metal/emu"
)

// TestConvVerifyCatchesOneULP is the negative control of the verify and commit cases: one ulp
// added to a draft row's u (within the reference's tolerance), to a committed window the verify
// step must leave alone, or to a window after the commit fails the case by name.
func TestConvVerifyCatchesOneULP(t *testing.T) {
	dev := EmuDevice(library(t, emu.Options{}), emu.Shuffle, 1)
	for _, tc := range []struct {
		c          Case
		buf        string
		at         int // the float32 bumped
		wantPrefix string
	}{
		{convVerifyCase(31, 32, []int{3, 1, 2}, 2), "u", 2*31 + 5, "row 2 of a group of 3: not the one-row dispatches': row 2 of 6: step 0: u[5] = "},
		{convVerifyCase(31, 32, []int{3, 1, 2}, 2), "window", 2*31 + 7, "row 0 of 6: step 0: window[69] = "},
		{convCommitCase(31, 32, []int{1, 4, 2, 1}, 5), "window", 3*31 + 1, "row 1 of 8: step 0: window[1] = "},
	} {
		bump := func(_ Case, buf string, out []byte) {
			if buf == tc.buf {
				binary.LittleEndian.PutUint32(out[4*tc.at:], binary.LittleEndian.Uint32(out[4*tc.at:])+1)
			}
		}
		if r := Run(tc.c, dev, Options{Kind: Emu}); !r.Pass {
			t.Fatalf("unaltered: %s", r.Failure())
		}
		r := Run(tc.c, dev, Options{Kind: Emu, Corrupt: bump})
		if r.Pass || r.Err == nil || !(r.Error <= r.Tolerance) || !strings.HasPrefix(r.Err.Error(), tc.wantPrefix) {
			t.Errorf("%s: one ulp off in %s[%d]: %+v", tc.c.Name, tc.buf, tc.at, r)
		}
	}
}
