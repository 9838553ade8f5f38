//go:build linux

package gpu

import (
	"context"
	"fmt"
	"math"
	"slices"
	"testing"

	"github.com/lilyformac/lily/engine/backend"
	"github.com/lilyformac/lily/engine/model"
	"github.com/lilyformac/lily/engine/sample"
	"github.com/lilyformac/lily/metal/decode"
	"github.com/lilyformac/lily/metal/emu"
	"github.com/lilyformac/lily/metal/exec"
	"github.com/lilyformac/lily/metal/kernels"
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
			checkRows(t, EmuOptions{GPUOptions: GPUOptions{MaxCtx: 32, PageSize: 16, KVBits: c.kvBits}}, c.positions)
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
	checkOwnPages(t, step, decode.U32sOf(x.Bytes(step.Table)))
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
		after := decode.U32sOf(x.Bytes(step.StepBuf))
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

// The backend's multi-row step (StepRows): sessions at different positions, stepped together
// while sessions end, start, prefill beside them and live beyond the rows, each get at every
// position the very logits the session gets alone, and the batched ones are moved into rows
// 0 … R−1 in the step's order.
func TestStepRowsMatchAlone(t *testing.T) {
	g, w := goldenWeights(t, "../../testdata/golden/tiny-a")
	e := newEmu(t, w, EmuOptions{GPUOptions: GPUOptions{MaxCtx: 32, PageSize: 16, Parallel: 3}})
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
			// In rows 0 … n−1, in the order of the rows they lived in (so a step of the sessions
			// the last one ran moves none).
			for i, s := range slices.SortedFunc(slices.Values(inRows), func(a, b *Session) int { return a.row - b.row }) {
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
	step([]*live{c, a}, nil, 0) // a stays in row 0, c moves into b's free row 1
	d := start(3, 2)            // the free row, 2 (c's before)
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

// The multi-row plan's sampler: rows with different settings (seeds, temperatures, top-k/p,
// min-p, penalties, bias), stepped together in the sample+logprobs mode with each row's sampler
// buffers written as the backend writes one session's, choose every token, and write every
// logprob record, bit for bit as the one-row plan does for that row alone; the first token is
// also engine/sample's choice from the logits.
func TestRowsSampleLikeOneRow(t *testing.T) {
	g, w := goldenWeights(t, "../../testdata/golden/tiny-a")
	const L, K = 6, 5
	prompts := [][]int{g.PromptIDs[0:L], g.PromptIDs[20 : 20+L], g.PromptIDs[40 : 40+L]}
	seed := func(v uint64) *uint64 { return &v }
	bias := map[int]float32{prompts[2][1]: 3, 7: -2}
	params := []sample.Params{
		{Temperature: 0.8, TopK: 20, Seed: seed(5), Logprobs: true},
		{Temperature: 1, TopK: 40, TopP: 0.9, RepetitionPenalty: 1.3, PresencePenalty: 0.5, FrequencyPenalty: 0.3, Seed: seed(9), Logprobs: true},
		{Temperature: 0.6, TopK: 8, MinP: 0.05, LogitBias: bias, Seed: seed(11), Logprobs: true},
	}
	lib := decodeLibrary(t)
	o := decode.Options{MaxCtx: 16, PageSize: 16}
	var alone [][]uint32   // [row][K] tokens
	var records [][]uint32 // [row][K·record] bits
	for r := range prompts {
		tok, rec := runSampled(t, lib, w, o, prompts[r:r+1], params[r:r+1], K)
		alone, records = append(alone, tok[0]), append(records, rec[0])
	}
	tok, rec := runSampled(t, lib, w, o, prompts, params, K)
	for r := range prompts {
		if !slices.Equal(tok[r], alone[r]) || !slices.Equal(rec[r], records[r]) {
			t.Fatalf("row %d: tokens %v, alone %v (records equal: %v)", r, tok[r], alone[r], slices.Equal(rec[r], records[r]))
		}
	}
	t.Logf("3 rows × %d tokens sampled as each row alone: %v", K, tok)
}

// runSampled runs len(prompts) sequences (prompts of one length) through the plan of that many
// rows: the prompts but their last token in the prefill mode, then K steps of the sample+logprobs
// mode from each row's settings (pos0 the last prompt token's position: its step draws step 0),
// the tokens chosen on the device. It returns each row's tokens and logprob records' bits, and
// checks the first token against engine/sample's choice from the first step's logits.
func runSampled(t *testing.T, lib *emu.Library, w *model.Weights, o decode.Options, prompts [][]int, params []sample.Params, K int) ([][]uint32, [][]uint32) {
	t.Helper()
	R, V, L := len(prompts), w.Config.VocabSize, len(prompts[0])
	o.Rows = R
	st, err := decode.Build(w.Config, o)
	if err != nil {
		t.Fatal(err)
	}
	x, err := exec.New(&exec.EmuDevice{Lib: lib}, st.Plan)
	if err != nil {
		t.Fatal(err)
	}
	defer x.Close()
	if err := st.Upload(w, x.Bytes, nil); err != nil {
		t.Fatal(err)
	}
	st.Init(x.Bytes)
	entries := func(pos int) {
		var e []uint32
		for _, p := range prompts {
			e = append(e, uint32(pos), uint32(p[pos]))
		}
		copy(x.Bytes(st.StepBuf), decode.BytesOf(e))
	}
	x.Mode = decode.ModePrefill
	for pos := range L - 1 {
		entries(pos)
		if err := x.Step(); err != nil {
			t.Fatal(err)
		}
	}
	sb, pen := st.Sampler, o.MaxCtx+1
	for r, p := range params {
		setup, err := kernels.NewSampleSetup(p, prompts[r], V, L-1, o.MaxCtx)
		if err != nil {
			t.Fatal(err)
		}
		if setup.Bias != nil {
			setup.Params.Flags |= kernels.SampleFlagBias
			copy(x.Bytes(sb.Bias)[4*r*V:], decode.BytesOf(setup.Bias))
		}
		copy(x.Bytes(sb.Params)[4*16*r:], decode.BytesOf(setup.Params.Words()))
		copy(x.Bytes(sb.State)[4*r*V:], decode.BytesOf(setup.State))
		copy(x.Bytes(sb.Pen)[4*r*pen:], decode.BytesOf(setup.Pen))
	}
	entries(L - 1)
	x.Mode = decode.ModeSampleLogprobs
	tokens, recs := make([][]uint32, R), make([][]uint32, R)
	const rec = kernels.LogprobRecordLen
	for k := range K {
		if err := x.Step(); err != nil {
			t.Fatal(err)
		}
		steps, all := decode.U32sOf(x.Bytes(st.StepBuf)), decode.U32sOf(x.Bytes(st.Logprobs))
		for r := range R {
			if steps[2*r] != uint32(L+k) {
				t.Fatalf("row %d, step %d: position %d", r, k, steps[2*r])
			}
			tokens[r] = append(tokens[r], steps[2*r+1])
			recs[r] = append(recs[r], all[r*rec:(r+1)*rec]...) // half 0: the binding's offset stays 0
			if k == 0 {
				logits := decode.FloatsOf(x.Bytes(st.Logits))[r*V : (r+1)*V]
				if c := sample.New(params[r], prompts[r]).Next(logits); uint32(c.ID) != steps[2*r+1] {
					t.Fatalf("row %d of %d: the device chose %d, engine/sample %d", r, R, steps[2*r+1], c.ID)
				}
			}
		}
	}
	return tokens, recs
}

// ContinueRows: sequences generating together on the device (greedy with logprobs beside seeded
// sampling with penalties) produce each the tokens, logprobs and final logits it does alone (one
// row, on its session's own executor: the same loop); when one row stops the batch, the others go
// on in a new batch from where they were.
func TestContinueRowsLikeAlone(t *testing.T) {
	g, w := goldenWeights(t, "../../testdata/golden/tiny-a")
	e := newEmu(t, w, EmuOptions{GPUOptions: GPUOptions{MaxCtx: 32, PageSize: 16, Parallel: 3}})
	defer e.Close()
	seed := func(v uint64) *uint64 { return &v }
	prompts := [][]int{g.PromptIDs[0:5], g.PromptIDs[20:27], g.PromptIDs[40:43]}
	params := []sample.Params{
		{Seed: seed(1), Logprobs: true, TopLogprobs: 3},
		{Temperature: 0.8, TopK: 20, Seed: seed(5)},
		{Temperature: 1, TopK: 40, TopP: 0.9, RepetitionPenalty: 1.2, PresencePenalty: 0.4, Seed: seed(9)},
	}
	const K = 6
	// start feeds a prompt and picks its first token on the host, as the engine loop does.
	start := func(r int) (backend.Session, int) {
		s := e.NewSession()
		logits, err := s.Forward(prompts[r], false)
		if err != nil {
			t.Fatal(err)
		}
		return s, sample.New(params[r], prompts[r]).Next(logits[0]).ID
	}
	alone := make([][]int, len(prompts))
	aloneLogits := make([][]float32, len(prompts))
	var aloneChoices []sample.Choice // row 0's, with logprobs
	for r := range prompts {
		s, first := start(r)
		alone[r] = []int{first}
		last, err := e.ContinueRows(context.Background(), []backend.GenRow{{Session: s, Params: params[r], Prompt: prompts[r], Generated: []int{first}, Max: K,
			OnToken: func(c sample.Choice) (bool, error) {
				alone[r] = append(alone[r], c.ID)
				if r == 0 {
					aloneChoices = append(aloneChoices, c)
				}
				return false, nil
			}}})
		s.Close()
		if err != nil {
			t.Fatal(err)
		}
		aloneLogits[r] = last[0]
	}
	together := make([][]int, len(prompts))
	sess := make([]backend.Session, len(prompts))
	for r := range prompts {
		var first int
		sess[r], first = start(r)
		together[r] = []int{first}
	}
	var togetherChoices []sample.Choice
	run := func(rs []int, stopRow, stopAt int) [][]float32 {
		t.Helper()
		var rows []backend.GenRow
		for _, r := range rs {
			rows = append(rows, backend.GenRow{Session: sess[r], Params: params[r], Prompt: prompts[r], Generated: slices.Clone(together[r]),
				Max: K + 1 - len(together[r]), OnToken: func(c sample.Choice) (bool, error) {
					together[r] = append(together[r], c.ID)
					if r == 0 {
						togetherChoices = append(togetherChoices, c)
					}
					return r == stopRow && len(together[r]) == stopAt, nil
				}})
		}
		last, err := e.ContinueRows(context.Background(), rows)
		if err != nil {
			t.Fatal(err)
		}
		return last
	}
	last := run([]int{0, 1, 2}, 1, 3) // row 1 stops everyone after its third token
	for r := range prompts {
		if len(together[r]) != 3 {
			t.Fatalf("row %d: %d tokens after the stop, want 3", r, len(together[r]))
		}
	}
	sess[1].Close()
	// Every token passed on is consumed: the host picks each row's next one from its logits, as
	// the engine loop does, and the others go on, in other rows.
	for _, r := range []int{0, 2} {
		smp := sample.New(params[r], prompts[r])
		for _, id := range together[r] {
			smp.Forced(id)
		}
		together[r] = append(together[r], smp.Next(last[r]).ID)
	}
	last = run([]int{2, 0}, -1, 0)
	for i, r := range []int{2, 0} {
		if !slices.Equal(together[r], alone[r]) {
			t.Fatalf("row %d: together %v, alone %v", r, together[r], alone[r])
		}
		for k := range last[i] {
			if math.Float32bits(last[i][k]) != math.Float32bits(aloneLogits[r][k]) {
				t.Fatalf("row %d: final logit %d is %v, alone %v", r, k, last[i][k], aloneLogits[r][k])
			}
		}
	}
	if !slices.Equal(together[1], alone[1][:3]) {
		t.Fatalf("row 1: together %v, alone %v", together[1], alone[1])
	}
	// Row 0's logprobs, but for the token the host chose between the runs.
	want := slices.Concat(aloneChoices[:2], aloneChoices[3:])
	if len(togetherChoices) != len(want) {
		t.Fatalf("row 0: %d choices together, %d alone", len(togetherChoices), len(want))
	}
	for i, c := range togetherChoices {
		if w := want[i]; c.ID != w.ID || math.Float32bits(c.Logprob) != math.Float32bits(w.Logprob) || !slices.Equal(c.Top, w.Top) || len(c.Top) != 3 {
			t.Fatalf("row 0, choice %d: together %+v, alone %+v", i, c, w)
		}
	}
	sess[0].Close()
	sess[2].Close()
	t.Logf("together as alone: %v", together)
}
