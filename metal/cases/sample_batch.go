package cases

import (
	"errors"
	"fmt"
	"math"
	"slices"

	"github.com/lilyformac/lily/engine/sample"
	"github.com/lilyformac/lily/metal/kernels"
)

// The sampler's multi-row cases: sample_penalties, sample_select, sample_final, logprob_partial
// and logprob_final over R rows in one dispatch each (kernels.Sample*RowsCall,
// kernels.Logprob*RowsCall), each row a sequence with its own logits, settings, seed, pos0,
// penalty table, bias, token states, step entry and status word, beside today's one-row
// dispatches on a copy of each row alone. Every row's token, step entry, token states, status
// and logprob record are checked against engine/sample's (the token exactly, the logprobs within
// logprobTol), and every output of the row — the penalised logits, the candidate keys (as a set:
// sample_select writes a group's slots in whatever order its threads reach them), the step
// entry, the token states, the status word, logprob_partial's and logprob_final's outputs — bit
// for bit against its one-row dispatch's.

// sampleBatchSetting is a setting a row takes, with its kind of logits.
type sampleBatchSetting struct {
	name string
	p    sample.Params
	gen  kernels.LogitGen
}

// sampleBatchSettings are the rows' settings in turn (see sampleBatchShape.setting), so rows
// beside each other differ in temperature, top-k/p, min-p, penalties and bias.
var sampleBatchSettings = []sampleBatchSetting{
	{"greedy-like", sample.Params{Temperature: 0.5, TopK: 1}, kernels.LogitGens[1]},
	{"thinking", sample.Params{Temperature: 1, TopP: 0.95, TopK: 20}, kernels.LogitGens[2]},
	{"all-penalties", sample.Params{Temperature: 0.9, TopK: 50, TopP: 0.5, MinP: 0.1, RepetitionPenalty: 1.3,
		FrequencyPenalty: 0.4, PresencePenalty: -0.3, LogitBias: map[int]float32{3: 5, 7: -100, 11: 2.5, 12: 0}}, kernels.LogitGens[0]},
	// every id a candidate: exact at n <= SampleMaxK, a CPU redo at every step above (flat logits)
	{"no-topk", sample.Params{Temperature: 1.3}, kernels.LogitGens[0]},
	{"non-thinking", sample.Params{Temperature: 0.7, TopP: 0.8, TopK: 20, PresencePenalty: 1.5}, kernels.LogitGens[2]},
	{"hot-bias", sample.Params{Temperature: 2, TopK: 300, MinP: 0.05, LogitBias: map[int]float32{0: 4, 2: -3, 100: 1.5}}, kernels.LogitGens[3]},
	{"cold", sample.Params{Temperature: 0.05, TopK: 40, FrequencyPenalty: 2, RepetitionPenalty: 0.8}, kernels.LogitGens[1]},
}

// sampleBatchShape is a multi-row sampler case's geometry: n ids in chunks, select/final
// threadgroups of threads; row r of R takes setting (r + mul·R + add) mod the settings.
type sampleBatchShape struct {
	n, chunk, threads int
	mul, add          int
}

func (s sampleBatchShape) setting(r, rows int) sampleBatchSetting {
	return sampleBatchSettings[(r+s.mul*rows+s.add)%len(sampleBatchSettings)]
}

// sampleBatchShapes: 700 ids in production threadgroups (no row can overflow SampleMaxK), and
// 1500 ids in threadgroups of 64 (the no-topk row asks for a CPU redo, the others do not).
var sampleBatchShapes = []sampleBatchShape{
	{n: 700, chunk: 256, threads: kernels.SampleThreads, mul: 1, add: 0},
	{n: 1500, chunk: 512, threads: 64, mul: 3, add: 2},
}

const (
	sampleBatchSteps     = 2  // steps per case: the second penalises the first's choices
	sampleBatchPenStride = 65 // the penalty tables' row stride (a plan's MaxCtx+1)
)

// sampleBatchCases are the sampler's multi-row cases, every shape at every R.
func sampleBatchCases() []Case {
	var out []Case
	for _, r := range qmvBatches {
		for _, s := range sampleBatchShapes {
			out = append(out, sampleBatchCase(s, r))
		}
	}
	return out
}

// sampleBatchCase samples rows sequences' next tokens, with logprobs, in one dispatch per
// kernel, beside the one-row dispatches on each row alone, for sampleBatchSteps steps.
func sampleBatchCase(s sampleBatchShape, rows int) Case {
	var ks, names []string
	for _, k := range []string{"sample_select", "sample_penalties", "sample_final", "logprob_partial", "logprob_final"} {
		ks = append(ks, fmt.Sprintf("%s+rows%d", k, rows))
	}
	for r := range rows {
		names = append(names, s.setting(r, rows).name)
	}
	return Case{
		Name:    fmt.Sprintf("%s/n%d_chunk%d_tg%d", ks[0], s.n, s.chunk, s.threads),
		Kernels: ks, Tol: logprobTol,
		Shape: fmt.Sprintf("%d rows (%v) of %d ids in chunks of %d, threadgroups of %d, each row's own settings, seed, penalty table "+
			"(rows %d floats apart), bias, token states, step entry, status and logprobs; %d steps, in one dispatch and one row at a time",
			rows, names, s.n, s.chunk, s.threads, sampleBatchPenStride, sampleBatchSteps),
		Run: func(c *Ctx) error { return runSampleBatch(c, s, rows) },
	}
}

func runSampleBatch(c *Ctx, s sampleBatchShape, rows int) error {
	in, err := newSampleBatchInputs(c, s, rows)
	if err != nil {
		return err
	}
	all := sampleBatchDispatch(c, "", s, rows, in.params, in.state, in.steps, in.bias, in.pen)
	one := make([]sampleBatchBuffers, rows)
	for r := range rows {
		one[r] = sampleBatchDispatch(c, fmt.Sprintf("row%d.", r), s, 1, recRow(in.params, r, rows), recRow(in.state, r, rows),
			recRow(in.steps, r, rows), recRow(in.bias, r, rows), recRow(in.pen, r, rows))
	}
	x := make([]float32, rows*s.n)
	return c.Steps(sampleBatchSteps, func(int) {
		for r := range rows {
			in.set[r].gen.F(c.R, recRow(x, r, rows))
		}
		c.Set(all.logits, x)
		all.poison(c)
		for r := range rows {
			c.Set(one[r].logits, recRow(x, r, rows))
			one[r].poison(c)
		}
	}, func(step int) error { return in.check(c, step, x, all, one) })
}

// sampleBatchBuffers are one dispatch chain's buffers: rows rows of each.
type sampleBatchBuffers struct {
	logits, params, state, bias, pen, adj, cand, step, status, ms, top, rec int
}

// poison refills the outputs every step must rewrite.
func (b sampleBatchBuffers) poison(c *Ctx) {
	for _, i := range []int{b.adj, b.cand, b.status, b.ms, b.top, b.rec} {
		c.Poison(i)
	}
}

// sampleBatchDispatch declares a chain's buffers (names prefixed) and adds its dispatches: the
// rows calls, or with prefix set today's one-row calls (rows 1).
func sampleBatchDispatch(c *Ctx, prefix string, s sampleBatchShape, rows int, params, state, steps []uint32, bias, pen []float32) sampleBatchBuffers {
	n, chunk, threads := s.n, s.chunk, s.threads
	groups := kernels.SampleGroups(n, chunk)
	b := sampleBatchBuffers{
		logits: c.In(prefix+"logits", make([]float32, rows*n)), params: c.In(prefix+"params", params),
		state: c.InOut(prefix+"state", state), bias: c.In(prefix+"bias", bias), pen: c.In(prefix+"penalties", pen),
		adj: c.Out(prefix+"adjusted", 4*rows*n), cand: c.Out(prefix+"candidates", 8*rows*kernels.SampleCandLen(n, chunk)),
		step: c.InOut(prefix+"step", steps), status: c.Out(prefix+"status", 4*rows),
		ms: c.Out(prefix+"ms", 8*rows*groups), top: c.Out(prefix+"top", 8*rows*groups*kernels.LogprobTopN),
		rec: c.Out(prefix+"record", 4*rows*kernels.LogprobRecordLen),
	}
	pb := kernels.SamplePenaltiesBuffers[int]{Logits: b.logits, Params: b.params, State: b.state, Bias: b.bias, Pen: b.pen, Out: b.adj}
	sb := kernels.SampleSelectBuffers[int]{Logits: b.adj, Params: b.params, Cand: b.cand}
	fb := kernels.SampleFinalBuffers[int]{Params: b.params, Cand: b.cand, Step: b.step, State: b.state, Status: b.status}
	lpb := kernels.LogprobPartialBuffers[int]{Logits: b.adj, MS: b.ms, Top: b.top}
	lfb := kernels.LogprobFinalBuffers[int]{Logits: b.adj, MS: b.ms, Top: b.top, Step: b.step, Out: b.rec}
	if prefix != "" {
		c.Add(kernels.SamplePenaltiesCall(n, chunk, pb), false)
		c.Add(kernels.SampleSelectCall(n, chunk, threads, sb), true)
		c.Add(kernels.SampleFinalCall(n, chunk, threads, fb), true)
		c.Add(kernels.LogprobPartialCall(n, chunk, lpb), true)
		c.Add(kernels.LogprobFinalCall(n, chunk, lfb), true)
		return b
	}
	c.Add(kernels.SamplePenaltiesRowsCall(n, chunk, sampleBatchPenStride, rows, pb), false)
	c.Add(kernels.SampleSelectRowsCall(n, chunk, threads, rows, sb), true)
	c.Add(kernels.SampleFinalRowsCall(n, chunk, threads, rows, fb), true)
	c.Add(kernels.LogprobPartialRowsCall(n, chunk, rows, lpb), true)
	c.Add(kernels.LogprobFinalRowsCall(n, chunk, rows, lfb), true)
	return b
}

// sampleBatchInputs are a case's rows: params [rows][16] words, token states, bias [rows][n],
// penalty tables [rows][sampleBatchPenStride], step entries [rows]{pos, token}, and beside them
// each row's engine/sample sampler and its token states as that sampler's choices record them.
type sampleBatchInputs struct {
	n, rows int
	set     []sampleBatchSetting
	cpu     []*sample.Sampler
	flags   []uint32
	redo    []bool   // the row asks for a CPU redo at every step (top_k off over more than SampleMaxK flat logits)
	pos     []uint32 // step.pos before step 0
	params  []uint32
	state   []uint32
	steps   []uint32
	bias    []float32
	pen     []float32
	want    [][]uint32 // each row's token states after the steps so far, as engine/sample chose
}

// newSampleBatchInputs prepares each row as the host would (kernels.NewSampleSetup: its own seed,
// pos0, prompt and penalty table), then records a history of forced tokens (counted and marked,
// and step.pos advanced past them, as sample.Sampler.Forced does). What a row's flags leave
// unread is junk: random counts without SampleFlagCount, random seen bits without
// SampleFlagSeen, a random bias without SampleFlagBias, NaN past the row's penalty table.
func newSampleBatchInputs(c *Ctx, s sampleBatchShape, rows int) (*sampleBatchInputs, error) {
	n := s.n
	in := &sampleBatchInputs{n: n, rows: rows}
	nan := float32(math.NaN())
	for r := range rows {
		set := s.setting(r, rows)
		seed := c.R.Uint64()
		p := set.p
		p.Seed, p.VocabLimit, p.TopLogprobs = &seed, n, kernels.LogprobTopN
		prompt := []int{1, 5, 5, n - 1, c.R.IntN(n)}
		pos0 := 41 + 13*r
		setup, err := kernels.NewSampleSetup(p, prompt, n, pos0, 20+5*r)
		if err != nil {
			return nil, err
		}
		flags := setup.Params.Flags
		cpu := sample.New(p, prompt)
		state := setup.State
		for i := range state {
			if flags&kernels.SampleFlagCount == 0 {
				state[i] |= c.R.Uint32N(4)
			}
			if flags&kernels.SampleFlagSeen == 0 && c.R.IntN(3) == 0 {
				state[i] |= kernels.TokenSeen
			}
		}
		history := 2 + r%4
		for range history {
			id := c.R.IntN(16)
			cpu.Forced(id)
			kernels.ArgmaxRecord(state, id, flags)
		}
		bias := setup.Bias
		if bias == nil {
			bias = RandFloats(c.R, n, 20)
		}
		pen := slices.Repeat([]float32{nan}, sampleBatchPenStride)
		copy(pen, setup.Pen)
		kReq := n
		if p.TopK > 0 && p.TopK < n {
			kReq = p.TopK
		}
		in.set, in.cpu, in.flags = append(in.set, set), append(in.cpu, cpu), append(in.flags, flags)
		in.redo = append(in.redo, kReq > kernels.SampleMaxK)
		in.pos = append(in.pos, uint32(pos0+history))
		in.params = append(in.params, setup.Params.Words()...)
		in.state = append(in.state, state...)
		in.steps = append(in.steps, uint32(pos0+history), uint32(7*r))
		in.bias = append(in.bias, bias...)
		in.pen = append(in.pen, pen...)
		in.want = append(in.want, slices.Clone(state))
	}
	return in, nil
}

// check compares each row after step with engine/sample's choice on its logits (x [rows][n]) —
// its step entry, status, token states and logprob record — and every output of the row, bit
// for bit, with its one-row dispatch's; then, for a row that asked for a CPU redo, it puts
// engine/sample's token into both chains' step entry and token states, as the host does.
func (in *sampleBatchInputs) check(c *Ctx, step int, x []float32, all sampleBatchBuffers, one []sampleBatchBuffers) error {
	rows := in.rows
	steps, states, status := c.U32(all.step), c.U32(all.state), c.U32(all.status)
	adj, cand, ms, top, rec := c.U32(all.adj), U64s(c.Bytes(all.cand)), c.U32(all.ms), U64s(c.Bytes(all.top)), c.U32(all.rec)
	for r := range rows {
		name := func(what string) string { return recRowName(r, rows, fmt.Sprintf("step %d: %s", step, what)) }
		want := in.cpu[r].Next(recRow(x, r, rows))
		st, state := recRow(steps, r, rows), recRow(states, r, rows)
		if st[0] != in.pos[r]+uint32(step)+1 {
			return fmt.Errorf("%s = %d, want %d", name("step.pos"), st[0], in.pos[r]+uint32(step)+1)
		}
		got := int(st[1])
		wantStatus := uint32(0)
		if in.redo[r] {
			wantStatus = 1
		}
		if status[r] != wantStatus {
			return fmt.Errorf("%s = %d, want %d (%s)", name("status"), status[r], wantStatus, in.set[r].name)
		}
		gpuState := slices.Clone(in.want[r]) // what sample_final records: its own choice
		kernels.ArgmaxRecord(gpuState, got, in.flags[r])
		kernels.ArgmaxRecord(in.want[r], want.ID, in.flags[r])
		if !in.redo[r] {
			if err := c.ID(name("token"), got, want.ID); err != nil {
				return err
			}
		}
		if err := recEqual(name("state"), state, gpuState); err != nil {
			return err
		}
		token, lp, alts := kernels.LogprobRecord(F32s(Encode(recRow(rec, r, rows))), kernels.LogprobTopN)
		if token != got || len(alts) != len(want.Top) {
			return fmt.Errorf("%s for token %d with %d alternatives, want %d and %d", name("logprob record"), token, len(alts), got, len(want.Top))
		}
		if !in.redo[r] { // engine/sample reports its own choice's
			c.note(logprobRel(lp, want.Logprob), fmt.Sprintf("%s = %g, want %g", name(fmt.Sprintf("logprob of token %d", got)), lp, want.Logprob))
		}
		for a, w := range want.Top {
			if alts[a].ID != w.ID {
				return fmt.Errorf("%s is id %d (%g), engine/sample's %d (%g)", name(fmt.Sprintf("alternative %d", a)), alts[a].ID, alts[a].Logprob, w.ID, w.Logprob)
			}
			c.note(logprobRel(alts[a].Logprob, w.Logprob), fmt.Sprintf("%s = %g, want %g", name(fmt.Sprintf("alternative %d (id %d)", a, w.ID)), alts[a].Logprob, w.Logprob))
		}
		o := one[r]
		if err := recNotInvariant(errors.Join(
			recEqual(name("adjusted"), recRow(adj, r, rows), c.U32(o.adj)),
			recEqual(name("candidates (sorted)"), sortedKeys(recRow(cand, r, rows)), sortedKeys(U64s(c.Bytes(o.cand)))),
			recEqual(name("step"), st, c.U32(o.step)),
			recEqual(name("state"), state, c.U32(o.state)),
			recEqual(name("status"), status[r:r+1], c.U32(o.status)),
			recEqual(name("ms"), recRow(ms, r, rows), c.U32(o.ms)),
			recEqual(name("top"), recRow(top, r, rows), U64s(c.Bytes(o.top))),
			recEqual(name("record"), recRow(rec, r, rows), c.U32(o.rec)))); err != nil {
			return err
		}
		if in.redo[r] { // the host resamples on the CPU: both chains take engine/sample's token
			st[1] = uint32(want.ID)
			copy(state, in.want[r])
			c.Set(o.step, slices.Clone(st))
			c.Set(o.state, slices.Clone(state))
		}
	}
	c.Set(all.step, steps)
	c.Set(all.state, states)
	return nil
}

// logprobRel is a logprob's error relative to max(1, |want|) (0 for equal values: -inf for an id
// no one may choose).
func logprobRel(got, want float32) float64 {
	if got == want {
		return 0
	}
	return math.Abs(float64(got-want)) / max(1, math.Abs(float64(want)))
}

// sortedKeys is a sorted copy of keys.
func sortedKeys(keys []uint64) []uint64 {
	out := slices.Clone(keys)
	slices.Sort(out)
	return out
}
