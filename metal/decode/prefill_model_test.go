package decode

import (
	"testing"

	"github.com/lilyformac/lily/engine/config"
	"github.com/lilyformac/lily/metal/kernels"
)

// TestExpectedExperts: one token touches its K experts, a long chunk all E, and the count grows
// with the chunk.
func TestExpectedExperts(t *testing.T) {
	c := config.Production()
	ms := kernels.MoEShape{E: c.NumExperts, K: c.TopK}
	if got := ms.ExpectedExperts(1); got != c.TopK {
		t.Errorf("1 token: %d experts, want %d", got, c.TopK)
	}
	if got := ms.ExpectedExperts(4096); got != c.NumExperts {
		t.Errorf("4,096 tokens: %d experts, want %d", got, c.NumExperts)
	}
	prev := 0
	for _, m := range []int{1, 2, 8, 16, 64, 128, 512} {
		got := ms.ExpectedExperts(m)
		if got < prev || got > min(c.NumExperts, m*c.TopK) {
			t.Errorf("%d tokens: %d experts (after %d; at most %d)", m, got, prev, min(c.NumExperts, m*c.TopK))
		}
		prev = got
	}
}

// TestPrefillModelSmallChunks: a small chunk's modelled traffic counts the experts it touches,
// not all of them, so it lies between one token's and a full chunk's; the expert weights of a
// full chunk are read once.
func TestPrefillModelSmallChunks(t *testing.T) {
	c := config.Production()
	big, err := PrefillModel(c, 4096, 128, 16)
	if err != nil {
		t.Fatal(err)
	}
	small, err := PrefillModel(c, 8, 128, 16)
	if err != nil {
		t.Fatal(err)
	}
	if !(small.IdealBytes < big.IdealBytes/2) {
		t.Errorf("ideal bytes: a chunk of 8 %d, of 4,096 %d", small.IdealBytes, big.IdealBytes)
	}
	if r := big.FLOPs / big.IdealFLOPs; r > 1.10 { // the bound
		t.Errorf("4,096 tokens: executed FLOPs %.4f× the useful ones", r)
	}
	if small.Bytes < small.IdealBytes || big.Bytes < big.IdealBytes {
		t.Errorf("bytes below ideal: %d < %d or %d < %d", small.Bytes, small.IdealBytes, big.Bytes, big.IdealBytes)
	}
}
