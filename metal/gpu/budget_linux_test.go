//go:build linux

package gpu

import (
	"slices"
	"testing"

	"github.com/lilyformac/lily/engine/model"
	"github.com/lilyformac/lily/metal/decode"
	"github.com/lilyformac/lily/metal/exec"
)

// beginCounter counts the command buffers the emulator is asked for.
type beginCounter struct {
	*exec.EmuDevice
	begun int
}

func (d *beginCounter) Begin() (exec.Encoder, error) {
	d.begun++
	return d.EmuDevice.Begin()
}

// TestPrefillChunkSplitByBudget: a prefill chunk whose modeled FLOPs exceed the command-buffer
// budget is committed as several command buffers — about as many as its FLOPs over the budget —
// and gives the same logits and greedy token, bit for bit, as the chunk in one command buffer;
// under the default budget the chunk and a decode step are one command buffer each.
func TestPrefillChunkSplitByBudget(t *testing.T) {
	w, err := model.Load("../../testdata/golden/tiny-a")
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	lib := decodeLibrary(t)
	prompt := []int{11, 22, 33, 44, 55, 66, 77, 88, 99, 111, 122, 133, 144, 155, 166, 177}
	run := func(b exec.Budget) (logits []float32, next, begun, pieces int) {
		dev := &beginCounter{EmuDevice: &exec.EmuDevice{Lib: lib}}
		e, err := NewGPU("emu", w, dev, GPUOptions{MaxCtx: 64, Chunks: []int{16}, Budget: b})
		if err != nil {
			t.Fatal(err)
		}
		defer e.Close()
		s := e.NewSession().(*Session)
		defer s.Close()
		st := e.Step().Plan.Stats(decode.ChunkModes(16).Last)
		if b.FLOPs > 0 {
			pieces = int(st.FLOPs/b.FLOPs) + 1
		}
		dev.begun = 0
		rows, err := s.Forward(prompt, false)
		if err != nil {
			t.Fatal(err)
		}
		begun = dev.begun
		if _, err := s.Forward([]int{s.NextToken()}, false); err != nil {
			t.Fatal(err)
		}
		if b == (exec.Budget{}) && dev.begun != begun+1 {
			t.Fatalf("a decode step took %d command buffers", dev.begun-begun)
		}
		return slices.Clone(rows[0]), s.NextToken(), begun, pieces
	}
	whole, nextWhole, one, _ := run(exec.Budget{})
	if one != 1 {
		t.Fatalf("the 16-token chunk took %d command buffers under the default budget, want 1", one)
	}
	split, nextSplit, many, pieces := run(exec.Budget{FLOPs: 2e6})
	if many < 3 || many < pieces/2 {
		t.Fatalf("the chunk took %d command buffers under a 2 MFLOP budget (its model: about %d)", many, pieces)
	}
	if !slices.Equal(whole, split) || nextWhole != nextSplit {
		t.Fatalf("split chunk differs: next %d vs %d", nextSplit, nextWhole)
	}
	t.Logf("16-token chunk: %d command buffers under a 2 MFLOP budget (modeled FLOPs / budget ≈ %d)", many, pieces)
}
