package plan

import (
	"testing"

	"github.com/lilyformac/lily/engine/config"
)

// TestIdealMatchesRoofline reproduces kernels.md §8.2's hand count for the production model.
func TestIdealMatchesRoofline(t *testing.T) {
	i := IdealBytes(config.Production(), 4096)
	// §8.2: weights 1,669,563,648 B; DeltaNet state read + write 125,829,120 B; KV 20,480 B per token.
	if i.Weights != 1_669_563_648 || i.State != 125_829_120 || i.KV != 20_480*4096 {
		t.Fatalf("ideal %+v", i)
	}
	if got := IdealBytes(config.Production(), 0).KV; got != 0 {
		t.Fatalf("KV at context 0: %d", got)
	}
}
