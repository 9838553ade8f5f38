package main

import (
	"encoding/json"
	"math"
	"strings"
	"testing"
)

// TestBenchPlanImage: bench --plan --image 1024x768 models the production tower on the 48×64
// patch grid the processor's smart resize gives (3,072 patches, 768 tokens), its FLOPs within
// 1.15× the useful ones, and each chip's time on its route: without neural accelerators the
// simdgroup route's max(bytes / bandwidth, FLOPs / ALU peak); on M5 the tensor route's, at the
// neural accelerators' peak, below what the simdgroup route would take there, with the patch
// embedding named as the GEMM that keeps its simdgroup form.
func TestBenchPlanImage(t *testing.T) {
	out, err := execute(t, "bench", "--plan", "--image", "1024x768", "--output", "json")
	if err != nil {
		t.Fatal(err, out)
	}
	var p imagePlanOutput
	if err := json.Unmarshal([]byte(out), &p); err != nil {
		t.Fatal(err, out)
	}
	q := p.Image
	if q.Width != 1024 || q.Height != 768 || q.Patches != 3072 || q.Tokens != 768 {
		t.Fatalf("%d×%d: %d patches, %d tokens, want 1024×768, 3072, 768", q.Width, q.Height, q.Patches, q.Tokens)
	}
	if r := q.FLOPs / q.IdealFLOPs; r < 1 || r > 1.15 {
		t.Errorf("FLOPs %.4g are %.4f× ideal %.4g", q.FLOPs, r, q.IdealFLOPs)
	}
	if q.Bytes < q.IdealBytes || q.IdealBytes <= 0 {
		t.Errorf("bytes %d, ideal %d", q.Bytes, q.IdealBytes)
	}
	for _, name := range []string{"M4 Max", "M5 Max"} {
		if _, ok := q.ModeledS[name]; !ok {
			t.Fatalf("modeled seconds %v: no %s", q.ModeledS, name)
		}
	}
	if len(q.ModeledS) != len(prefillChips) {
		t.Errorf("%d chips modeled, want %d", len(q.ModeledS), len(prefillChips))
	}
	for _, chip := range prefillChips {
		simd := max(float64(q.Bytes)/chip.Bandwidth, q.FLOPs/chip.FLOPs)
		got, route, peak := q.ModeledS[chip.Name], q.Route[chip.Name], q.PeakTFLOPs[chip.Name]
		switch {
		case chip.HasTensorOps() && (route != "tensor" || peak != math.Round(chip.TensorFLOPs/1e11)/10 || got <= 0 || got >= simd):
			t.Errorf("%s: %g s on route %q at %g TFLOP/s, want the tensor route, under the simdgroup route's %g s", chip.Name, got, route, peak, simd)
		case !chip.HasTensorOps() && (route != "simdgroup" || peak != math.Round(chip.FLOPs/1e11)/10 || math.Abs(got-simd) > 1e-4):
			t.Errorf("%s: %g s on route %q at %g TFLOP/s, want %g s on the simdgroup route", chip.Name, got, route, peak, simd)
		}
	}
	if len(q.TensorFallbacks) != 1 || !strings.HasPrefix(q.TensorFallbacks[0], "vit_gemm ×1: float32 weights") {
		t.Errorf("tensor fallbacks %q, want the patch embedding's", q.TensorFallbacks)
	}
	t.Logf("1024×768: FLOPs %.4g (%.4f× ideal), bytes %d (%.2f× ideal), M4 Max %.4f s, M5 Max %.4f s",
		q.FLOPs, q.FLOPs/q.IdealFLOPs, q.Bytes, float64(q.Bytes)/float64(q.IdealBytes), q.ModeledS["M4 Max"], q.ModeledS["M5 Max"])
	text, err := execute(t, "bench", "--plan", "--image", "1024x768")
	if err != nil || !strings.Contains(text, "48×64 patches (3072), 768 tokens") || !strings.Contains(text, "(simdgroup, 17.2)") || !strings.Contains(text, "(tensor, 71.7)") ||
		!strings.Contains(text, "tensor route keeps the simdgroup form: vit_gemm ×1: float32 weights") {
		t.Fatalf("text output %q (%v)", text, err)
	}
	if _, err := execute(t, "bench", "--plan", "--image", "photo.png"); err == nil {
		t.Error("--plan --image photo.png: no error")
	}
}
