//go:build linux

package gpu

import (
	"encoding/binary"
	"fmt"
	"math"
	"testing"

	"github.com/lilyformac/lily/engine/model"
	"github.com/lilyformac/lily/metal/decode"
	"github.com/lilyformac/lily/metal/emu"
	"github.com/lilyformac/lily/metal/exec"
)

// The multi-row decode step (decode.Options.Rows) is batch-invariant end to end: R sequences
// stepped in lockstep through one R-row plan give, row by row and position by position, the
// very logits (bit for bit) and greedy tokens the one-row plan gives each sequence alone, and a
// sequence's result does not depend on which row it runs in.
//
// The GPU backend does not run the multi-row step yet. The next step: an executor of the R-row
// plan serves up to R sessions, each living in a row slot (its rows of the step buffer, block
// table, conv windows, DeltaNet states and sampler buffers; its pages in the shared pool);
// sessions are added into free slots between steps and, when one ends, the last row's state is
// copied into its slot so the live rows stay 0..n-1 and a step runs only n rows (the plan for n
// rows reads the first n rows of every buffer).
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
