//go:build linux

package cases

import (
	"math/rand/v2"
	"os"
	"testing"

	"github.com/lilyformac/lily/metal/emu"
)

// TestSampleExpExhaustive runs sample_probe's exp over every float32 y <= 0, -0 to -inf (2^31 + 1
// values), against float32(math.Exp(float64(y))), and logs the inputs that differ. It takes a
// few minutes: set LILY_EXHAUSTIVE=1.
func TestSampleExpExhaustive(t *testing.T) {
	if os.Getenv("LILY_EXHAUSTIVE") == "" {
		t.Skip("set LILY_EXHAUSTIVE=1")
	}
	dev := EmuDevice(library(t, emu.Options{}), emu.Forward, 1)
	lo, hi := uint64(0x80000000), uint64(0xff800000)
	const batch = 1 << 22
	bad := 0.0
	for start := lo; start <= hi; start += batch {
		c := sampleProbeCase(3, "f32_exp", batch, func(*rand.Rand) ([]uint64, []uint64) {
			a := make([]uint64, batch)
			for i := range a {
				a[i] = min(start+uint64(i), hi)
			}
			return a, make([]uint64, batch)
		})
		r := Run(c, dev, Options{Kind: Emu})
		if r.Err != nil && r.Error == 0 {
			t.Fatal(r.Err)
		}
		if r.Error > 0 {
			t.Logf("%s", r.Worst)
			bad += r.Error
		}
	}
	t.Logf("%d float32 inputs in [-inf, -0]: %g differ from float32(math.Exp(float64(y)))", hi-lo+1, bad)
}
