package plan

import (
	"testing"

	"github.com/lilyformac/lily/engine/config"
)

// production is Qwen3.6-35B-A3B's text config (model.md §1.2).
func production() *config.Config {
	c := &config.Config{
		VocabSize: 248320, HiddenSize: 2048, NumLayers: 40, NumHeads: 16, NumKVHeads: 2, HeadDim: 256,
		LinearKeyHeads: 16, LinearValueHeads: 32, LinearKeyDim: 128, LinearValueDim: 128, ConvKernel: 4,
		NumExperts: 256, TopK: 8, MoEIntermediate: 512, SharedIntermed: 512,
	}
	for i := range 40 {
		k := config.LinearAttention
		if i%4 == 3 {
			k = config.FullAttention
		}
		c.Layers = append(c.Layers, k)
	}
	return c
}

// TestIdealMatchesRoofline reproduces kernels.md §8.2's hand count for the production model.
func TestIdealMatchesRoofline(t *testing.T) {
	i := IdealBytes(production(), 4096)
	// §8.2: weights 1,669,563,648 B; DeltaNet state read + write 125,829,120 B; KV 20,480 B per token.
	if i.Weights != 1_669_563_648 || i.State != 125_829_120 || i.KV != 20_480*4096 {
		t.Fatalf("ideal %+v", i)
	}
	if got := IdealBytes(production(), 0).KV; got != 0 {
		t.Fatalf("KV at context 0: %d", got)
	}
}
