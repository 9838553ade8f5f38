//go:build linux

package gpu

import (
	"encoding/binary"
	"fmt"
	"math"
	"testing"

	"github.com/lilyformac/lily/engine/backend"
	"github.com/lilyformac/lily/engine/model"
	"github.com/lilyformac/lily/metal/decode"
	"github.com/lilyformac/lily/metal/emu"
	"github.com/lilyformac/lily/metal/exec"
)

// The multi-row decode step (decode.Options.Rows) is batch-invariant end to end: R sequences
// stepped in lockstep through one R-row plan give, row by row and position by position, the
// very logits (bit for bit) and greedy tokens the one-row plan gives each sequence alone, and a
// sequence's result does not depend on which row it runs in. (The backend runs it: rows.go,
// TestStepRowsMatchAlone.)
func TestRowsMatchOneRowBitForBit(t *testing.T) {
	// Pages of 16 positions: the bf16 run's 18 positions cross from each row's first page into
	// its second; the int8 KV cache runs shorter.
	for _, c := range []struct {
		kvBits, positions int
	}{{16, 18}, {8, 6}} {
		t.Run(fmt.Sprintf("kv%d", c.kvBits), func(t *testing.T) {
			checkRows(t, EmuOptions{MaxCtx: 32, PageSize: 16, KVBits: c.kvBits}, c.positions)
		})
	}
}

// checkRows runs three prompts of L tokens (a) each alone through the one-row plan and (b)
// together through a 3-row plan, then two of them through a 2-row plan in the other order, and
// compares every row at every position.
func checkRows(t *testing.T, eo EmuOptions, L int) {
	g, w := goldenWeights(t, "../../testdata/golden/tiny-a")
	prompts := [][]int{g.PromptIDs[0:L], g.PromptIDs[20 : 20+L], g.PromptIDs[40 : 40+L]}
	one := newEmu(t, w, eo)
	defer one.Close()
	ref := make([][][]float32, len(prompts)) // [sequence][position][vocab]
	for i, p := range prompts {
		s := one.NewSession()
		rows, err := s.Forward(p, true)
		s.Close()
		if err != nil {
			t.Fatal(err)
		}
		ref[i] = rows
	}
	lib := decodeLibrary(t)
	st := one.Step() // the same context, pages and KV format: the same attention splits
	o := decode.Options{MaxCtx: st.MaxCtx, PageSize: st.Attn.PageSize, KVBits: st.KVBits}
	n := runRows(t, lib, w, o, prompts, ref)
	// The same sequences in the other order: row 0 now holds what row 1 held, and the reverse.
	n += runRows(t, lib, w, o, [][]int{prompts[1], prompts[0]}, [][][]float32{ref[1], ref[0]})
	if n != (3+2)*L {
		t.Fatalf("%d rows compared, want %d", n, 5*L)
	}
	t.Logf("%d rows×positions bit-identical to the one-row plan (%d positions, KV %d-bit, %d-position pages)", n, L, st.KVBits, st.Attn.PageSize)
}

// runRows steps len(prompts) sequences through one multi-row plan and checks each row after
// every step against the one-row logits ref[row][position]; it returns the rows it compared.
func runRows(t *testing.T, lib *emu.Library, w *model.Weights, o decode.Options, prompts [][]int, ref [][][]float32) int {
	t.Helper()
	R, V := len(prompts), w.Config.VocabSize
	o.Rows = R
	step, err := decode.Build(w.Config, o)
	if err != nil {
		t.Fatal(err)
	}
	x, err := exec.New(&exec.EmuDevice{Lib: lib}, step.Plan)
	if err != nil {
		t.Fatal(err)
	}
	defer x.Close()
	if err := step.Upload(w, x.Bytes, nil); err != nil {
		t.Fatal(err)
	}
	step.Init(x.Bytes) // each row its own pages of the pool
	checkOwnPages(t, step, uint32sOf(x.Bytes(step.Table)))
	x.Mode = decode.ModeGreedy
	compared := 0
	for pos := range len(prompts[0]) {
		entries := make([]uint32, 0, 2*R)
		for _, p := range prompts {
			entries = append(entries, uint32(pos), uint32(p[pos]))
		}
		copy(x.Bytes(step.StepBuf), decode.BytesOf(entries))
		if err := x.Step(); err != nil {
			t.Fatalf("position %d: %v", pos, err)
		}
		logits := decode.FloatsOf(x.Bytes(step.Logits))
		after := uint32sOf(x.Bytes(step.StepBuf))
		for r := range R {
			got, want := logits[r*V:(r+1)*V], ref[r][pos]
			for i := range want {
				if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
					t.Fatalf("%d rows, row %d, position %d: logit %d is %v, the one-row step's %v", R, r, pos, i, got[i], want[i])
				}
			}
			if after[2*r] != uint32(pos+1) || after[2*r+1] != uint32(argmax(want)) {
				t.Fatalf("%d rows, row %d, position %d: step entry {%d, %d}, want {%d, %d}", R, r, pos, after[2*r], after[2*r+1], pos+1, argmax(want))
			}
			compared++
		}
	}
	return compared
}

// checkOwnPages checks that Init gave no two rows the same pool page.
func checkOwnPages(t *testing.T, step *decode.Step, tables []uint32) {
	t.Helper()
	owner := map[uint32]int{}
	n := step.Attn.TableLen()
	for r := range step.Rows {
		for _, p := range tables[r*n : (r+1)*n] {
			if o, ok := owner[p]; ok && o != r {
				t.Fatalf("rows %d and %d share pool page %d", o, r, p)
			}
			owner[p] = r
		}
	}
}

// uint32sOf is b's little-endian uint32 words.
func uint32sOf(b []byte) []uint32 {
	out := make([]uint32, len(b)/4)
	for i := range out {
		out[i] = binary.LittleEndian.Uint32(b[4*i:])
	}
	return out
}

// The backend's multi-row step (StepRows): sessions at different positions, stepped together
// while sessions end, start, prefill beside them and live beyond the rows, each get at every
// position the very logits the session gets alone, and the batched ones are moved into rows
// 0 … R−1 in the step's order.
func TestStepRowsMatchAlone(t *testing.T) {
	g, w := goldenWeights(t, "../../testdata/golden/tiny-a")
	e := newEmu(t, w, EmuOptions{MaxCtx: 32, PageSize: 16, Parallel: 3})
	defer e.Close()
	seqs := [][]int{g.PromptIDs[0:20], g.PromptIDs[20:40], g.PromptIDs[40:60], g.PromptIDs[5:25], g.PromptIDs[30:50]}
	ref := make([][][]float32, len(seqs)) // [sequence][position][vocab]: alone
	for i, sq := range seqs {
		s := e.NewSession()
		rows, err := s.Forward(sq, true)
		s.Close()
		if err != nil {
			t.Fatal(err)
		}
		ref[i] = rows
	}
	type live struct {
		s   backend.Session
		seq int
	}
	start := func(seq, prompt int) *live {
		s := e.NewSession()
		if _, err := s.Forward(seqs[seq][:prompt], false); err != nil {
			t.Fatal(err)
		}
		return &live{s, seq}
	}
	compared, batched := 0, 0
	step := func(ls []*live, prefill *live, n int) {
		t.Helper()
		var rows []backend.Row
		for _, l := range ls {
			p := l.s.Pos()
			rows = append(rows, backend.Row{Session: l.s, Tokens: seqs[l.seq][p : p+1]})
		}
		if prefill != nil {
			p := prefill.s.Pos()
			rows = append(rows, backend.Row{Session: prefill.s, Tokens: seqs[prefill.seq][p : p+n]})
		}
		res := e.StepRows(rows)
		for i, r := range rows {
			if res[i].Err != nil {
				t.Fatal(res[i].Err)
			}
			l := ls[min(i, len(ls)-1)]
			if i == len(ls) {
				l = prefill
			}
			want := ref[l.seq][r.Session.Pos()-1]
			for k := range want {
				if math.Float32bits(res[i].Logits[k]) != math.Float32bits(want[k]) {
					t.Fatalf("sequence %d at position %d (row %d of %d): logit %d is %v, alone %v", l.seq, r.Session.Pos()-1, i, len(rows), k, res[i].Logits[k], want[k])
				}
			}
			compared++
		}
		var inRows []*Session
		for _, l := range ls {
			if s := l.s.(*Session); s.row >= 0 {
				inRows = append(inRows, s)
			}
		}
		if len(inRows) >= 2 {
			for i, s := range inRows {
				if s.row != i {
					t.Fatalf("a batched session is in row %d, want %d", s.row, i)
				}
			}
			batched += len(inRows)
		}
	}
	a, b, c := start(0, 5), start(1, 3), start(2, 7)
	for range 3 {
		step([]*live{a, b, c}, nil, 0)
	}
	b.s.Close()
	step([]*live{c, a}, nil, 0) // c swaps rows with a, which moves on into b's free row
	d := start(3, 2)            // the free row, 2
	step([]*live{c, a}, d, 4)   // d prefills beside them
	step([]*live{d, c, a}, nil, 0)
	x := start(4, 6) // beyond the three rows: its own executor
	if x.s.(*Session).row != -1 {
		t.Fatalf("a fourth session took row %d of 3", x.s.(*Session).row)
	}
	for range 2 {
		step([]*live{a, x, d, c}, nil, 0)
	}
	a.s.Close()
	step([]*live{x, d}, nil, 0) // one batchable row: Forward
	for _, l := range []*live{c, d, x} {
		l.s.Close()
	}
	if compared != 3*3+2+3+3+2*4+2 || batched != 3*3+2+2+3+2*3 {
		t.Fatalf("%d rows compared, %d of them batched", compared, batched)
	}
	t.Logf("%d rows bit-identical to the sessions alone, %d of them in multi-row steps", compared, batched)
}
