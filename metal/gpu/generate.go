package gpu

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"

	"github.com/lilyformac/lily/engine/backend"
	"github.com/lilyformac/lily/engine/sample"
	"github.com/lilyformac/lily/metal/decode"
	"github.com/lilyformac/lily/metal/exec"
	"github.com/lilyformac/lily/metal/kernels"
	"github.com/lilyformac/lily/metal/plan"
)

// The generation loop keeps the token ids and the positions on the GPU: the step's selection
// (argmax_final or sample_final) writes each row's {pos+1, token} into the step buffer and the
// next step's embed_q4 reads it, so step k+1 can be committed before step k has finished (Metal
// runs the command buffers of one queue in commit order). The host must then not read the step
// buffer after waiting for step k: step k+1 may already have overwritten it. A lane's plan
// therefore ends with one step_copy per row, copying the row's step entry into half k%2 of a
// [2][R]{pos, token} readback buffer (the logprob records alternate the same way): step k+2, the
// next writer of that half, is committed only after the host has waited for step k and read it.

// lane is an executor over the R rows of a decode step's plan with the readback the generation
// loop reads: R = 1 for a session's own executor (over its row of the rows' buffers, or buffers of
// its own), R ≥ 2 for the multi-row steps over rows 0 … R−1.
type lane struct {
	x        *exec.Executor
	st       *decode.Step // the step x runs (its buffers; st.Rows rows)
	plan     *plan.Plan   // x's plan: st.Plan and the readback, its bindings rebound per step
	copies   int          // the first step_copy dispatch; row r's is copies+r
	readback int          // the readback buffer
	logprob  int          // logprob_final's dispatch
	row      int          // a one-row lane's row of the rows' buffers (rowSet); -1: buffers of its own
}

// withReadback copies st's plan (sharing the unchanged dispatches) and appends the readback buffer
// and a step_copy per row; it returns the copy, the first step_copy's index and the buffer's.
func withReadback(st *decode.Step) (p *plan.Plan, copies, readback int) {
	R := st.Rows
	p = &plan.Plan{Buffers: slices.Clone(st.Plan.Buffers), Dispatches: slices.Clone(st.Plan.Dispatches)}
	readback, copies = len(p.Buffers), len(p.Dispatches)
	p.Buffers = append(p.Buffers, plan.Buffer{Name: "readback", Size: 16 * int64(R), Kind: plan.Control})
	for r := range int64(R) {
		d := decode.Dispatch(kernels.StepCopyCall(st.Config.VocabSize, kernels.ArgmaxDefaultGroups, kernels.StepCopyBuffers[int]{Step: st.StepBuf, Slot: readback}),
			[]plan.Range{{Buffer: st.StepBuf, Offset: 8 * r, Len: 8}},
			[]plan.Range{{Buffer: readback, Offset: 8 * r, Len: 8}, {Buffer: readback, Offset: 8 * (int64(R) + r), Len: 8}})
		d.Buffers[0] = plan.Binding{Buffer: st.StepBuf, Offset: 8 * r}
		d.Barrier = r == 0 // the first copy waits for the selection to write the step entries
		p.Dispatches = append(p.Dispatches, d)
	}
	return p, copies, readback
}

// newLane makes a lane running st over dev: e.dev for a session with buffers of its own, a
// rowDevice for a row's or for rows 0 … R−1.
func (e *GPU) newLane(dev exec.Device, st *decode.Step, row int) (*lane, error) {
	p, copies, readback := withReadback(st)
	x, err := exec.New(dev, p)
	if err != nil {
		return nil, err
	}
	x.Budget = e.budget
	lp := slices.IndexFunc(p.Dispatches, func(d plan.Dispatch) bool { return d.Kernel == "logprob_final" })
	return &lane{x: x, st: st, plan: p, copies: copies, readback: readback, logprob: lp, row: row}, nil
}

// recordBytes is a row's logprob record.
const recordBytes = 4 * kernels.LogprobRecordLen

// halves are the offsets of step k's halves of the readback and logprob record buffers.
func (l *lane) halves(k int) (entries, records int64) {
	R := int64(l.st.Rows)
	return int64(k%2) * 8 * R, int64(k%2) * R * recordBytes
}

// bind points step k's readback copies and logprob records at its halves and returns their
// offsets.
func (l *lane) bind(k int) (entries, records int64) {
	entries, records = l.halves(k)
	for r := range int64(l.st.Rows) {
		d := &l.plan.Dispatches[l.copies+int(r)]
		d.Buffers[1] = plan.Binding{Buffer: l.readback, Offset: entries + 8*r}
	}
	lp := &l.plan.Dispatches[l.logprob]
	lp.Buffers[4] = plan.Binding{Buffer: lp.Buffers[4].Buffer, Offset: records}
	return entries, records
}

// rowLogits copies each row's logits after the last step out of the scratch every step shares.
func (l *lane) rowLogits() [][]float32 {
	V := l.st.Config.VocabSize
	all := decode.FloatsOf(l.x.Bytes(l.st.Logits))
	out := make([][]float32, l.st.Rows)
	for r := range out {
		out[r] = slices.Clone(all[r*V : (r+1)*V])
	}
	return out
}

// ContinueRows implements backend.Generator: each row's generation goes on on the device, the
// rows together in one multi-row step a token (one row: on its session's own executor), each row
// selecting with its own settings (greedy: the argmax of the penalised logits; sampling:
// sample_select + sample_final, bit for bit engine/sample's; greedy rows beside sampling ones as a
// top-k of 1, the same choice), two steps in flight, the host reading 8 bytes a row a step (and
// the logprob records when a row asks). Each row's sampler buffers are written first from its
// token state (prompt ids seen, the generated ones counted), logit bias, vocabulary limit (a bias
// of -inf past it) and penalty table; its draws go on from step len(Generated)−1, so a paused
// generation chooses what it would have in one go.
func (e *GPU) ContinueRows(ctx context.Context, rows []backend.GenRow) ([][]float32, error) {
	ss, err := e.genSessions(rows)
	if err != nil {
		return nil, err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	l, err := e.laneFor(ss)
	if err != nil {
		return nil, err
	}
	mode := modeFor(rows)
	for i, s := range ss {
		if err := s.setSampler(rowParams(rows[i].Params, mode), rows[i].Prompt, rows[i].Generated); err != nil {
			return nil, err
		}
	}
	l.x.Mode = mode
	g := &generation{e: e, l: l, ss: ss, rows: rows}
	steps, err := g.run(ctx)
	if steps == 0 {
		return nil, err
	}
	return l.rowLogits(), err
}

// genSessions checks that rows can run here: 1 to the rows' number of this backend's sessions,
// distinct, each with settings the device reproduces and a generated token to go on from that its
// session has not consumed yet.
func (e *GPU) genSessions(rows []backend.GenRow) ([]*Session, error) {
	if len(rows) == 0 || len(rows) > 1 && (e.rows == nil || len(rows) > len(e.rows.ones)) {
		return nil, backend.ErrNotOnDevice
	}
	ss := make([]*Session, len(rows))
	for i, r := range rows {
		s, ok := r.Session.(*Session)
		if !ok || s.e != e || !onDevice(r.Params) || slices.Contains(ss[:i], s) {
			return nil, backend.ErrNotOnDevice
		}
		if len(r.Generated) == 0 {
			return nil, fmt.Errorf("gpu: row %d has no generated token to go on from", i)
		}
		ss[i] = s
	}
	return ss, nil
}

// laneFor is the lane that runs ss: one session's own, or the multi-row lane of their number with
// the sessions moved into its rows (ErrNotOnDevice when one lives outside the rows or cannot run:
// each then goes on alone, where its Forward says why). The caller holds the step lock.
func (e *GPU) laneFor(ss []*Session) (*lane, error) {
	for _, s := range ss {
		bad := s.err
		if bad == nil && s.lane == nil {
			bad = errClosed
		}
		if bad == nil && s.verify != nil {
			bad = errUnkept
		}
		if bad == nil && s.pos == 0 {
			bad = errors.New("gpu: no prompt to generate from (feed it with Forward first)")
		}
		switch {
		case bad != nil && len(ss) == 1:
			return nil, bad
		case bad != nil || len(ss) > 1 && s.row < 0:
			return nil, backend.ErrNotOnDevice
		}
	}
	if len(ss) == 1 {
		return ss[0].lane, nil
	}
	e.arrange(ss)
	return e.rows.multi[len(ss)], nil
}

// onDevice reports whether the step reproduces p: greedy or a top-k the sampler sorts whole (with
// top-k off, or above kernels.SampleMaxK, sample_final may have to hand a step back to the host,
// which the pipelined loop cannot do), and at most kernels.LogprobTopN logprob alternatives.
func onDevice(p sample.Params) bool {
	return p.Seed != nil && p.TopLogprobs <= kernels.LogprobTopN &&
		(p.Temperature == 0 || p.TopK > 0 && p.TopK <= kernels.SampleMaxK)
}

// modeFor is the step's selection mode for rows: sampling when any row samples, with logprobs
// when any row asks for them.
func modeFor(rows []backend.GenRow) string {
	sampling, lp := false, false
	for _, r := range rows {
		sampling = sampling || r.Params.Temperature != 0
		lp = lp || r.Params.Logprobs || r.Params.TopLogprobs > 0
	}
	switch {
	case sampling && lp:
		return decode.ModeSampleLogprobs
	case sampling:
		return decode.ModeSample
	case lp:
		return decode.ModeGreedyLogprobs
	}
	return decode.ModeGreedy
}

// rowParams is a row's settings p in the step's mode: a greedy row beside sampling ones takes a
// top-k of 1 (the penalised logits' largest, ties to the lowest id: argmax's choice).
func rowParams(p sample.Params, mode string) sample.Params {
	if p.Temperature == 0 && (mode == decode.ModeSample || mode == decode.ModeSampleLogprobs) {
		p.Temperature, p.TopK, p.TopP, p.MinP = 1, 1, 0, 0
	}
	return p
}

// setSampler writes the session's sampler buffers for p: the token state of the prompt and the
// tokens generated so far (each recorded as the selection records its choice, kernels.ArgmaxRecord),
// the bias with the vocabulary limit, the penalty table. The sampler's step 0 chose the token at
// position pos−len(generated), so a paused generation's draws go on where they stopped.
func (s *Session) setSampler(p sample.Params, prompt, generated []int) error {
	V := s.e.w.Config.VocabSize
	if len(generated) > s.pos {
		return fmt.Errorf("gpu: %d generated tokens at position %d", len(generated), s.pos)
	}
	setup, err := kernels.NewSampleSetup(p, prompt, V, s.pos-len(generated), s.e.step.MaxCtx)
	if err != nil {
		return err
	}
	pr := &setup.Params
	for _, id := range generated {
		if id >= 0 {
			kernels.ArgmaxRecord(setup.State, id, pr.Flags)
		}
	}
	if p.VocabLimit > 0 && p.VocabLimit < V { // padding rows are never chosen
		if setup.Bias == nil {
			setup.Bias = make([]float32, V)
		}
		pr.Flags |= kernels.SampleFlagBias
		for id := p.VocabLimit; id < V; id++ {
			setup.Bias[id] = float32(math.Inf(-1))
		}
	}
	sb := s.e.step.Sampler
	copy(s.x.Bytes(sb.Params), decode.BytesOf(pr.Words()))
	copy(s.x.Bytes(sb.State), decode.BytesOf(setup.State))
	if setup.Bias != nil {
		copy(s.x.Bytes(sb.Bias), decode.BytesOf(setup.Bias))
	}
	if setup.Pen != nil {
		copy(s.x.Bytes(sb.Pen), decode.BytesOf(setup.Pen))
	}
	return nil
}

// generation is one run of the pipelined loop over a lane's rows: step k consumes each row's token
// k−1 (token 0: the last generated) at position start+k−1 and produces its token k.
type generation struct {
	e         *GPU
	l         *lane
	ss        []*Session
	rows      []backend.GenRow
	starts    []int // each row's position before the run
	queue     []inflight
	submitted int // steps committed
}

// inflight is a submitted step.
type inflight struct {
	p    exec.Pending
	step int
}

// run goes on until a row's OnToken stops or fails, a row's limit (Max, or the end of its KV
// cache) comes, or ctx is done, and returns the steps run: every token handed on has been consumed
// (each session's Pos grows by that many), as has the last generated one. The step in flight when a
// stop comes is the one consuming the last token handed on, so it is waited for, not discarded.
// If a step fails, the sessions are left unusable (their state is unknown).
func (g *generation) run(ctx context.Context) (int, error) {
	limit := g.limit()
	if limit <= 0 {
		return 0, fmt.Errorf("%w: a row's KV cache is full", backend.ErrNotOnDevice)
	}
	g.start()
	var cbErr error
	read, stop := 0, false
	for !stop && read+1 < limit && ctx.Err() == nil {
		for len(g.queue) < 2 && g.submitted < limit {
			if err := g.submit(); err != nil {
				return g.fail(err)
			}
		}
		f := g.queue[0]
		g.queue = g.queue[1:]
		choices, err := g.read(f)
		if err != nil {
			return g.fail(err)
		}
		read++
		stop, cbErr = g.hand(choices)
	}
	for g.submitted < read+1 { // the step for the last tokens, unless the limit kept it back
		if err := g.submit(); err != nil {
			return g.fail(err)
		}
	}
	for len(g.queue) > 0 {
		f := g.queue[0]
		g.queue = g.queue[1:]
		if err := f.p.Wait(); err != nil {
			return g.fail(err)
		}
	}
	g.finish()
	if cbErr != nil {
		return g.submitted, cbErr
	}
	return g.submitted, ctx.Err()
}

// limit is the steps the run may take: each row's Max tokens and the one it goes on from, within
// its KV cache.
func (g *generation) limit() int {
	limit := math.MaxInt
	for i, s := range g.ss {
		limit = min(limit, g.rows[i].Max+1, g.e.step.MaxCtx-s.pos)
	}
	return limit
}

// start writes each row's step entry: its position and the token it goes on from.
func (g *generation) start() {
	entries := make([]uint32, 0, 2*len(g.ss))
	for i, s := range g.ss {
		g.starts = append(g.starts, s.pos)
		entries = append(entries, uint32(s.pos), uint32(g.rows[i].Generated[len(g.rows[i].Generated)-1]))
	}
	copy(g.l.x.Bytes(g.l.st.StepBuf), decode.BytesOf(entries))
}

// submit commits the next step: each row's page for the position it writes (a new one, or before
// the first step, with nothing in flight, a copy of a shared one: the table entry it sets is one no
// step in flight reads), and its readback half marked unwritten.
func (g *generation) submit() error {
	k := g.submitted + 1
	for i, s := range g.ss {
		if err := s.ensure(g.starts[i] + k - 1); err != nil {
			return err
		}
	}
	off, _ := g.l.bind(k)
	half := g.l.x.Bytes(g.l.readback)[off:]
	for i := range g.ss {
		binary.LittleEndian.PutUint32(half[8*i:], uint32(g.starts[i]+k-1))
		binary.LittleEndian.PutUint32(half[8*i+4:], ^uint32(0))
	}
	p, err := g.l.x.Submit()
	if err != nil {
		return err
	}
	g.submitted = k
	g.queue = append(g.queue, inflight{p, k})
	return nil
}

// read waits for step f and returns each row's choice, with its logprob and alternatives when the
// row asks for them.
func (g *generation) read(f inflight) ([]sample.Choice, error) {
	if err := f.p.Wait(); err != nil {
		return nil, err
	}
	entries, records := g.l.halves(f.step)
	half := g.l.x.Bytes(g.l.readback)[entries:]
	out := make([]sample.Choice, len(g.ss))
	for i := range g.ss {
		pos := int(binary.LittleEndian.Uint32(half[8*i:]))
		if want := g.starts[i] + f.step; pos != want {
			return nil, fmt.Errorf("readback of row %d, step %d: position %d, want %d", i, f.step, pos, want)
		}
		out[i].ID = int(binary.LittleEndian.Uint32(half[8*i+4:]))
		p := g.rows[i].Params
		if !p.Logprobs && p.TopLogprobs == 0 {
			continue
		}
		rec := decode.FloatsOf(g.l.x.Bytes(g.l.st.Logprobs)[records+int64(i)*recordBytes:][:recordBytes])
		tok, lp, top := kernels.LogprobRecord(rec, p.TopLogprobs)
		if tok != out[i].ID {
			return nil, fmt.Errorf("logprobs of row %d, step %d are for token %d, not %d", i, f.step, tok, out[i].ID)
		}
		out[i].Logprob, out[i].Top = lp, top
	}
	return out, nil
}

// hand passes each row its token; stop when any row's OnToken stops or fails (the first error).
func (g *generation) hand(choices []sample.Choice) (stop bool, err error) {
	for i, c := range choices {
		if g.rows[i].OnToken == nil {
			continue
		}
		s, e := g.rows[i].OnToken(c)
		if e != nil && err == nil {
			err = e
		}
		stop = stop || s || e != nil
	}
	return stop, err
}

// finish records what the run consumed.
func (g *generation) finish() {
	for i, s := range g.ss {
		s.pos = g.starts[i] + g.submitted
	}
	if R := len(g.ss); R > 1 {
		g.e.rows.steps.Add(int64(g.submitted))
		g.e.rows.rowsRun.Add(int64(g.submitted * R))
	}
}

// fail waits for what is in flight and marks every row's session unusable.
func (g *generation) fail(err error) (int, error) {
	for _, f := range g.queue {
		_ = f.p.Wait()
	}
	g.queue = nil
	err = fmt.Errorf("gpu: a %d-row generation step failed, session unusable: %w", len(g.ss), err)
	for _, s := range g.ss {
		s.err = err
	}
	return 0, err
}
