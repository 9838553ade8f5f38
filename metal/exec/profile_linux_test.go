//go:build linux

package exec

import (
	"slices"
	"testing"

	"github.com/lilyformac/lily/engine/quant"
)

// TestProfiledStepComputesTheSame: on the emulator a profiled step writes the same bytes as an
// ordinary one, and each dispatch gets a positive wall time.
func TestProfiledStepComputesTheSame(t *testing.T) {
	lib := library(t)
	n, k := 64, 128
	w := make([]float32, n*k)
	for i := range w {
		w[i] = float32(i%7)/4 - 0.75
	}
	m := quant.Quantize(w, n, k, 4)
	run := func(profile bool) ([]byte, []Timing) {
		e := loadedTwoStep(t, lib, m)
		if profile {
			e.StartProfile()
		}
		if err := e.Step(); err != nil {
			t.Fatal(err)
		}
		return slices.Clone(e.Bytes(bufOut)), e.StopProfile()
	}
	want, _ := run(false)
	got, timings := run(true)
	if !slices.Equal(got, want) {
		t.Fatal("a profiled step computed something else")
	}
	if len(timings) != 2 || timings[0].Kernel != "qmv_q4" || timings[1].Kernel != "add_rmsnorm" || timings[0].Seconds <= 0 || timings[1].Seconds <= 0 {
		t.Fatalf("timings %+v", timings)
	}
}
