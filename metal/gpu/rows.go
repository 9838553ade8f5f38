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
	ones    []*lane     // ones[r]: the one-row lane over row r
	owner   []*Session  // owner[r]: the session living in row r; nil: free (GPU.poolMu)
	multi   []*lane     // multi[R]: the R-row plan's lane over rows 0 … R−1, R ≥ 2 (StepRows, ContinueRows)
	bufs    []rowBuffer // the per-row buffers
	lent    []rowBuffer // the per-row buffers a verify group's later rows read as the group's (decode.GroupRows)
	scratch []rowBuffer // those they use as their own for the step
	tmp     []byte      // a row of the largest per-row buffer, for swapping two rows
	// epoch counts the multi-row steps begun (arrangeAt): a verify step's rings are the last
	// step's, which a Keep replays only while the epoch is still the verify step's.
	epoch int64

	steps, rowsRun atomic.Int64 // multi-row steps run, and their rows (Batched)
	groups         atomic.Int64 // verify groups of two or more rows they ran (Groups)
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
// than a multi-row step advances. They take verify groups (decode.Options.Verify): R rows are R
// sequences, or fewer with their drafts.
func multiSteps(one *decode.Step, parallel int) ([]*decode.Step, error) {
	if parallel < 2 || parallel > decode.MaxRows {
		return nil, nil
	}
	out := make([]*decode.Step, parallel+1)
	for R := 2; R <= parallel; R++ {
		st, err := decode.Build(one.Config, decode.Options{MaxCtx: one.MaxCtx, KVBits: one.KVBits, PageSize: one.Attn.PageSize, Pages: one.Attn.Pages, Rows: R, Verify: true})
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
	if n >= 2 {
		g := steps[2].GroupRows()
		for _, i := range g.Lent {
			rs.lent = append(rs.lent, e.dev.rows[steps[2].Plan.Buffers[i].Name])
		}
		for _, i := range g.Scratch {
			rs.scratch = append(rs.scratch, e.dev.rows[steps[2].Plan.Buffers[i].Name])
		}
	}
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
		copy(l.x.Bytes(l.st.Groups), decode.BytesOf(repeatOne(R))) // every row alone: the plain step
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

// stepRows runs the rows it can batch through the multi-row plan of their rows' number and
// returns their indices (none when fewer than two rows can be). A Verify row takes a group of
// consecutive rows, its session's own and one for each draft (verify below).
func (e *GPU) stepRows(rows []backend.Row, out []backend.RowResult) []int {
	if e.rows == nil {
		return nil
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	var gs []group
	R := 0
	for i, r := range rows {
		if s := e.batchable(r); s != nil && R+len(r.Tokens) < len(e.rows.multi) {
			gs = append(gs, group{i: i, s: s, tokens: r.Tokens, verify: r.Verify})
			R += len(r.Tokens)
		}
	}
	if R < 2 {
		return nil
	}
	l := e.arrangeGroups(gs)
	err := e.runGroups(l, gs)
	idx := make([]int, len(gs))
	for j, g := range gs {
		idx[j] = g.i
		if err != nil {
			out[g.i].Err = fmt.Errorf("gpu: a %d-row step at position %d: %w", R, g.s.pos, err)
			continue
		}
		out[g.i] = g.result(l)
	}
	return idx
}

// group is a batched row: a session's next token, and its drafts when it verifies them, on rows
// first … first+len(tokens)−1 of the step.
type group struct {
	i      int // the row's index in StepRows' rows
	s      *Session
	tokens []int
	verify bool
	first  int
}

// arrangeGroups gives each group its first row (in gs' order, each after the one before and its
// drafts), moves the sessions there and returns the lane of the step's rows. The caller holds
// the step lock.
func (e *GPU) arrangeGroups(gs []group) *lane {
	// Sessions in row order: a step of the same sessions as the last one moves none.
	slices.SortStableFunc(gs, func(a, b group) int { return a.s.row - b.s.row })
	ss := make([]*Session, len(gs))
	at := make([]int, len(gs))
	R := 0
	for j := range gs {
		gs[j].first, ss[j], at[j] = R, gs[j].s, R
		R += len(gs[j].tokens)
	}
	e.arrangeAt(ss, at)
	return e.rows.multi[R]
}

// runGroups runs one step of l over gs: each row's step entry, each group's row count, and a
// verifying group's later rows lent its first row's inputs (lend) for the step.
func (e *GPU) runGroups(l *lane, gs []group) error {
	R := l.st.Rows
	entries := make([]uint32, 0, 2*R)
	counts := make([]uint32, R)
	for _, g := range gs {
		counts[g.first] = uint32(len(g.tokens))
		for j, id := range g.tokens {
			entries = append(entries, uint32(g.s.pos+j), uint32(id))
		}
	}
	var back func()
	for _, g := range gs {
		if len(g.tokens) > 1 {
			back = e.rows.lend(g.first, len(g.tokens), back)
		}
	}
	copy(l.x.Bytes(l.st.StepBuf), decode.BytesOf(entries))
	copy(l.x.Bytes(l.st.Groups), decode.BytesOf(counts))
	l.x.Mode = decode.ModeGreedy // the logits are what a row's caller reads; ContinueRows may have left another mode
	err := l.x.Step()
	copy(l.x.Bytes(l.st.Groups), decode.BytesOf(repeatOne(R))) // every row alone again: the plain step ContinueRows runs
	for j := range gs {
		gs[j].verified(l, err)
	}
	if back != nil {
		back()
	}
	if err == nil {
		e.rows.steps.Add(1)
		e.rows.rowsRun.Add(int64(R))
		for _, g := range gs {
			if len(g.tokens) > 1 {
				e.rows.groups.Add(1)
			}
		}
	}
	return err
}

// verified advances the group's session past the step: by its one token, or by the group's
// tokens held until its Keep (verifying), with the step entry each row left.
func (g group) verified(l *lane, err error) {
	if err != nil {
		return
	}
	s := g.s
	if g.verify {
		step := l.x.Bytes(l.st.StepBuf)
		s.verify = &verifying{pos: s.pos, ids: slices.Clone(g.tokens), rows: &verifyRows{lane: l, row: g.first, epoch: s.e.rows.epoch,
			entries: slices.Clone(step[8*g.first : 8*(g.first+len(g.tokens))])}}
	}
	s.pos += len(g.tokens)
}

// result is the group's logits after the step: its last row's, and every row's when it verifies.
func (g group) result(l *lane) backend.RowResult {
	V := l.st.Config.VocabSize
	all := decode.FloatsOf(l.x.Bytes(l.st.Logits))
	row := func(r int) []float32 { return slices.Clone(all[r*V : (r+1)*V]) }
	n := len(g.tokens)
	res := backend.RowResult{Logits: row(g.first + n - 1)}
	if g.verify {
		for r := range n - 1 {
			res.Rows = append(res.Rows, row(g.first+r))
		}
		res.Rows = append(res.Rows, res.Logits)
	}
	return res
}

// repeatOne is n ones: every row a group of one.
func repeatOne(n int) []uint32 {
	out := make([]uint32, n)
	for i := range out {
		out[i] = 1
	}
	return out
}

// Batched is how many multi-row steps ran, and their rows (backend.Backend).
func (e *GPU) Batched() (steps, rows int64) {
	if e.rows == nil {
		return 0, 0
	}
	return e.rows.steps.Load(), e.rows.rowsRun.Load()
}

// Groups is how many drafts' verify groups (a sequence's next token and its drafts, two rows
// or more) the multi-row steps ran.
func (e *GPU) Groups() int64 {
	if e.rows == nil {
		return 0
	}
	return e.rows.groups.Load()
}

// batchable is r's session when a multi-row step can run r: a live session of this backend
// that lives in a row, with no drafts awaiting their Keep, and one valid token (a Verify row:
// its next token and drafts) at positions it has pages for (which it takes here). The caller
// holds the step lock.
func (e *GPU) batchable(r backend.Row) *Session {
	if len(r.Images) > 0 {
		return nil // an image row: its session's ForwardImages runs it
	}
	s, ok := r.Session.(*Session)
	n := len(r.Tokens)
	if !ok || s.e != e || s.err != nil || s.lane == nil || s.row < 0 || s.verify != nil || n == 0 || n > 1 && !r.Verify {
		return nil
	}
	for j, id := range r.Tokens {
		if id < 0 || id >= e.w.Config.VocabSize || s.pos+j >= e.step.MaxCtx || s.ensure(s.pos+j) != nil {
			return nil // Forward or Verify reports why
		}
	}
	return s
}

// arrange moves ss into rows 0 … len(ss)−1, in order, for a multi-row step over them. The caller
// holds the step lock.
func (e *GPU) arrange(ss []*Session) {
	at := make([]int, len(ss))
	for i := range at {
		at[i] = i
	}
	e.arrangeAt(ss, at)
}

// arrangeAt moves each ss[i] into row at[i] (increasing). A multi-row step follows, which
// overwrites the verify rings: the rows' epoch moves on (Keep). The caller holds the step lock.
func (e *GPU) arrangeAt(ss []*Session, at []int) {
	e.poolMu.Lock()
	defer e.poolMu.Unlock()
	e.rows.epoch++
	for i, s := range ss {
		e.rows.move(s, at[i])
	}
}

// lend gives rows first+1 … first+n−1 row first's block table and offsets and cleared step
// entries and sampler params for a step (decode.GroupRows), and returns a func that puts back
// what they held, then calls back (when not nil): a few kB a row. The rows' other buffers, their
// DeltaNet states among them, stay those of the sessions living there: the step leaves them.
func (rs *rowSet) lend(first, n int, back func()) func() {
	var saved [][]byte
	each := func(bufs []rowBuffer, f func(dst, src []byte)) {
		for _, b := range bufs {
			all := b.mem.Bytes()
			src := all[int64(first)*b.row : int64(first+1)*b.row]
			for r := first + 1; r < first+n; r++ {
				f(all[int64(r)*b.row:int64(r+1)*b.row], src)
			}
		}
	}
	save := func(dst, _ []byte) { saved = append(saved, slices.Clone(dst)) }
	each(rs.lent, save)
	each(rs.scratch, save)
	each(rs.lent, func(dst, src []byte) { copy(dst, src) })
	each(rs.scratch, func(dst, _ []byte) { clear(dst) })
	return func() {
		i := 0
		restore := func(dst, _ []byte) { copy(dst, saved[i]); i++ }
		each(rs.lent, restore)
		each(rs.scratch, restore)
		if back != nil {
			back()
		}
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
