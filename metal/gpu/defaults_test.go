package gpu

import (
	"strings"
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
// suggested for 24 GB) holds at least 65,536 positions, which the bfloat16 cache would not, and
// more than the 4,096-token chunk would leave (context first).
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
	if n, large := ctx(d.KVBits, d.PrefillChunk), ctx(d.KVBits, ChunkLarge); n <= large {
		t.Errorf("in 20 GiB the default chunk leaves %d positions, the 4,096-token chunk %d: the small chunk is not needed", n, large)
	}
}

// TestPoolPagesParallel: with Parallel sequences the pool holds decode.SessionsPages (each of
// them min(context, decode.ParallelContext) positions at once, one alone the context), then the
// prefix cache's pages as far as the room beside their states goes; one sequence (0 or 1) is
// sized as before; the emulator keeps at least four sessions' worth and at least Parallel's.
func TestPoolPagesParallel(t *testing.T) {
	mem, err := decode.MemoryOf(config.Production(), 16)
	if err != nil {
		t.Fatal(err)
	}
	const ctx, ps = 65536, decode.DefaultPageSize
	page := int64(ps) * mem.KVPerPosition
	session, each := ctx/ps+1, decode.ParallelContext/ps+1
	// room for four sequences' states, rows of scratch and verify rings, and ten pages more than
	// their pool
	ws := 512<<20 + mem.Weights + mem.Scratch + 3*mem.RowScratch + 4*mem.State + 4*mem.Ring + int64(4*each+10)*page
	for _, tc := range []struct {
		name string
		o    GPUOptions
		want int
	}{
		{"one, by default", GPUOptions{WorkingSet: ws}, session},
		{"one", GPUOptions{WorkingSet: ws, Parallel: 1, CacheBytes: 3 * page}, session + 3},
		{"four", GPUOptions{WorkingSet: ws, Parallel: 4}, 4 * each},
		{"four and a cache larger than the room", GPUOptions{WorkingSet: ws, Parallel: 4, CacheBytes: 100 * page}, 4*each + 10},
		{"emulator, two", GPUOptions{Parallel: 2}, 4*(session-1) + 1},
		{"emulator, eight", GPUOptions{Parallel: 8}, 8*(session-1) + 1},
	} {
		if got := poolPages(mem, ctx, tc.o); got != tc.want {
			t.Errorf("%s: %d pages, want %d", tc.name, got, tc.want)
		}
	}
	if n, _ := mem.Parallel(ctx, ws); n != 4 {
		t.Errorf("the working set made for four holds %d", n)
	}
	for _, p := range []int{0, 1, 4} {
		if err := checkParallel(mem, ctx, GPUOptions{WorkingSet: ws, Parallel: p}); err != nil {
			t.Errorf("%d sequences: %v", p, err)
		}
	}
	for _, p := range []int{-1, 5} {
		if err := checkParallel(mem, ctx, GPUOptions{WorkingSet: ws, Parallel: p}); err == nil {
			t.Errorf("%d sequences accepted", p)
		}
	}
}

// TestAutoVision: --vision auto keeps the tower on 32 and 64 GB, on a Mac of unknown memory and
// for a model without one; on 24 GB (its defaults, in the working set the raised limit gives)
// the production tower would take more than a quarter of the positions (all of them), so it is
// left out, saying so and how to keep it; a tower a hundredth the size fits there and is kept.
func TestAutoVision(t *testing.T) {
	opts := func(mem int64) GPUOptions {
		d := DefaultsFor(mem)
		o := GPUOptions{KVBits: d.KVBits, CacheBytes: int64(d.CacheMB) << 20, AutoChunks: d.PrefillChunk < 0}
		if d.PrefillChunk > 0 {
			o.Chunks = Buckets(d.PrefillChunk)
		}
		return o
	}
	c := config.Production()
	for _, mem := range []int64{64 << 30, 32 << 30, 0} {
		if on, why := AutoVision(c, opts(mem), mem); !on || why != "" {
			t.Errorf("%d GiB: on %v (%s)", mem>>30, on, why)
		}
	}
	on, why := AutoVision(c, opts(24<<30), 24<<30)
	if on || !strings.HasPrefix(why, "vision is off on this 24 GB Mac") || !strings.Contains(why, "lily serve --vision on") {
		t.Errorf("24 GB: on %v (%s)", on, why)
	}
	text := config.Production()
	text.Vision = nil
	if on, why := AutoVision(text, opts(24<<30), 24<<30); !on || why != "" {
		t.Errorf("24 GB, no tower: on %v (%s)", on, why)
	}
	small := config.Production()
	v := *small.Vision
	v.Depth, v.Hidden, v.Heads, v.Intermediate = 2, 128, 2, 256 // about 1/100 of the tower's weights
	small.Vision = &v
	if on, why := AutoVision(small, opts(24<<30), 24<<30); !on || why != "" {
		t.Errorf("24 GB, a small tower: on %v (%s)", on, why)
	}
}
