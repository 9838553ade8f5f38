package kernels

import (
	"math"
	"testing"
)

// TestRopeInvFreq pins the table to engine/cpu's formula for the model (rotary 64, theta 1e7).
func TestRopeInvFreq(t *testing.T) {
	f := RopeInvFreq(64, 1e7)
	if len(f) != 32 || f[0] != 1 {
		t.Fatalf("RopeInvFreq(64, 1e7) = %v", f)
	}
	for i, v := range f {
		want := 1 / float32(math.Pow(1e7, float64(float32(2*i)/64)))
		if v != want {
			t.Errorf("inv_freq[%d] = %g, want %g", i, v, want)
		}
	}
}
