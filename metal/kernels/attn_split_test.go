package kernels

import "testing"

// TestAttnSplitRule pins the split rule's edges.
func TestAttnSplitRule(t *testing.T) {
	for _, c := range []struct{ maxCtx, n, splits, chunk, active int }{
		{262144, 1, 64, 64, 1},
		{262144, 64, 64, 64, 1},
		{262144, 65, 64, 64, 2},
		{262144, 4096, 64, 64, 64},
		{262144, 4097, 64, 80, 52},
		{262144, 262144, 64, 4096, 64},
		{100, 100, 2, 64, 2},
		{64, 64, 1, 64, 1},
	} {
		s := AttnSplits(c.maxCtx)
		if s != c.splits || AttnChunk(c.n, s) != c.chunk || AttnActiveSplits(c.n, s) != c.active {
			t.Errorf("max %d n %d: splits %d chunk %d active %d, want %d %d %d", c.maxCtx, c.n, s, AttnChunk(c.n, s), AttnActiveSplits(c.n, s), c.splits, c.chunk, c.active)
		}
	}
}
