package plan

import (
	"testing"

	"github.com/lilyformac/lily/engine/config"
)

// TestIdealMatchesRoofline reproduces a hand count for the production model: weights
// 1,669,563,648 B on the active path; DeltaNet state 30 layers × 32 heads × 128 × 128 × 4 B, read
// and written (125,829,120 B); KV 10 layers × K and V × 2 heads × 256 dims × 2 B = 20,480 B per
// cached token (8-bit: 256 codes + 8 scales of 2 B per head row, 10,880 B).
func TestIdealMatchesRoofline(t *testing.T) {
	i := IdealBytes(config.Production(), 4096, 16)
	if i.Weights != 1_669_563_648 || i.State != 125_829_120 || i.KV != 20_480*4096 {
		t.Fatalf("ideal %+v", i)
	}
	if i8 := IdealBytes(config.Production(), 4096, 8); i8.KV != 10_880*4096 || i8.Weights != i.Weights {
		t.Fatalf("ideal with an 8-bit cache %+v", i8)
	}
	if got := IdealBytes(config.Production(), 0, 16).KV; got != 0 {
		t.Fatalf("KV at context 0: %d", got)
	}
}
