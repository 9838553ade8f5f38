//go:build linux

package exec

import (
	"slices"
	"testing"

	"github.com/lilyformac/lily/engine/quant"
	"github.com/lilyformac/lily/metal/emu"
)

// loadedTwoStep is an executor of twoStepPlan over m (n×k) on the emulator with its inputs
// loaded: x cycles through -2…2, the gain is 1.
func loadedTwoStep(t *testing.T, lib *emu.Library, m *quant.Matrix) *Executor {
	t.Helper()
	e, err := New(&EmuDevice{Lib: lib}, twoStepPlan(m, true))
	if err != nil {
		t.Fatal(err)
	}
	put(e.Bytes(bufWords), m.Words)
	put(e.Bytes(bufScales), m.Scales)
	put(e.Bytes(bufBiases), m.Biases)
	x := make([]float32, m.Cols)
	for i := range x {
		x[i] = float32(i%5) - 2
	}
	put(e.Bytes(bufX), x)
	gain := make([]uint16, m.Rows)
	for i := range gain {
		gain[i] = quant.F32ToBF16(1)
	}
	put(e.Bytes(bufGain), gain)
	return e
}

// TestSubmitThenWait: two steps submitted before either is waited for give what two Steps give
// (the emulator runs a step when it is committed, in commit order, as a Metal queue does).
func TestSubmitThenWait(t *testing.T) {
	lib := library(t)
	n, k := 256, 512
	w := make([]float32, n*k)
	for i := range w {
		w[i] = float32(i%17-8) / 64
	}
	m := quant.Quantize(w, n, k, 4)
	run := func(submit bool) []byte {
		e := loadedTwoStep(t, lib, m)
		if submit {
			a, err := e.Submit()
			if err != nil {
				t.Fatal(err)
			}
			b, err := e.Submit()
			if err != nil {
				t.Fatal(err)
			}
			if err := a.Wait(); err != nil {
				t.Fatal(err)
			}
			if err := b.Wait(); err != nil {
				t.Fatal(err)
			}
		} else {
			for range 2 {
				if err := e.Step(); err != nil {
					t.Fatal(err)
				}
			}
		}
		return slices.Clone(e.Bytes(bufOut))
	}
	if !slices.Equal(run(true), run(false)) {
		t.Fatal("Submit, Submit, Wait, Wait differs from Step, Step")
	}
}
