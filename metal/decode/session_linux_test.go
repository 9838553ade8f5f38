//go:build linux

package decode

import (
	"testing"

	"github.com/lilyformac/lily/engine/model"
	"github.com/lilyformac/lily/metal/emu"
)

// TestCloneContinuesExactly: a clone taken mid-sequence continues with the same logits (bit for
// bit) as the original, and the original is unaffected by the clone's steps.
func TestCloneContinuesExactly(t *testing.T) {
	dir := "../../testdata/golden/tiny-b"
	g, _, _ := readGolden(t, dir)
	w, err := model.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	e := newEmu(t, w, EmuOptions{MaxCtx: 64})
	a := e.NewSession()
	if _, err := a.Forward(g.PromptIDs[:6], false); err != nil {
		t.Fatal(err)
	}
	b := a.Clone()
	if b.Pos() != 6 || b.Bytes() != a.Bytes() || a.Bytes() <= 0 {
		t.Fatalf("clone pos %d bytes %d, original bytes %d", b.Pos(), b.Bytes(), a.Bytes())
	}
	next := g.PromptIDs[6:9]
	fromB, err := b.Forward(next, true)
	if err != nil {
		t.Fatal(err)
	}
	fromA, err := a.Forward(next, true)
	if err != nil {
		t.Fatal(err)
	}
	for i := range fromA {
		if d := maxAbsDiff(fromA[i], fromB[i]); d != 0 {
			t.Fatalf("row %d: clone differs from the original by %g", i, d)
		}
	}
	if a.Pos() != 9 || b.Pos() != 9 {
		t.Fatalf("positions %d, %d", a.Pos(), b.Pos())
	}
}

func TestForwardRejects(t *testing.T) {
	dir := "../../testdata/golden/tiny-a"
	w, err := model.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	e := newEmu(t, w, EmuOptions{MaxCtx: 2})
	s := e.NewSession()
	for _, ids := range [][]int{{}, {-1}, {w.Config.VocabSize}, {1, 2, 3}} {
		if _, err := s.Forward(ids, false); err == nil {
			t.Errorf("Forward(%v) succeeded, want an error", ids)
		}
	}
	if s.Pos() != 0 {
		t.Fatalf("rejected calls moved the position to %d", s.Pos())
	}
}

// TestMissingBarrierShows: dropping the barrier before layer 0's conv1d_step (which reads the
// qkv projection of the dispatch before it) changes the logits under the Reverse group order, so
// the golden comparison would catch a plan with a missing barrier.
func TestMissingBarrierShows(t *testing.T) {
	dir := "../../testdata/golden/tiny-a"
	g, prefill, _ := readGolden(t, dir)
	w, err := model.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	e := newEmu(t, w, EmuOptions{MaxCtx: 16, GroupOrder: emu.Reverse})
	for i := range e.step.Plan.Dispatches {
		if d := &e.step.Plan.Dispatches[i]; d.Kernel == "conv1d_step" {
			if !d.Barrier {
				t.Fatal("conv1d_step has no barrier")
			}
			d.Barrier = false
			break
		}
	}
	out, err := e.NewSession().Forward(g.PromptIDs[:2], true)
	if err != nil {
		t.Fatal(err)
	}
	if d := maxAbsDiff(out[1], prefill[g.VocabSize:2*g.VocabSize]); d < 10*tolerance {
		t.Fatalf("without the barrier the logits are still within %.3g of HF", d)
	}
}
