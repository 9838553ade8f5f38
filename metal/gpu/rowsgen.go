package gpu

import (
	"context"
	"encoding/binary"
	"fmt"
	"slices"

	"github.com/lilyformac/lily/engine/backend"
	"github.com/lilyformac/lily/engine/sample"
	"github.com/lilyformac/lily/metal/decode"
	"github.com/lilyformac/lily/metal/exec"
	"github.com/lilyformac/lily/metal/kernels"
	"github.com/lilyformac/lily/metal/plan"
)

// rowsLoop is a multi-row plan with its readback: the R-row step, then one step_copy per row
// copying the row's step entry into the row's slot of a [2][R]{pos, token} readback buffer, the
// pipelined loop's (generate.go) for R sequences at once.
type rowsLoop struct {
	x     *exec.Executor
	plan  *plan.Plan
	first int // the first step_copy dispatch; row r's is first+r
	slots int // the readback buffer
}

// newRowsLoop makes the R-row loop's executor over rows 0 … R−1 (rowDevice).
func (e *GPU) newRowsLoop(st *decode.Step) (*rowsLoop, error) {
	R, p := st.Rows, st.Plan
	q := &plan.Plan{Buffers: slices.Clone(p.Buffers), Dispatches: slices.Clone(p.Dispatches)}
	slots := len(q.Buffers)
	q.Buffers = append(q.Buffers, plan.Buffer{Name: "readback.rows", Size: 16 * int64(R), Kind: plan.Control})
	first := len(q.Dispatches)
	for r := range R {
		d := decode.Dispatch(kernels.StepCopyCall(st.Config.VocabSize, kernels.ArgmaxDefaultGroups, kernels.StepCopyBuffers[int]{Step: st.StepBuf, Slot: slots}),
			[]plan.Range{{Buffer: st.StepBuf, Offset: 8 * int64(r), Len: 8}}, []plan.Range{{Buffer: slots, Offset: 8 * int64(r), Len: 8}})
		d.Buffers[0] = plan.Binding{Buffer: st.StepBuf, Offset: 8 * int64(r)}
		d.Buffers[1] = plan.Binding{Buffer: slots, Offset: 8 * int64(r)} // slot's: rebound per step
		// The first copy waits for the selection to write the step entries.
		d.Barrier = r == 0
		q.Dispatches = append(q.Dispatches, d)
	}
	x, err := exec.New(rowDevice{e.dev, 0, R}, q)
	if err != nil {
		return nil, err
	}
	x.Budget = e.budget
	return &rowsLoop{x: x, plan: q, first: first, slots: slots}, nil
}

// slot points step k's readback at slot k%2 and returns that slot's offset.
func (l *rowsLoop) slot(k, R int) int64 {
	off := int64(k%2) * 8 * int64(R)
	for r := range R {
		l.plan.Dispatches[l.first+r].Buffers[1] = plan.Binding{Buffer: l.slots, Offset: off + 8*int64(r)}
	}
	return off
}

// ContinueRows implements backend.RowsGenerator: the sequences' generations go on together on the
// device, each row selecting with its own settings in one multi-row step (greedy rows as a top-k
// of 1 when others sample: the same choice), two steps in flight, the host reading 8 bytes a row
// a step. It ends when any row's onToken stops (or fails), a stop id or a row's limit comes, or
// ctx is done, and returns each row's logits after its last token (Generator.Continue's state
// rule, row by row). ErrNotOnDevice: a row cannot run here (settings, not in a row), nothing
// consumed.
func (e *GPU) ContinueRows(ctx context.Context, rows []backend.GenRow) ([][]float32, error) {
	ss, err := e.genSessions(rows)
	if err != nil {
		return nil, err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, s := range ss {
		if s.slot == nil || s.err != nil || s.row < 0 {
			return nil, backend.ErrNotOnDevice
		}
	}
	R := len(ss)
	e.arrange(ss)
	mode, err := e.setRowSamplers(ss, rows)
	if err != nil {
		return nil, err
	}
	l := e.rows.loops[R]
	l.x.Mode = mode
	tokens, err := e.runRows(ctx, l, ss, rows)
	if len(tokens) == 0 {
		return nil, err
	}
	V := e.w.Config.VocabSize
	all := decode.FloatsOf(l.x.Bytes(e.rows.plans[R].Logits))
	out := make([][]float32, R)
	for i := range out {
		out[i] = slices.Clone(all[i*V : (i+1)*V])
	}
	return out, err
}

// genSessions checks that rows can run together here: 2 to the rows' number of this backend's
// sessions, each with settings the device reproduces and generated tokens to go on from.
func (e *GPU) genSessions(rows []backend.GenRow) ([]*Session, error) {
	if e.rows == nil || len(rows) < 2 || len(rows) > len(e.rows.slots) {
		return nil, backend.ErrNotOnDevice
	}
	ss := make([]*Session, len(rows))
	for i, r := range rows {
		s, ok := r.Session.(*Session)
		if !ok || s.e != e || !onDevice(r.Params) || r.Params.Logprobs || r.Params.TopLogprobs > 0 {
			return nil, backend.ErrNotOnDevice
		}
		if len(r.Generated) == 0 {
			return nil, fmt.Errorf("generate: row %d has no generated token to go on from", i)
		}
		ss[i] = s
	}
	return ss, nil
}

// setRowSamplers writes each row's sampler buffers (through its session's one-row executor,
// whose buffers are views of its row) and returns the rows' common mode: greedy when every row
// is, else sample, greedy rows then taking a top-k of 1 (the penalised logits' largest, ties to
// the lowest id: argmax's choice).
func (e *GPU) setRowSamplers(ss []*Session, rows []backend.GenRow) (string, error) {
	mode := decode.ModeGreedy
	for _, r := range rows {
		if r.Params.Temperature != 0 {
			mode = decode.ModeSample
		}
	}
	for i, s := range ss {
		p := rows[i].Params
		if mode == decode.ModeSample && p.Temperature == 0 {
			p.Temperature, p.TopK, p.TopP, p.MinP = 1, 1, 0, 0
		}
		if err := s.setSampler(p, rows[i].Prompt, rows[i].Generated); err != nil {
			return "", err
		}
	}
	return mode, nil
}

// runRows is the pipelined loop (Session.loop) over the R rows of l: step k consumes each row's
// token k−1 at its position start+k−1 and produces its token k. It returns the tokens produced
// per step (every row's), under loop's stop and state rules; the caller holds the step lock.
func (e *GPU) runRows(ctx context.Context, l *rowsLoop, ss []*Session, rows []backend.GenRow) ([][]int, error) {
	R := len(ss)
	limit := 0
	for i, s := range ss {
		room := min(rows[i].Max+1, e.step.MaxCtx-s.pos) // +1: the first token is the last generated
		if i == 0 || room < limit {
			limit = room
		}
	}
	if limit <= 0 {
		return nil, backend.ErrNotOnDevice // a row at the end of its context: each goes on alone
	}
	starts := make([]int, R)
	entries := make([]uint32, 0, 2*R)
	for i, s := range ss {
		starts[i] = s.pos
		entries = append(entries, uint32(s.pos), uint32(rows[i].Generated[len(rows[i].Generated)-1]))
	}
	copy(l.x.Bytes(e.rows.plans[R].StepBuf), decode.BytesOf(entries))
	slots := l.x.Bytes(l.slots)
	var queue []inflight
	submitted := 0
	submit := func() error {
		k := submitted + 1
		for i, s := range ss {
			if err := s.ensure(starts[i] + k - 1); err != nil {
				return err
			}
		}
		off := l.slot(k, R)
		for i := range R {
			binary.LittleEndian.PutUint32(slots[off+8*int64(i):], uint32(starts[i]+k-1))
			binary.LittleEndian.PutUint32(slots[off+8*int64(i)+4:], ^uint32(0))
		}
		p, err := l.x.Submit()
		if err != nil {
			return err
		}
		submitted = k
		queue = append(queue, inflight{p, k})
		return nil
	}
	fail := func(err error) error {
		for _, f := range queue {
			_ = f.p.Wait()
		}
		for _, s := range ss {
			s.err = fmt.Errorf("generate: a %d-row step failed, session unusable: %w", R, err)
		}
		return ss[0].err
	}
	var produced [][]int // per step: every row's token
	stop, cbErr := false, error(nil)
	for !stop && len(produced)+1 < limit && ctx.Err() == nil {
		for len(queue) < 2 && submitted < limit {
			if err := submit(); err != nil {
				return produced, fail(err)
			}
		}
		f := queue[0]
		queue = queue[1:]
		if err := f.p.Wait(); err != nil {
			return produced, fail(err)
		}
		off := int64(f.step%2) * 8 * int64(R)
		ids := make([]int, R)
		for i := range R {
			pos := int(binary.LittleEndian.Uint32(slots[off+8*int64(i):]))
			if pos != starts[i]+f.step {
				return produced, fail(fmt.Errorf("readback of row %d, step %d: position %d, want %d", i, f.step, pos, starts[i]+f.step))
			}
			ids[i] = int(binary.LittleEndian.Uint32(slots[off+8*int64(i)+4:]))
		}
		produced = append(produced, ids)
		for i, id := range ids {
			s, err := rows[i].OnToken(sample.Choice{ID: id})
			if err != nil && cbErr == nil {
				cbErr = err
			}
			stop = stop || s || err != nil || slices.Contains(rows[i].StopIDs, id)
		}
	}
	// Consume every produced token: the step for the last ones is in flight unless the limit
	// kept it from being committed.
	for submitted < len(produced)+1 {
		if err := submit(); err != nil {
			return produced, fail(err)
		}
	}
	for _, f := range queue {
		if err := f.p.Wait(); err != nil {
			return produced, fail(err)
		}
	}
	e.rows.steps.Add(int64(submitted))
	e.rows.rowsRun.Add(int64(submitted * R))
	for i, s := range ss {
		s.pos = starts[i] + submitted
	}
	switch {
	case cbErr != nil:
		return produced, cbErr
	case ctx.Err() != nil:
		return produced, ctx.Err()
	}
	return produced, nil
}

// inflight is a submitted step of a pipelined loop.
type inflight struct {
	p    exec.Pending
	step int
}
