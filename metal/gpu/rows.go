package gpu

import (
	"fmt"
	"slices"
	"sync/atomic"

	"github.com/lilyformac/lily/engine/backend"
	"github.com/lilyformac/lily/metal/decode"
	"github.com/lilyformac/lily/metal/exec"
	"github.com/lilyformac/lily/metal/plan"
)

// rowSet runs several sessions' next tokens in one step. Every per-row buffer of the plans
// (decode.Step.PerRow: a sequence's recurrent state, step entry, block table and sampler rows) is
// allocated once with a row per parallel sequence; session i lives in one row and runs alone on
// that row's one-row executor, whose PerRow buffers are views of the row, and the R-row plan's
// executor, whose PerRow buffers are views of rows 0 … R−1, advances R sessions at once. A step
// first moves its sessions into rows 0 … R−1 (copying the rows' state, a few MB a layer, on the
// host: memory is unified and no step is in flight), so the plan for R rows serves any R of them.
// Every row of a multi-row step is bit-identical to the one-row step of that session alone
// (decode.Options.Rows), so a session's logits do not depend on what runs beside it or in which
// row.
type rowSet struct {
	ones  []*lane     // ones[r]: the one-row lane over row r
	owner []*Session  // owner[r]: the session living in row r; nil: free (GPU.poolMu)
	multi []*lane     // multi[R]: the R-row plan's lane over rows 0 … R−1, R ≥ 2 (StepRows, ContinueRows)
	bufs  []rowBuffer // the per-row buffers
	tmp   []byte      // a row of the largest per-row buffer, for swapping two rows

	steps, rowsRun atomic.Int64 // multi-row steps run, and their rows (Batched)
}

// rowBuffer is a per-row buffer: row bytes for each of the set's rows.
type rowBuffer struct {
	mem exec.Memory
	row int64
}

// rowDevice gives an executor views of rows [first, first+n) of the per-row buffers and the
// rest as its sharedDevice does.
type rowDevice struct {
	*sharedDevice
	first, n int
}

func (d rowDevice) Alloc(b plan.Buffer) (exec.Memory, error) {
	rb, ok := d.rows[b.Name]
	if !ok {
		return d.sharedDevice.Alloc(b)
	}
	if b.Size != int64(d.n)*rb.row {
		return nil, fmt.Errorf("gpu: per-row buffer %s of %d bytes for %d rows of %d", b.Name, b.Size, d.n, rb.row)
	}
	return exec.View{Mem: rb.mem, Offset: int64(d.first) * rb.row, Size: b.Size}, nil
}

// multiSteps builds the multi-row plans for parallel sequences next to the one-row step (same
// context, KV format and pool): out[R] for R = 2 … parallel; none when parallel is 1 or more
// than a multi-row step advances.
func multiSteps(one *decode.Step, parallel int) ([]*decode.Step, error) {
	if parallel < 2 || parallel > decode.MaxRows {
		return nil, nil
	}
	out := make([]*decode.Step, parallel+1)
	for R := 2; R <= parallel; R++ {
		st, err := decode.Build(one.Config, decode.Options{MaxCtx: one.MaxCtx, KVBits: one.KVBits, PageSize: one.Attn.PageSize, Pages: one.Attn.Pages, Rows: R})
		if err != nil {
			return nil, fmt.Errorf("gpu: the %d-row step: %w", R, err)
		}
		out[R] = st
	}
	return out, nil
}

// newRowSet allocates the per-row buffers for len(steps)−1 rows and makes every row's one-row
// lane and every multi-row plan's.
func (e *GPU) newRowSet(steps []*decode.Step) (*rowSet, error) {
	n := len(steps) - 1
	rs := &rowSet{owner: make([]*Session, n), multi: make([]*lane, n+1)}
	var largest int64
	for _, i := range e.step.PerRow() {
		b := e.step.Plan.Buffers[i]
		all := b
		all.Size = int64(n) * b.Size
		m, err := e.dev.own(all)
		if err != nil {
			rs.close(e.dev)
			return nil, fmt.Errorf("gpu: %d rows of %s: %w", n, b.Name, err)
		}
		rb := rowBuffer{mem: m, row: b.Size}
		rs.bufs = append(rs.bufs, rb)
		e.dev.rows[b.Name] = rb
		largest = max(largest, b.Size)
	}
	rs.tmp = make([]byte, largest)
	for r := range n {
		l, err := e.newLane(rowDevice{e.dev, r, 1}, e.step, r)
		if err != nil {
			rs.close(e.dev)
			return nil, err
		}
		rs.ones = append(rs.ones, l)
	}
	for R := 2; R <= n; R++ {
		l, err := e.newLane(rowDevice{e.dev, 0, R}, steps[R], -1)
		if err != nil {
			rs.close(e.dev)
			return nil, fmt.Errorf("gpu: the %d-row step: %w", R, err)
		}
		rs.multi[R] = l
	}
	return rs, nil
}

// take returns the lowest free row's lane, nil when none is free (or there are no rows). The
// caller holds GPU.poolMu, and the step lock until the session it starts records itself as the
// row's owner (no step may move a session into the reserved row meanwhile).
func (rs *rowSet) take() *lane {
	if rs == nil {
		return nil
	}
	for r, s := range rs.owner {
		if s == nil && !rs.reserved(r) {
			rs.owner[r] = reservedRow
			return rs.ones[r]
		}
	}
	return nil
}

// reservedRow owns a row between take and the session's start.
var reservedRow = &Session{}

func (rs *rowSet) reserved(r int) bool { return rs.owner[r] == reservedRow }

// close frees the executors and the per-row buffers.
func (rs *rowSet) close(d *sharedDevice) {
	if rs == nil {
		return
	}
	for _, l := range rs.multi {
		if l != nil {
			l.x.Close()
		}
	}
	for _, l := range rs.ones {
		l.x.Close()
	}
	for _, rb := range rs.bufs {
		d.Free(rb.mem)
	}
	clear(d.rows)
	rs.multi, rs.ones, rs.bufs = nil, nil, nil
}

// StepRows runs rows (backend.Backend): the one-token rows of sessions living in rows together
// through one multi-row step (when there are two or more), the others (a prefill slice, a session
// beyond the rows) through their sessions' Forward. Each row's logits are those its session alone
// would get.
func (e *GPU) StepRows(rows []backend.Row) []backend.RowResult {
	out := make([]backend.RowResult, len(rows))
	batched := e.stepRows(rows, out)
	var rest []backend.Row
	var at []int
	for i, r := range rows {
		if !slices.Contains(batched, i) {
			rest, at = append(rest, r), append(at, i)
		}
	}
	for i, res := range backend.StepEach(rest) {
		out[at[i]] = res
	}
	return out
}

// stepRows runs the rows it can batch through the multi-row plan of their number and returns
// their indices (none when fewer than two can be).
func (e *GPU) stepRows(rows []backend.Row, out []backend.RowResult) []int {
	if e.rows == nil {
		return nil
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	var idx []int
	var ss []*Session
	for i, r := range rows {
		if s := e.batchable(r); s != nil {
			idx, ss = append(idx, i), append(ss, s)
		}
	}
	if len(ss) < 2 {
		return nil
	}
	e.arrange(ss)
	R := len(ss)
	l := e.rows.multi[R]
	entries := make([]uint32, 0, 2*R)
	for i, s := range ss {
		entries = append(entries, uint32(s.pos), uint32(rows[idx[i]].Tokens[0]))
	}
	copy(l.x.Bytes(l.st.StepBuf), decode.BytesOf(entries))
	l.x.Mode = decode.ModeGreedy // the logits are what a row's caller reads; ContinueRows may have left another mode
	err := l.x.Step()
	if err == nil {
		e.rows.steps.Add(1)
		e.rows.rowsRun.Add(int64(R))
	}
	var logits [][]float32
	if err == nil {
		logits = l.rowLogits()
	}
	for i, s := range ss {
		if err != nil {
			out[idx[i]].Err = fmt.Errorf("gpu: a %d-row step at position %d: %w", R, s.pos, err)
			continue
		}
		out[idx[i]].Logits = logits[i]
		s.pos++
	}
	return idx
}

// Batched is how many multi-row steps ran, and their rows (backend.Backend).
func (e *GPU) Batched() (steps, rows int64) {
	if e.rows == nil {
		return 0, 0
	}
	return e.rows.steps.Load(), e.rows.rowsRun.Load()
}

// batchable is r's session when a multi-row step can run r: one valid token of a live session of
// this backend that lives in a row and has a page for its next position (which it takes here).
// The caller holds the step lock.
func (e *GPU) batchable(r backend.Row) *Session {
	if len(r.Images) > 0 {
		return nil // an image row: its session's ForwardImages runs it
	}
	s, ok := r.Session.(*Session)
	if !ok || s.e != e || s.err != nil || s.lane == nil || s.row < 0 || len(r.Tokens) != 1 {
		return nil
	}
	if id := r.Tokens[0]; id < 0 || id >= e.w.Config.VocabSize || s.pos >= e.step.MaxCtx || s.ensure(s.pos) != nil {
		return nil // Forward reports why
	}
	return s
}

// arrange moves ss into rows 0 … len(ss)−1, in order, for a multi-row step over them. The caller
// holds the step lock.
func (e *GPU) arrange(ss []*Session) {
	e.poolMu.Lock()
	defer e.poolMu.Unlock()
	for i, s := range ss {
		e.rows.move(s, i)
	}
}

// move puts s into row r: the rows' state is swapped with r's session's, if any, which moves
// to s's row. The caller holds the step lock and GPU.poolMu.
func (rs *rowSet) move(s *Session, r int) {
	from := s.row
	if from == r {
		return
	}
	other := rs.owner[r]
	for _, rb := range rs.bufs {
		all := rb.mem.Bytes()
		a, b := all[int64(from)*rb.row:int64(from+1)*rb.row], all[int64(r)*rb.row:int64(r+1)*rb.row]
		if other == nil {
			copy(b, a) // a free row: nothing of it to keep
			continue
		}
		t := rs.tmp[:rb.row]
		copy(t, b)
		copy(b, a)
		copy(a, t)
	}
	rs.owner[r], rs.owner[from] = s, other
	s.lane = rs.ones[r]
	if other != nil {
		other.lane = rs.ones[from]
	}
}
