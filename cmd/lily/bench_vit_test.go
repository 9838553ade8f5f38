package main

import (
	"encoding/json"
	"math"
	"strings"
	"testing"
)

// TestBenchPlanImage: bench --plan --image 1024x768 models the production tower on the 48×64
// patch grid the processor's smart resize gives (3,072 patches, 768 tokens), its FLOPs within
// 1.15× the useful ones, and each chip's time as max(bytes / bandwidth, FLOPs / ALU peak).
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
		want := max(float64(q.Bytes)/chip.Bandwidth, q.FLOPs/chip.FLOPs)
		if got := q.ModeledS[chip.Name]; math.Abs(got-want) > 1e-4 || got <= 0 {
			t.Errorf("%s: %g s, want %g", chip.Name, got, want)
		}
		if got := q.PeakTFLOPs[chip.Name]; got != math.Round(chip.FLOPs/1e11)/10 {
			t.Errorf("%s: peak %g TFLOP/s", chip.Name, got)
		}
	}
	t.Logf("1024×768: FLOPs %.4g (%.4f× ideal), bytes %d (%.2f× ideal), M4 Max %.4f s, M5 Max %.4f s",
		q.FLOPs, q.FLOPs/q.IdealFLOPs, q.Bytes, float64(q.Bytes)/float64(q.IdealBytes), q.ModeledS["M4 Max"], q.ModeledS["M5 Max"])
	text, err := execute(t, "bench", "--plan", "--image", "1024x768")
	if err != nil || !strings.Contains(text, "48×64 patches (3072), 768 tokens") || !strings.Contains(text, "M5 Max") {
		t.Fatalf("text output %q (%v)", text, err)
	}
	if _, err := execute(t, "bench", "--plan", "--image", "photo.png"); err == nil {
		t.Error("--plan --image photo.png: no error")
	}
}
