package quant

import (
	"math"
	"testing"
)

// TestF16RoundTrip: every binary16 value widens and rounds back to itself, and float32 values
// between two halves round to the nearer (ties to even).
func TestF16RoundTrip(t *testing.T) {
	for h := range 1 << 16 {
		f := F16ToF32(uint16(h))
		if f != f {
			if F32ToF16(f)&0x7c00 != 0x7c00 || F32ToF16(f)&0x3ff == 0 {
				t.Fatalf("NaN %#04x came back as %#04x", h, F32ToF16(f))
			}
			continue
		}
		if got := F32ToF16(f); got != uint16(h) {
			t.Fatalf("%#04x -> %g -> %#04x", h, f, got)
		}
	}
	for _, c := range []struct {
		f    float32
		want uint16
	}{
		{1 + 1.0/2048, 0x3c00},                // a tie: to even (1.0)
		{1 + 3.0/2048, 0x3c02},                // a tie: to even (1 + 2/1024)
		{1 + 1.0/2048 + 1e-7, 0x3c01},         // past the tie
		{65520, 0x7c00},                       // rounds to Inf
		{float32(math.Ldexp(1, -25)), 0x0000}, // half the smallest subnormal: to even (0)
		{float32(math.Ldexp(3, -26)), 0x0001},
	} {
		if got := F32ToF16(c.f); got != c.want {
			t.Errorf("F32ToF16(%g) = %#04x, want %#04x", c.f, got, c.want)
		}
	}
}
