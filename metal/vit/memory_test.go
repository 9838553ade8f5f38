package vit

import (
	"testing"

	"github.com/lilyformac/lily/engine/config"
	"github.com/lilyformac/lily/engine/vision"
)

// TestMemoryOf: the production tower's memory from its plan is what its shapes give by hand:
// bfloat16 weights (the patch embedding folded to float32 [D][3·16·16] with a float32 bias) and
// float32 activations per patch (pixel row, h, norm, qkv, attention, MLP, merger rows, a quarter
// output row), at the 10,240 patches of the served pixel cap.
func TestMemoryOf(t *testing.T) {
	v := config.ProductionVision()
	D, F, M, O, K := int64(v.Hidden), int64(v.Intermediate), 4*int64(v.Hidden), int64(v.OutHidden), int64(3*16*16)
	block := 2*2*D + 2*2*D + // norm1, norm2
		2*(3*D*D+3*D) + 2*(D*D+D) + 2*(F*D+F) + 2*(D*F+D) // qkv, proj, fc1, fc2
	weights := 4*(D*K+D) + 2*int64(v.NumPositions)*D + int64(v.Depth)*block + 2*2*D + 2*(M*M+M) + 2*(O*M+O)
	perPatch := 4 * (K + D + D + 3*D + D + F + D + O/4)
	m, err := MemoryOf(v, vision.ServedMaxPixels)
	if err != nil {
		t.Fatal(err)
	}
	if m.Patches != 10240 || m.Weights != weights || m.Activations != 10240*perPatch || m.Tables <= 0 || m.Tables > 1<<20 {
		t.Fatalf("%+v; want 10240 patches, weights %d, activations %d", m, weights, 10240*perPatch)
	}
	t.Logf("production tower at %d pixels: %+v, %d bytes with two executors", vision.ServedMaxPixels, m, m.Total(2))
}

// TestMaxPatches: no image, of any size or shape up to the aspect limit, resizes
// (vision.SmartResize) to more patches than MaxPatches under a pixel cap, and some reach it.
func TestMaxPatches(t *testing.T) {
	v := config.ProductionVision()
	for _, maxPixels := range []int{vision.ServedMaxPixels, 1 << 20, 1_000_000, 16_777_216} {
		bound, reached := MaxPatches(v, maxPixels), 0
		for w := 32; w <= 8192; w += 61 {
			for h := 32; h <= 8192; h += 67 {
				if max(w, h) > 200*min(w, h) {
					continue
				}
				rh, rw, err := vision.SmartResize(h, w, v.Factor(), min(65_536, maxPixels), maxPixels)
				if err != nil {
					t.Fatal(err)
				}
				n := rh / v.PatchSize * (rw / v.PatchSize)
				if n > bound {
					t.Fatalf("cap %d: %d×%d becomes %d patches, over %d", maxPixels, w, h, n, bound)
				}
				reached = max(reached, n)
			}
		}
		if reached < bound*99/100 {
			t.Errorf("cap %d: at most %d patches of the bound %d reached", maxPixels, reached, bound)
		}
	}
	if n := MaxPatches(v, 2048*1280); n != 2048*1280/(16*16) {
		t.Errorf("2048×1280 pixels: %d patches", n)
	}
}
