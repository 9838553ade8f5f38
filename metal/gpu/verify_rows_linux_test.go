//go:build linux

package gpu

import (
	"bytes"
	"math/rand/v2"
	"testing"

	"github.com/lilyformac/lily/engine/backend"
	"github.com/lilyformac/lily/metal/decode"
)

// TestVerifyRowsInSteps: through the backend (StepRows with Verify rows, then Keep), a sequence's
// next token and K drafts verified as a group of rows of a multi-row step give the one-row
// decode's logits bit for bit, and after keeping any n of the K+1 rows (every n for K = 1 … 3;
// 1, 5 and 8 for K = 7, the most a step runs) the session's whole state — DeltaNet states, conv
// windows, step entry, KV rows — is plain decoding's after those n tokens, byte for byte. Mixed with plain rows of other sessions, and
// lending its draft rows to sessions living in them but not stepping, none of them changes: their
// next logits are still their own. A Keep after another multi-row step has overwritten the rings
// replays the kept tokens instead, with the same result.
func TestVerifyRowsInSteps(t *testing.T) {
	_, w := goldenWeights(t, "../../testdata/golden/tiny-a")
	const ctx = 64
	rng := rand.New(rand.NewPCG(7, 34))
	seqs := make([][]int, 3)
	for i := range seqs {
		for range ctx {
			seqs[i] = append(seqs[i], rng.IntN(w.Config.VocabSize))
		}
	}
	// The references: each sequence alone, token by token through the one-row step.
	alone := newEmu(t, w, EmuOptions{GPUOptions: GPUOptions{MaxCtx: ctx, Parallel: 1}})
	defer alone.Close()
	refs := make([]*refSeq, len(seqs))
	for i, sq := range seqs {
		refs[i] = newRefSeq(t, alone, sq)
	}
	e := newEmu(t, w, EmuOptions{GPUOptions: GPUOptions{MaxCtx: ctx, Parallel: 8}})
	defer e.Close()
	v := &verifyCase{t: t, e: e, seqs: seqs, refs: refs}
	a, b, c := v.start(0, 6), v.start(1, 4), v.start(2, 9)
	// a alone: every K and every kept count, its draft rows lent from b's and c's rows.
	for K := 1; K <= 3; K++ {
		for n := 1; n <= K+1; n++ {
			v.step(a, K)
			v.keep(a, n)
		}
	}
	for _, n := range []int{1, 5, 8} { // the most a step runs: 7 drafts
		v.step(a, 7)
		v.keep(a, n)
	}
	v.step(b, 0, c, 0) // b and c go on as if nothing had run in their rows
	// Mixed with plain rows, the group first, last or between them.
	v.step(a, 1, b, 0, c, 0)
	v.keep(a, 2)
	v.step(c, 0, a, 0, b, 2)
	v.keep(b, 1)
	v.step(c, 1, a, 1)
	v.keep(c, 2)
	v.keep(a, 1)
	// A Keep after another multi-row step (the rings overwritten, a moved to another row).
	v.step(a, 2)
	row := a.s.row
	v.step(b, 0, c, 0)
	if a.s.row == row {
		t.Fatalf("a stayed in row %d", row)
	}
	v.keep(a, 2)
	v.step(a, 0, b, 0, c, 0)
	for _, l := range []*liveSeq{a, b, c} {
		l.s.Close()
	}
	steps, rows := e.Batched()
	if steps != 19 {
		t.Fatalf("%d multi-row steps (%d rows), want 19", steps, rows)
	}
	t.Logf("%d rows checked bit for bit, %d states byte for byte; %d multi-row steps of %d rows", v.rows, v.states, steps, rows)
}

// refSeq is a sequence decoded alone: its logits after every position, and a session that
// advances through it for its state.
type refSeq struct {
	logits [][]float32
	s      *Session
}

func newRefSeq(t *testing.T, e *GPU, seq []int) *refSeq {
	s := e.NewSession()
	logits, err := s.Forward(seq, true)
	s.Close()
	if err != nil {
		t.Fatal(err)
	}
	return &refSeq{logits: logits, s: e.NewSession().(*Session)}
}

// state is the reference session's state after pos tokens (advancing it there).
func (r *refSeq) state(t *testing.T, seq []int, pos int) []byte {
	if pos < r.s.pos {
		t.Fatalf("the reference is at %d, past %d", r.s.pos, pos)
	}
	if pos > r.s.pos {
		for _, id := range seq[r.s.pos:pos] {
			if _, err := r.s.Forward([]int{id}, true); err != nil {
				t.Fatal(err)
			}
		}
	}
	return stateBytes(r.s)
}

// stateBytes is everything s holds of its sequence (decode.Step.StateSpans with its table).
func stateBytes(s *Session) []byte {
	st := s.e.step
	table := decode.U32sOf(s.x.Bytes(st.Table))
	var out []byte
	st.StateSpans(s.pos, table, func(buf int, off, n int64) { out = append(out, s.x.Bytes(buf)[off:off+n]...) })
	return out
}

// verifyCase drives the backend under test.
type verifyCase struct {
	t            *testing.T
	e            *GPU
	seqs         [][]int
	refs         []*refSeq
	rows, states int
}

// liveSeq is a session of the backend under test on sequence seq.
type liveSeq struct {
	s   *Session
	seq int
}

func (v *verifyCase) start(seq, prompt int) *liveSeq {
	s := v.e.NewSession().(*Session)
	if _, err := s.Forward(v.seqs[seq][:prompt], false); err != nil {
		v.t.Fatal(err)
	}
	return &liveSeq{s, seq}
}

// step runs one StepRows over pairs (session, k): each session's next token and k drafts (the
// sequence's own next tokens) as a Verify row when k > 0. Every row's logits must be its
// sequence's alone.
func (v *verifyCase) step(pairs ...any) {
	v.t.Helper()
	var rows []backend.Row
	var ls []*liveSeq
	for i := 0; i < len(pairs); i += 2 {
		l, k := pairs[i].(*liveSeq), pairs[i+1].(int)
		p := l.s.Pos()
		rows = append(rows, backend.Row{Session: l.s, Tokens: v.seqs[l.seq][p : p+1+k], Verify: k > 0})
		ls = append(ls, l)
	}
	from := make([]int, len(ls))
	for i, l := range ls {
		from[i] = l.s.Pos()
	}
	for i, res := range v.e.StepRows(rows) {
		if res.Err != nil {
			v.t.Fatal(res.Err)
		}
		got := res.Rows
		if !rows[i].Verify {
			got = [][]float32{res.Logits}
		}
		for j, row := range got {
			sameBits(v.t, "row at position", from[i]+j, row, v.refs[ls[i].seq].logits[from[i]+j])
			v.rows++
		}
	}
}

// keep keeps n of l's verified tokens and checks its state against plain decoding's.
func (v *verifyCase) keep(l *liveSeq, n int) {
	v.t.Helper()
	if err := l.s.Keep(n); err != nil {
		v.t.Fatal(err)
	}
	want := v.refs[l.seq].state(v.t, v.seqs[l.seq], l.s.pos)
	if got := stateBytes(l.s); !bytes.Equal(got, want) {
		v.t.Fatalf("sequence %d after keeping %d: its state (%d bytes) is not plain decoding's (%d)", l.seq, n, len(got), len(want))
	}
	v.states++
}
