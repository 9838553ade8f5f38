//go:build linux

package gpu

import (
	"math"
	"testing"

	"github.com/lilyformac/lily/metal/decode"
	"github.com/lilyformac/lily/metal/exec"
)

// TestVerifyGroupsBitForBit: through a 4-row plan with verify groups (decode.Options.Verify), a
// sequence prefilled in row 0 verifies its next token and three more as one group of 4 rows
// (rows 1–3 reading and writing its pages at positions p+1 … p+3): every row's logits are the
// one-row plan's at that position, bit for bit; then for every kept count n = 1 … 4, ModeCommit
// and one plain step at p+n give the one-row plan's logits there — the conv windows and DeltaNet
// states the commit replayed are plain decoding's.
func TestVerifyGroupsBitForBit(t *testing.T) {
	g, w := goldenWeights(t, "../../testdata/golden/tiny-a")
	const p, R = 6, 4
	tokens := g.PromptIDs[:p+R+1]
	one := newEmu(t, w, EmuOptions{GPUOptions: GPUOptions{MaxCtx: 32, PageSize: 16}})
	defer one.Close()
	s := one.NewSession()
	ref, err := s.Forward(tokens, true)
	s.Close()
	if err != nil {
		t.Fatal(err)
	}
	st := one.Step()
	step, err := decode.Build(w.Config, decode.Options{MaxCtx: st.MaxCtx, PageSize: st.Attn.PageSize, KVBits: st.KVBits, Rows: R, Verify: true})
	if err != nil {
		t.Fatal(err)
	}
	lib := decodeLibrary(t)
	for n := 1; n <= R; n++ {
		x, err := exec.New(&exec.EmuDevice{Lib: lib}, step.Plan)
		if err != nil {
			t.Fatal(err)
		}
		if err := step.Upload(w, x.Bytes, nil); err != nil {
			t.Fatal(err)
		}
		step.Init(x.Bytes)
		v := verifyRun{t: t, x: x, step: step, ref: ref, tokens: tokens}
		v.prefill(p)
		v.verify(p, n == 1) // the logits do not depend on what is kept: checked once
		v.commit(p, n)
		x.Close()
	}
}

// verifyRun drives one executor of a verify plan.
type verifyRun struct {
	t      *testing.T
	x      *exec.Executor
	step   *decode.Step
	ref    [][]float32
	tokens []int
}

// run steps the plan in mode with groups and step entries (pos, token) per row.
func (v verifyRun) run(mode string, groups []uint32, entries []uint32) {
	v.t.Helper()
	copy(v.x.Bytes(v.step.Groups), decode.BytesOf(groups))
	copy(v.x.Bytes(v.step.StepBuf), decode.BytesOf(entries))
	v.x.Mode = mode
	if err := v.x.Step(); err != nil {
		v.t.Fatal(err)
	}
}

// prefill feeds tokens[:p] to row 0 (every row a group of one; rows 1–3 decode the same tokens
// in their own pages).
func (v verifyRun) prefill(p int) {
	for pos := range p {
		id := uint32(v.tokens[pos])
		v.run(decode.ModeGreedy, []uint32{1, 1, 1, 1}, []uint32{uint32(pos), id, uint32(pos), id, uint32(pos), id, uint32(pos), id})
	}
}

// verify runs tokens[p:p+4] as row 0's group of 4 (the rows' tables row 0's), checking every
// row's logits when check is set, and gives rows 1–3 their own tables back.
func (v verifyRun) verify(p int, check bool) {
	R, V := v.step.Rows, len(v.ref[0])
	tbl := v.x.Bytes(v.step.Table)
	n := len(tbl) / R
	own := append([]byte(nil), tbl...)
	for r := 1; r < R; r++ {
		copy(tbl[r*n:(r+1)*n], tbl[:n])
	}
	var entries []uint32
	for r := range R {
		entries = append(entries, uint32(p+r), uint32(v.tokens[p+r]))
	}
	v.run(decode.ModeGreedy, []uint32{uint32(R), 0, 0, 0}, entries)
	copy(tbl, own)
	if !check {
		return
	}
	logits := decode.FloatsOf(v.x.Bytes(v.step.Logits))
	for r := range R {
		sameBits(v.t, "verify row", r, logits[r*V:(r+1)*V], v.ref[p+r])
	}
}

// commit keeps n of the group's rows, then steps row 0 at p+n and checks its logits.
func (v verifyRun) commit(p, n int) {
	copy(v.x.Bytes(v.step.Keep), decode.BytesOf([]uint32{uint32(n), 0, 0, 0}))
	v.run(decode.ModeCommit, []uint32{1, 1, 1, 1}, make([]uint32, 2*v.step.Rows))
	id := uint32(v.tokens[p+n])
	q := uint32(p + n)
	v.run(decode.ModeGreedy, []uint32{1, 1, 1, 1}, []uint32{q, id, 0, 0, 0, 0, 0, 0})
	V := len(v.ref[0])
	sameBits(v.t, "after keeping rows", n, decode.FloatsOf(v.x.Bytes(v.step.Logits))[:V], v.ref[p+n])
}

// sameBits requires got and want equal bit for bit.
func sameBits(t *testing.T, what string, i int, got, want []float32) {
	t.Helper()
	for j := range want {
		if math.Float32bits(got[j]) != math.Float32bits(want[j]) {
			t.Fatalf("%s %d: logit %d is %v, the one-row plan's %v", what, i, j, got[j], want[j])
		}
	}
}
