//go:build linux

package cases

import (
	"encoding/binary"
	"strings"
	"testing"

	"github.com/lilyformac/lily/metal/emu"
	"github.com/lilyformac/lily/metal/kernels"
)

// TestGDNVerifyCatchesOneULP is the negative control of the verify and commit cases: one ulp
// added to a group row's y, to the untouched state of a group or to a committed state passes the
// reference comparison but fails the case, bit for bit against the one-row gdn_step dispatches
// (or the state before the step).
func TestGDNVerifyCatchesOneULP(t *testing.T) {
	dev := EmuDevice(library(t, emu.Options{}), emu.Shuffle, 1)
	s := kernels.GDNShape{HK: 1, HV: 3, DK: 32, DV: 33}
	hd, n := s.HV*s.DV, s.StateLen()
	verify, commit := gdnVerifyCase(s, 2, []uint32{3, 0, 0, 1}, false), gdnCommitCase(s, 2, []uint32{2}, false)
	for _, tc := range []struct {
		c          Case
		buf        string
		at         int // the float bumped
		wantPrefix string
	}{
		{verify, "y", 2*hd + 5, "row 2 of 4: y (one-row gdn_step's)[5] = "},
		{verify, "state", 7, "row 0 of 4: state (untouched)[7] = "},
		{verify, "state", 3*n + 7, "row 3 of 4: state after 1 rows (one-row gdn_step's)[7] = "},
		{commit, "state", 9, "row 0 of 5: state after 2 rows (one-row gdn_step's)[9] = "},
		{commit, "state", 2*n + 9, "row 2 of 5: state (untouched)[9] = "},
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
