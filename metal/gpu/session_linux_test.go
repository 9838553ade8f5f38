//go:build linux

package gpu

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/lilyformac/lily/engine/backend"
	"github.com/lilyformac/lily/engine/model"
	"github.com/lilyformac/lily/metal/decode"
	"github.com/lilyformac/lily/metal/emu"
)

// TestSnapshotContinuesExactly: a snapshot taken mid-sequence and restored continues with the
// same logits (bit for bit) as the original, which its steps leave alone — also when the
// original runs on a reused executor whose KV cache still holds a longer, earlier sequence. The
// snapshot holds the state and the KV rows in use, nothing else; closing every session gives the
// executors back to one idle one (Parallel 1), or the rows back (Parallel 2: the sessions live in
// rows allocated with the backend, and allocate nothing).
func TestSnapshotContinuesExactly(t *testing.T) {
	for _, parallel := range []int{1, 2} {
		t.Run(fmt.Sprintf("parallel%d", parallel), func(t *testing.T) { checkSnapshotContinues(t, parallel) })
	}
}

func checkSnapshotContinues(t *testing.T, parallel int) {
	dir := "../../testdata/golden/tiny-b"
	g, w := goldenWeights(t, dir)
	e := newEmu(t, w, EmuOptions{GPUOptions: GPUOptions{MaxCtx: 64, Parallel: parallel}})
	idleBufs, idleBytes := e.Live()
	old := e.NewSession()
	if _, err := old.Forward(g.PromptIDs[:12], false); err != nil {
		t.Fatal(err)
	}
	old.Close() // its executor, KV rows and all, serves the next session
	a := e.NewSession()
	if _, err := a.Forward(g.PromptIDs[:6], false); err != nil {
		t.Fatal(err)
	}
	snap, err := a.Save()
	if err != nil {
		t.Fatal(err)
	}
	mem, _ := decode.MemoryOf(w.Config, 0)
	stepBuf := e.Step().Plan.Buffers[e.Step().StepBuf].Size
	if snap.Pos() != 6 || snap.Bytes() != mem.Snapshot(6)+stepBuf {
		t.Fatalf("snapshot pos %d, %d bytes; want 6 and the state + 6 KV rows (%d) + the step buffer (%d)", snap.Pos(), snap.Bytes(), mem.Snapshot(6), stepBuf)
	}
	b, err := snap.Restore()
	if err != nil {
		t.Fatal(err)
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
			t.Fatalf("row %d: restored session differs from the original by %g", i, d)
		}
	}
	if a.Pos() != 9 || b.Pos() != 9 {
		t.Fatalf("positions %d, %d", a.Pos(), b.Pos())
	}
	if n, _ := e.Live(); parallel == 1 && n <= idleBufs || parallel > 1 && n != idleBufs {
		t.Fatalf("two live sessions on %d buffers, the backend alone on %d (parallel %d)", n, idleBufs, parallel)
	}
	a.Close()
	b.Close()
	snap.Close()
	if n, bytes := e.Live(); n != idleBufs || bytes != idleBytes {
		t.Fatalf("after closing every session: %d buffers, %d bytes; one idle executor is %d, %d", n, bytes, idleBufs, idleBytes)
	}
	if _, err := a.Forward(next, false); err == nil {
		t.Fatal("a closed session ran a step")
	}
}

func TestForwardRejects(t *testing.T) {
	dir := "../../testdata/golden/tiny-a"
	w, err := model.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	e := newEmu(t, w, EmuOptions{GPUOptions: GPUOptions{MaxCtx: 2}})
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
	// Parallel 1: no rows built with the backend, so the next session's executor copies the
	// edited plan.
	e := newEmu(t, w, EmuOptions{GPUOptions: GPUOptions{MaxCtx: 16, Parallel: 1}, GroupOrder: emu.Reverse})
	held := e.NewSession() // holds the executor built with the plan intact
	defer held.Close()
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

// TestSnapshotEncoding: a snapshot written out by one backend and read back by another of a
// different context size continues bit for bit like the original (the encoding holds the KV rows
// in use, not the cache's layout); data of the wrong length is refused.
func TestSnapshotEncoding(t *testing.T) {
	dir := "../../testdata/golden/tiny-b"
	g, w := goldenWeights(t, dir)
	encoded := map[int][]byte{}
	for _, bits := range []int{16, 8} {
		e, other := newEmu(t, w, EmuOptions{GPUOptions: GPUOptions{MaxCtx: 32, KVBits: bits}}), newEmu(t, w, EmuOptions{GPUOptions: GPUOptions{MaxCtx: 48, KVBits: bits}})
		a := e.NewSession()
		if _, err := a.Forward(g.PromptIDs[:5], false); err != nil {
			t.Fatal(err)
		}
		snap, _ := a.Save()
		data, err := e.EncodeSnapshot(snap)
		if err != nil || int64(len(data)) != snap.Bytes() {
			t.Fatalf("%d-bit KV: encode: %v, %d bytes of %d", bits, err, len(data), snap.Bytes())
		}
		encoded[bits] = data
		back, err := other.DecodeSnapshot(data, 5)
		if err != nil {
			t.Fatal(err)
		}
		b, err := back.Restore()
		if err != nil {
			t.Fatal(err)
		}
		next := g.PromptIDs[5:8]
		fromA, _ := a.Forward(next, true)
		fromB, err := b.Forward(next, true)
		if err != nil {
			t.Fatal(err)
		}
		for i := range fromA {
			if d := maxAbsDiff(fromA[i], fromB[i]); d != 0 {
				t.Fatalf("%d-bit KV: row %d: decoded snapshot differs by %g", bits, i, d)
			}
		}
		if _, err := other.DecodeSnapshot(data[:len(data)-2], 5); err == nil {
			t.Fatal("short data accepted")
		}
		if _, err := other.DecodeSnapshot(data, 6); err == nil {
			t.Fatal("data of 5 positions accepted as 6")
		}
		if bits == 8 {
			if _, err := other.DecodeSnapshot(encoded[16], 5); err == nil {
				t.Fatal("a bf16 cache's snapshot accepted by an 8-bit one")
			}
		}
		a.Close()
		b.Close()
		snap.Close()
		back.Close()
		e.Close()
		other.Close()
	}
}

// TestPrefillSkipsTheHead: prompt tokens whose logits are not returned run in ModePrefill, which
// ends after the layers (no LM head, no selection) and changes nothing the next token sees: the
// last row equals, bit for bit, the one of a prefill that computed every row.
func TestPrefillSkipsTheHead(t *testing.T) {
	dir := "../../testdata/golden/tiny-b"
	g, w := goldenWeights(t, dir)
	e := newEmu(t, w, EmuOptions{GPUOptions: GPUOptions{MaxCtx: 32}})
	p := e.Step().Plan
	for _, d := range p.Dispatches {
		if d.RunsIn(decode.ModePrefill) {
			for _, r := range d.Writes {
				if r.Buffer == e.Step().Logits {
					t.Fatalf("%s writes the logits in prefill mode", d.Kernel)
				}
			}
		}
	}
	if pre, full := p.Stats(decode.ModePrefill), p.Stats(decode.ModeGreedy); pre.Dispatches >= full.Dispatches || pre.Bytes >= full.Bytes {
		t.Fatalf("prefill mode %+v, greedy %+v", pre, full)
	}
	rows := func(all bool) [][]float32 {
		s := e.NewSession()
		defer s.Close()
		out, err := s.Forward(g.PromptIDs[:10], all)
		if err != nil {
			t.Fatal(err)
		}
		next, err := s.Forward(g.PromptIDs[10:11], false)
		if err != nil {
			t.Fatal(err)
		}
		return [][]float32{out[len(out)-1], next[0]}
	}
	every, last := rows(true), rows(false)
	for i := range every {
		if d := maxAbsDiff(every[i], last[i]); d != 0 {
			t.Fatalf("row %d: a prefill without the head differs by %g", i, d)
		}
	}
}

// TestPagesSharedAndCopiedOnWrite: a snapshot shares its session's KV pages (it copies only the
// recurrent state); the first write into a shared page copies that page alone; when the pool runs
// out, a snapshot gives its pages up (spilled to host, encoding unchanged), a restore brings them
// back, and what continues from every copy equals, bit for bit, the original's continuation.
// Closing everything returns every page.
func TestPagesSharedAndCopiedOnWrite(t *testing.T) {
	dir := "../../testdata/golden/tiny-b"
	g, w := goldenWeights(t, dir)
	e := newEmu(t, w, EmuOptions{GPUOptions: GPUOptions{MaxCtx: 64, PageSize: 16, Pages: 6}})
	ids := g.PromptIDs
	use := func(want int, when string) {
		t.Helper()
		if n := e.PagesInUse(); n != want {
			t.Fatalf("%s: %d pages in use, want %d", when, n, want)
		}
	}
	a := e.NewSession().(*Session)
	if _, err := a.Forward(ids[:20], false); err != nil {
		t.Fatal(err)
	}
	use(2, "20 positions")
	s, err := a.Save()
	if err != nil {
		t.Fatal(err)
	}
	snap := s.(*Snapshot)
	use(2, "after Save")
	var state int64
	e.step.StateSpans(20, nil, func(_ int, _, n int64) { state += n })
	if int64(len(snap.mem)) != state || snap.kv != nil || !slices.Equal(snap.pages, a.pages) {
		t.Fatalf("snapshot holds %d host bytes (state %d), kv %d, pages %v (session %v)", len(snap.mem), state, len(snap.kv), snap.pages, a.pages)
	}
	resident, err := e.EncodeSnapshot(snap)
	if err != nil {
		t.Fatal(err)
	}
	want, err := a.Forward(ids[20:21], false) // writes position 20, in the shared second page
	if err != nil {
		t.Fatal(err)
	}
	use(3, "after the first write past the snapshot")
	if a.pages[0] != snap.pages[0] || a.pages[1] == snap.pages[1] {
		t.Fatalf("session pages %v, snapshot %v: want the first shared, the second copied", a.pages, snap.pages)
	}
	continues := func(s backend.Session, who string) {
		t.Helper()
		got, err := s.Forward(ids[20:21], false)
		if err != nil {
			t.Fatal(who, err)
		}
		if d := maxAbsDiff(got[0], want[0]); d != 0 {
			t.Fatalf("%s: continuation differs by %g", who, d)
		}
	}
	b, err := snap.Restore()
	if err != nil {
		t.Fatal(err)
	}
	continues(b, "restored session")
	use(4, "two sessions and the snapshot")

	c := e.NewSession()
	if _, err := c.Forward(ids[:40], false); err != nil { // three pages: two free, one from the snapshot
		t.Fatal(err)
	}
	use(6, "after the pool ran out")
	if snap.pages != nil || snap.kv == nil {
		t.Fatal("the snapshot kept its pages when the pool ran out")
	}
	spilled, err := e.EncodeSnapshot(snap)
	if err != nil || !bytes.Equal(spilled, resident) {
		t.Fatalf("a spilled snapshot encodes differently (%v)", err)
	}
	if _, err := snap.Restore(); !errors.Is(err, ErrPoolFull) {
		t.Fatalf("restore with every page held by live sessions: %v", err)
	}
	c.Close()
	d, err := snap.Restore()
	if err != nil {
		t.Fatal(err)
	}
	if snap.pages == nil || snap.kv != nil {
		t.Fatal("a restored snapshot does not share its pages again")
	}
	continues(d, "session restored from a spilled snapshot")
	for _, x := range []backend.Session{a, b, d} {
		x.Close()
	}
	snap.Close()
	use(0, "after closing everything")
}
