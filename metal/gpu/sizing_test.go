package gpu

import (
	"strings"
	"testing"

	"github.com/lilyformac/lily/engine/config"
	"github.com/lilyformac/lily/engine/vision"
	"github.com/lilyformac/lily/metal/decode"
	"github.com/lilyformac/lily/metal/mtl"
	"github.com/lilyformac/lily/metal/plan"
	"github.com/lilyformac/lily/metal/vit"
)

// TestSize: Size's numbers are its parts' (memoryFor, servedContext, parallelFor, poolPages,
// the device's route, SliceFor on its chip) put together once, on a 64 GB M5 Max and on 32 GB,
// where the context makes room for parallel sequences; asking for more sequences than fit, or
// forcing the tensor route on a GPU without it, fails; a GPU not known takes the simdgroup route.
// The model has no vision tower here: what it sets aside is TestSizeVision's.
func TestSize(t *testing.T) {
	c := config.Production()
	c.Vision = nil
	tensor := len(decode.TensorKernels()) > 0
	for _, gb := range []int{64, 32} {
		o := GPUOptions{WorkingSet: decode.MacWorkingSet(gb), KVBits: 16, AutoChunks: true, CacheBytes: 1 << 30}
		d := MacDevice("Apple M5 Max", mtl.FamilyApple10, "26.2")
		s, err := Size(c, o, d)
		if err != nil {
			t.Fatalf("%d GB: %v", gb, err)
		}
		mem, chunks, err := memoryFor(c, o)
		if err != nil {
			t.Fatal(err)
		}
		ctx, why, _ := servedContext(mem, c, o)
		n, nWhy := mem.Parallel(ctx, o.WorkingSet)
		o.Parallel = n
		if s.Memory != mem || s.Chunk() != chunks[0] || s.Context != ctx || s.ContextWhy != why || s.Parallel != n || s.ParallelWhy != nWhy || s.Pages != poolPages(mem, ctx, o) {
			t.Errorf("%d GB: %+v; want chunks %v, context %d (%q), %d parallel (%q), %d pages", gb, s, chunks, ctx, why, n, nWhy, poolPages(mem, ctx, o))
		}
		if want := SliceFor(c, chunks, 16, d.Chip, s.Route); d.Chip == nil || s.Slice != want {
			t.Errorf("%d GB: slice %d on %v, want %d", gb, s.Slice, d.Chip, want)
		}
		if (s.Route == plan.Tensor) != tensor || s.RouteWhy == "" {
			t.Errorf("%d GB: route %s (%s) with tensor-op kernels %v", gb, s.Route, s.RouteWhy, tensor)
		}
		if gb == 32 && (n < 2 || !strings.Contains(s.ContextWhy, "sequences at once")) {
			t.Errorf("32 GB: %d sequences, context %d (%s): no room made for parallel sequences", n, s.Context, s.ContextWhy)
		}
	}
	o := GPUOptions{WorkingSet: decode.MacWorkingSet(32), KVBits: 16, AutoChunks: true, Parallel: decode.MaxParallel}
	if _, err := Size(c, o, Device{}); err == nil || !strings.Contains(err.Error(), "do not fit") {
		t.Errorf("%d sequences on 32 GB: %v", o.Parallel, err)
	}
	m4 := MacDevice("Apple M4 Max", mtl.FamilyApple9, "26.2")
	o = GPUOptions{WorkingSet: decode.MacWorkingSet(64), KVBits: 16, PrefillRoute: RouteChoice{Route: plan.Tensor, Forced: true}}
	if _, err := Size(c, o, m4); err == nil || !strings.Contains(err.Error(), "no neural accelerators") {
		t.Errorf("--prefill-route tensor on an M4 Max: %v", err)
	}
	o.PrefillRoute = RouteChoice{}
	if s, err := Size(c, o, Device{}); err != nil || s.Route != plan.Simdgroup || s.RouteWhy != "no GPU known" || s.Slice != 0 {
		t.Errorf("no device: route %s (%s), slice %d, %v", s.Route, s.RouteWhy, s.Slice, err)
	}
	if s, err := Size(c, GPUOptions{WorkingSet: 8 << 30, AutoChunks: true}, Device{}); err == nil || s.Context != 0 || s.Chunk() == 0 {
		t.Errorf("8 GiB: context %d, chunk %d, %v: want an error, and the chunks sized", s.Context, s.Chunk(), err)
	}
}

// TestRouteChoice: --prefill-route parses to a forced route or auto (the zero value), and
// prints as given; anything else is an error.
func TestRouteChoice(t *testing.T) {
	for s, want := range map[string]RouteChoice{"auto": {}, "": {}, "tensor": {Route: plan.Tensor, Forced: true}, "simdgroup": {Route: plan.Simdgroup, Forced: true}} {
		var c RouteChoice
		if err := c.Set(s); err != nil || c != want || s != "" && c.String() != s {
			t.Errorf("%q: %+v (%s), %v", s, c, c.String(), err)
		}
	}
	c := RouteChoice{Route: plan.Tensor, Forced: true}
	if err := c.Set("ane"); err == nil || c.Route != plan.Tensor {
		t.Errorf("ane: %v, and the value became %+v", err, c)
	}
}

// TestSizeVision: in a fixed working set, the production model with its vision tower holds
// fewer positions than without it, by the tower's bytes over the KV bytes a position takes (to
// a page: the pool is sized in whole pages), and says so; the tower's bytes are its weights, one
// set of the largest image's activations and each kept executor's tables; a lower pixel cap
// shrinks the activations in proportion to the patches; a model without a tower sets none aside.
func TestSizeVision(t *testing.T) {
	o := GPUOptions{WorkingSet: 22 << 30, KVBits: 16, Chunks: Buckets(ChunkMedium), Parallel: 1}
	with := config.Production()
	text := config.Production()
	text.Vision = nil
	on, err := Size(with, o, Device{})
	if err != nil {
		t.Fatal(err)
	}
	off, err := Size(text, o, Device{})
	if err != nil {
		t.Fatal(err)
	}
	tower, err := vit.MemoryOf(with.Vision, vision.ServedMaxPixels)
	if err != nil {
		t.Fatal(err)
	}
	if on.Vision != tower || on.VisionBytes() != tower.Weights+tower.Activations+towerCacheSize*tower.Tables || off.VisionBytes() != 0 {
		t.Fatalf("tower %+v (%d bytes), without it %d; want %+v", on.Vision, on.VisionBytes(), off.VisionBytes(), tower)
	}
	kv := on.Memory.KVPerPosition
	want := int(on.VisionBytes() / kv)
	if got := off.Context - on.Context; got < want-on.Memory.PageSize || got > want+on.Memory.PageSize || on.Context <= 0 {
		t.Errorf("context %d with the tower, %d without: %d fewer, want %d ± a page of %d", on.Context, off.Context, got, want, on.Memory.PageSize)
	}
	if !strings.Contains(on.ContextWhy, "vision tower") || strings.Contains(off.ContextWhy, "vision tower") {
		t.Errorf("context notes: with the tower %q, without %q", on.ContextWhy, off.ContextWhy)
	}
	o.ImagePixels = vision.ServedMaxPixels / 4
	small, err := Size(with, o, Device{})
	if err != nil {
		t.Fatal(err)
	}
	if v := small.Vision; v.Weights != tower.Weights || v.Activations*int64(tower.Patches) != tower.Activations*int64(v.Patches) || v.Patches*4 != tower.Patches || small.Context <= on.Context {
		t.Errorf("a quarter of the pixels: %+v, context %d; the full cap %+v, context %d", v, small.Context, tower, on.Context)
	}
}
