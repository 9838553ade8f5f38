package gpu

import (
	"testing"

	"github.com/lilyformac/lily/engine/config"
	"github.com/lilyformac/lily/metal/decode"
)

// TestDefaultsFor: Macs under 32 GB get the int8 KV cache and the 512-token chunk; 32 GB and
// up, or an unknown memory size, keep bfloat16 and the chunk chosen by memory.
func TestDefaultsFor(t *testing.T) {
	for _, tc := range []struct {
		mem  int64
		want ServingDefaults
	}{
		{24 << 30, ServingDefaults{KVBits: 8, PrefillChunk: ChunkMedium, CacheMB: 1024}},
		{32<<30 - 1, ServingDefaults{KVBits: 8, PrefillChunk: ChunkMedium, CacheMB: 1024}},
		{32 << 30, ServingDefaults{KVBits: 16, PrefillChunk: -1, CacheMB: 4096}},
		{64 << 30, ServingDefaults{KVBits: 16, PrefillChunk: -1, CacheMB: 4096}},
		{0, ServingDefaults{KVBits: 16, PrefillChunk: -1, CacheMB: 4096}},
	} {
		if got := DefaultsFor(tc.mem); got != tc.want {
			t.Errorf("DefaultsFor(%d GiB) = %+v, want %+v", tc.mem>>30, got, tc.want)
		}
	}
}

// TestDefaultsFor24GBRaised: with the 24 GB defaults, a working set of 20 GiB (the wired limit
// suggested for 24 GB) holds at least 65,536 positions, which the bfloat16 cache or the
// 4,096-token chunk would not.
func TestDefaultsFor24GBRaised(t *testing.T) {
	c := config.Production()
	ctx := func(kvBits, chunk int) int {
		m, err := decode.MemoryOfChunked(c, kvBits, chunk)
		if err != nil {
			t.Fatal(err)
		}
		n, _, _ := m.Context(c, 0, 20<<30)
		return n
	}
	d := DefaultsFor(24 << 30)
	if n := ctx(d.KVBits, d.PrefillChunk); n < 65536 {
		t.Fatalf("24 GB defaults in 20 GiB: %d positions", n)
	}
	if n := ctx(16, d.PrefillChunk); n >= 65536 {
		t.Errorf("bfloat16 KV in 20 GiB holds %d positions: the int8 default is not needed", n)
	}
	if n := ctx(d.KVBits, ChunkLarge); n >= 65536 {
		t.Errorf("the 4,096-token chunk in 20 GiB holds %d positions: the small chunk is not needed", n)
	}
}
