package gpu

import (
	"testing"

	"github.com/lilyformac/lily/engine/config"
	"github.com/lilyformac/lily/metal/decode"
)

// TestPoolPages: the KV pool holds a session's pages and a spare, then pages for the prefix
// cache's budget as far as the working set has room; without a known working set, at least four
// sessions' worth.
func TestPoolPages(t *testing.T) {
	c := config.Production()
	mem, err := decode.MemoryOf(c, 16)
	if err != nil {
		t.Fatal(err)
	}
	const ctx = 32768
	session := ctx/decode.DefaultPageSize + 1
	page := int64(decode.DefaultPageSize) * mem.KVPerPosition
	// a working set with room for the session and ten more pages
	ws := mem.Weights + mem.State + mem.Scratch + 512<<20 + int64(session+10)*page
	for _, tc := range []struct {
		name string
		o    GPUOptions
		want int
	}{
		{"no cache", GPUOptions{WorkingSet: ws}, session},
		{"cache of 3 pages", GPUOptions{WorkingSet: ws, CacheBytes: 3 * page}, session + 3},
		{"cache larger than the room", GPUOptions{WorkingSet: ws, CacheBytes: 100 * page}, session + 10},
		{"emulator, small cache", GPUOptions{CacheBytes: page}, 4*(session-1) + 1},
		{"emulator, large cache", GPUOptions{CacheBytes: 1000 * page}, session + 1000},
		{"asked", GPUOptions{WorkingSet: ws, CacheBytes: 3 * page, Pages: 7}, 7},
	} {
		if got := poolPages(mem, ctx, tc.o); got != tc.want {
			t.Errorf("%s: %d pages, want %d", tc.name, got, tc.want)
		}
	}
}
