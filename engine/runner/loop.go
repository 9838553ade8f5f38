package runner

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/lilyformac/lily/engine/backend"
	"github.com/lilyformac/lily/engine/prefixcache"
	"github.com/lilyformac/lily/engine/sample"
)

// loop is the engine loop. Each turn it admits arrivals (up to Parallel running), ends the
// sequences their callers stopped or cancelled, chooses every decoding sequence's next token,
// and runs one step: a row per decoding sequence plus a slice of the oldest unfinished prefill,
// so a stream waits at most one slice. A slice has the same size whether or not others run (a
// prefill's rounding may depend on where its slices end, and a request's tokens must not depend
// on what else runs). When every running sequence decodes and the backend can generate on its
// device (backend.Generator: one alone, or several in one multi-row step), they do so there until
// something arrives or one ends — unless the step drafts (drafts.go): drafts are verified as
// rows of a host-driven step.
func (r *Runner) loop() {
	var run []*seq
	for {
		var ok bool
		if run, ok = r.admit(run); !ok {
			return
		}
		run = r.reap(run)
		decoding := r.choose(run)
		run = slices.DeleteFunc(run, (*seq).over)
		drafts := r.drafts.plan(decoding, 0)
		switch g, ok := r.b.(backend.Generator); {
		case ok && !drafts && r.mayBurst() && len(decoding) > 0 && len(decoding) == len(run) && all(decoding, r.burstable) && r.burst(g, decoding):
		default:
			r.step(decoding, r.prefillNext(run))
		}
		run = slices.DeleteFunc(run, (*seq).over)
	}
}

// mayBurst reports whether the device may generate on its own: not when every step must offer
// the drafter its chance (DraftsAlways).
func (r *Runner) mayBurst() bool { return r.drafts == nil || r.drafts.mode != DraftsAlways }

// admit moves arrivals into the running set in arrival order, up to Parallel and while the
// backend's memory holds them (Fits), and starts their sessions. With nothing
// running or arriving the loop ends (false).
func (r *Runner) admit(run []*seq) ([]*seq, bool) {
	r.mu.Lock()
	if len(run) == 0 && len(r.arrivals) == 0 {
		r.looping = false
		r.mu.Unlock()
		return nil, false
	}
	n := r.fitting(run, r.arrivals[:min(r.parallel-len(run), len(r.arrivals))])
	admitted := slices.Clone(r.arrivals[:n])
	r.arrivals = slices.Delete(r.arrivals, 0, n)
	r.running.Add(int32(n))
	r.waiting.Add(-int32(n))
	r.mu.Unlock()
	if r.hold != nil && r.release == nil && n > 0 {
		r.release = r.hold("Lily is generating text")
	}
	for _, s := range admitted {
		if err := r.start(s); err != nil {
			r.end(s, err)
			continue
		}
		r.drafts.start(s)
		run = append(run, s)
	}
	return run, true
}

// fitting is how many of the first arrivals can join run: all of them unless the backend's
// memory would not hold every sequence at its longest. One alone always fits (the backend's
// context is one sequence's), so a long request waits for the others to finish, never forever.
func (r *Runner) fitting(run, arrivals []*seq) int {
	var positions []int
	for _, s := range run {
		positions = append(positions, s.reach())
	}
	for i, s := range arrivals {
		if positions = append(positions, s.reach()); len(positions) > 1 && !r.b.Fits(positions) {
			return i
		}
	}
	return len(arrivals)
}

// start restores the longest cached prefix of s's prompt, from memory or from disk, or starts an
// empty session.
func (r *Runner) start(s *seq) error {
	s.started = time.Now()
	s.res.Queued = s.started.Sub(s.arrived)
	hit, fromDisk := r.lookup(s)
	if hit == nil {
		s.sess = r.b.NewSession()
		s.marks = r.marks(s.req, 0)
		return nil
	}
	sess, err := hit.Snap.Restore()
	if fromDisk { // memory keeps it for the next turn
		if r.cache.Wants(hit.Tokens) {
			r.cache.Store(hit.Tokens, hit.Snap, hit.Logits)
		} else {
			hit.Snap.Close()
		}
	}
	if err != nil {
		return err
	}
	s.sess, s.done, s.res.CachedTokens = sess, len(hit.Tokens), len(hit.Tokens)
	s.marks = r.marks(s.req, s.done)
	if s.done == len(s.req.Prompt) {
		s.logits = hit.Logits
		s.res.Prefill = time.Since(s.started)
	}
	return nil
}

// reap ends the sequences whose callers stopped them or went away.
func (r *Runner) reap(run []*seq) []*seq {
	for _, s := range run {
		switch {
		case s.halted.Load():
			r.end(s, nil)
		case s.ctx.Err() != nil:
			r.end(s, s.ctx.Err())
		}
	}
	return slices.DeleteFunc(run, (*seq).over)
}

// choose picks the next token of every decoding sequence, hands it to its caller, and ends the
// sequences a stop id or the token limit ends. It returns those that go on: each has a token to
// consume.
func (r *Runner) choose(run []*seq) []*seq {
	var picking []*seq
	for _, s := range run {
		if !s.prefilling() {
			picking = append(picking, s)
		}
	}
	errs := r.pickAll(picking)
	var decoding []*seq
	for i, s := range picking {
		if err := errs[i]; err != nil {
			r.end(s, err)
			continue
		}
		if s.res.FinishReason = finish(s.req, s.res.Tokens); s.res.FinishReason != "" {
			r.end(s, nil)
			continue
		}
		decoding = append(decoding, s)
	}
	return decoding
}

// finish is the stop policy: why a request whose generated tokens are toks ends now ("stop": its
// last is a stop id; "length": it has its MaxTokens), or "" when it goes on.
func finish(req Request, toks []int) string {
	switch {
	case slices.Contains(req.StopIDs, toks[len(toks)-1]):
		return "stop"
	case len(toks) == req.MaxTokens:
		return "length"
	}
	return ""
}

// pickAll picks every sequence's next token (pick), each on its own goroutine when there are
// several: a row's sampling (a top-k over the vocabulary) costs a fraction of a millisecond,
// which over 8 rows would add to every step. Each sequence's sampler, steer and callbacks are its
// own, and called for it alone.
func (r *Runner) pickAll(ss []*seq) []error {
	errs := make([]error, len(ss))
	if len(ss) == 1 {
		errs[0] = r.pick(ss[0])
		return errs
	}
	var wg sync.WaitGroup
	for i, s := range ss {
		wg.Go(func() { errs[i] = r.pick(s) })
	}
	wg.Wait()
	return errs
}

// pick chooses s's next token from its logits row, as its steer allows, and posts it. After a
// step that verified drafts it goes on through the rows while each token chosen equals the
// draft verified after it (and the sequence goes on), then tells the session how many of the
// row's tokens to keep: every token is chosen exactly as plain decoding would choose it.
func (r *Runner) pick(s *seq) error {
	rows, drafts := [][]float32{s.logits}, []int(nil)
	if s.draft != nil && s.draft.rows != nil {
		rows, drafts = s.draft.rows, s.draft.prop.Tokens
		s.draft.rows = nil
	}
	from := len(s.res.Tokens)
	n, err := r.pickRows(s, rows, drafts)
	if err != nil {
		return err
	}
	if drafts != nil {
		if err := s.sess.(backend.Verifier).Keep(n); err != nil {
			return err
		}
		s.consumed += n - 1
		s.logits = rows[n-1]
	}
	r.drafts.verified(s, n-1, s.res.Tokens[from:])
	return nil
}

// pickRows picks from rows in order, going on to row i+1 only while the token picked from row i
// is drafts[i] and the sequence goes on; it returns how many rows it picked from.
func (r *Runner) pickRows(s *seq, rows [][]float32, drafts []int) (int, error) {
	for i, row := range rows {
		id, err := r.pickOne(s, row)
		if err != nil {
			return 0, err
		}
		if i == len(drafts) || id != drafts[i] || finish(s.req, s.res.Tokens) != "" {
			return i + 1, nil
		}
	}
	return len(rows), nil
}

// pickOne chooses s's next token from the logits row, as its steer allows, and posts it.
func (r *Runner) pickOne(s *seq, logits []float32) (int, error) {
	step := len(s.res.Tokens)
	if step == 0 {
		s.decoding = time.Now()
	}
	if s.req.OnLogits != nil {
		if err := s.req.OnLogits(step, logits); err != nil {
			return 0, err
		}
	}
	c, err := next(s.sampler, s.req.Steer, logits)
	if err != nil {
		return 0, err
	}
	s.res.Tokens = append(s.res.Tokens, c.ID)
	s.out.post(event{tok: Token{ID: c.ID, Logprob: c.Logprob, Top: c.Top}})
	return c.ID, nil
}

// next chooses the next token from logits, as steer allows (nil: freely).
func next(sampler *sample.Sampler, steer Steer, logits []float32) (sample.Choice, error) {
	if steer == nil {
		return sampler.Next(logits), nil
	}
	var c sample.Choice
	if id, forced, allowed := steer.Next(); forced {
		c = sampler.Forced(id)
	} else {
		c = sampler.NextAllowed(logits, allowed)
	}
	return c, steer.Accept(c.ID)
}

// prefill is one step's slice of a prompt: s's tokens [s.done, end).
type prefill struct {
	s   *seq
	end int
}

// prefillNext is the slice of the oldest unfinished prefill this step runs; it ends at the next
// checkpoint.
func (r *Runner) prefillNext(run []*seq) *prefill {
	i := slices.IndexFunc(run, (*seq).prefilling)
	if i < 0 {
		return nil
	}
	s := run[i]
	end := min(s.done+r.slice, len(s.req.Prompt))
	if len(s.marks) > 0 {
		end = min(end, s.marks[0])
	}
	return &prefill{s, end}
}

// step runs one backend step over the decoding sequences' rows and the prefill slice.
func (r *Runner) step(decoding []*seq, pf *prefill) {
	rows := make([]backend.Row, 0, len(decoding)+1)
	for _, s := range decoding {
		row := backend.Row{Session: s.sess, Tokens: s.res.Tokens[len(s.res.Tokens)-1:]}
		if s.draft != nil && len(s.draft.prop.Tokens) > 0 {
			row.Tokens, row.Verify = append(slices.Clip(row.Tokens), s.draft.prop.Tokens...), true
		}
		rows = append(rows, row)
	}
	if pf != nil {
		s := pf.s
		rows = append(rows, backend.Row{Session: s.sess, Tokens: s.req.Prompt[s.done:pf.end], Images: sliceImages(s.req.Images, s.done, pf.end)})
	}
	if len(rows) == 0 {
		return
	}
	results := r.b.StepRows(rows)
	for i, s := range decoding {
		if err := results[i].Err; err != nil {
			r.end(s, err)
			continue
		}
		s.logits, s.consumed = results[i].Logits, s.consumed+1
		if rows[i].Verify {
			s.draft.rows = results[i].Rows // pick keeps what it takes of them
		}
	}
	if pf != nil {
		r.prefilled(pf, results[len(results)-1])
	}
}

// prefilled records a prefill slice's result: checkpoints saved on the way, progress, and at the
// prompt's end the first logits row.
func (r *Runner) prefilled(pf *prefill, res backend.RowResult) {
	s := pf.s
	if res.Err != nil {
		r.end(s, res.Err)
		return
	}
	s.done = pf.end
	if len(s.marks) > 0 && s.marks[0] == s.done {
		s.marks = s.marks[1:]
		r.save(s.req, s.key[:s.done], s.sess, res.Logits, slices.Contains(s.req.Checkpoints, s.done))
	}
	s.out.post(event{progress: true, done: s.done})
	if s.done < len(s.key) {
		return
	}
	s.logits = res.Logits
	s.res.Prefill = time.Since(s.started)
	if s.res.CachedTokens < len(s.key) {
		r.save(s.req, s.key, s.sess, s.logits, false)
	}
}

// burstable reports whether s can go on on the device: the device samples, so nothing may need
// each logits row on the host. The device chooses exactly the host's tokens, but its logprobs may
// differ in the last bits, so with others possibly running beside it (Parallel > 1) a request that
// asks for logprobs stays on the host, alone or not.
func (r *Runner) burstable(s *seq) bool {
	logprobs := s.params.Logprobs || s.params.TopLogprobs > 0
	return !s.onHost && s.req.Steer == nil && s.req.OnLogits == nil && r.waiting.Load() == 0 && (r.parallel == 1 || !logprobs)
}

// burst lets the device generate for ss (every running sequence), a token at a time through the
// loop's stop and limit rules (onDevice), until one ends or another request arrives; they then go
// on in the loop's steps, where the device draws the same numbers the host would (see
// backend.Generator). False when the device cannot run them: nothing was consumed, the loop steps
// them instead (a sequence alone stays on the host from then on: its settings need it).
func (r *Runner) burst(g backend.Generator, ss []*seq) bool {
	rows := make([]backend.GenRow, len(ss))
	for i, s := range ss {
		rows[i] = backend.GenRow{Session: s.sess, Params: s.params, Prompt: s.req.Prompt, Generated: s.res.Tokens,
			Max: s.req.MaxTokens - len(s.res.Tokens), OnToken: r.onDevice(s, ss)}
	}
	last, err := g.ContinueRows(context.Background(), rows) // each sequence's context: onDevice
	if errors.Is(err, backend.ErrNotOnDevice) {
		ss[0].onHost = len(ss) == 1
		return false
	}
	for i, s := range ss {
		switch {
		case err != nil:
			r.end(s, err)
		case s.res.FinishReason != "":
			s.logits, s.consumed = last[i], len(s.res.Tokens)
			r.end(s, nil)
		default:
			s.logits, s.consumed = last[i], len(s.res.Tokens)
		}
	}
	return true
}

// onDevice is what a device generation calls with each token it chose for s (one of the bursting
// ss): the token is posted under the engine loop's stop and limit rules, and the generation stops
// when s ends, its caller stops it or goes away, another request arrives, or the cost gate would
// draft for them (a burst cannot verify drafts: the loop's steps do).
func (r *Runner) onDevice(s *seq, ss []*seq) func(c sample.Choice) (bool, error) {
	return func(c sample.Choice) (bool, error) {
		s.sampler.Forced(c.ID) // the host's sampler keeps step with the device's
		s.res.Tokens = append(s.res.Tokens, c.ID)
		s.out.post(event{tok: Token{ID: c.ID, Logprob: c.Logprob, Top: c.Top}})
		s.res.FinishReason = finish(s.req, s.res.Tokens)
		drafts := r.drafts.deviceToken(s, ss, c.ID)
		return s.res.FinishReason != "" || s.halted.Load() || s.ctx.Err() != nil || r.waiting.Load() > 0 || drafts, nil
	}
}

// all reports whether f holds for every one of ss.
func all(ss []*seq, f func(*seq) bool) bool {
	for _, s := range ss {
		if !f(s) {
			return false
		}
	}
	return true
}

func (s *seq) over() bool { return s.ended }

// end finishes s: its state is cached (a generation that ended cleanly), its session closed, and
// its caller told. The hold is released first when nothing else runs or waits.
func (r *Runner) end(s *seq, err error) {
	s.ended = true
	if !s.decoding.IsZero() {
		s.res.Decode = time.Since(s.decoding)
	}
	if derr := s.draft.end(s.sess); err == nil && derr != nil {
		err = derr
	}
	if s.sess != nil {
		if err == nil && s.consumed > 0 {
			r.save(s.req, s.history(), s.sess, s.logits, true)
		}
		s.sess.Close()
		s.sess = nil
	}
	if r.running.Add(-1) == 0 && r.waiting.Load() == 0 && r.release != nil {
		r.release()
		r.release = nil
	}
	res := s.res
	res.Tokens = slices.Clone(s.res.Tokens)
	s.out.post(event{final: true, res: res, err: err})
}

// save stores the state of sess, which has consumed what tokens keys (the cache key's prefix, and
// generated tokens), in the prefix cache (unless the request opts out or the cache holds that
// state already), and with persist on disk too. A failed save only costs the entry; a snapshot
// the backend cannot encode (the CPU's after an image) stays in memory only.
func (r *Runner) save(req Request, tokens []int, sess backend.Session, logits []float32, persist bool) {
	if req.NoCache {
		return
	}
	toDisk := persist && r.disk != nil && r.disk.Wants(tokens)
	if !r.cache.Wants(tokens) && !toDisk {
		return
	}
	snap, err := sess.Save()
	if err != nil {
		return
	}
	if toDisk {
		if data, err := r.codec.EncodeSnapshot(snap); err == nil {
			r.disk.Put(tokens, data, logits)
		}
	}
	if r.cache.Wants(tokens) {
		r.cache.Store(tokens, snap, logits)
	} else {
		snap.Close()
	}
}

// marks are the checkpoints strictly between the cached prefix and the prompt's end, sorted.
// Slices end at them whether or not the cache is on, so both compute the same slices.
func (r *Runner) marks(req Request, cached int) []int {
	var out []int
	for _, m := range req.Checkpoints {
		if m > cached && m < len(req.Prompt) {
			out = append(out, m)
		}
	}
	if r.every > 0 {
		for m := (cached/r.every + 1) * r.every; m < len(req.Prompt); m += r.every {
			out = append(out, m)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// lookup finds the longest cached prefix of s's prompt (by its key): in memory, or on disk when
// the disk holds a longer one (fromDisk: the entry is loaded, not yet in memory).
func (r *Runner) lookup(s *seq) (hit *prefixcache.Entry, fromDisk bool) {
	if s.req.NoCache {
		return nil, false
	}
	hit = r.cache.Lookup(s.key)
	if r.disk == nil {
		return hit, false
	}
	de := r.disk.Longest(s.key)
	if de == nil || hit != nil && len(de.Tokens) <= len(hit.Tokens) {
		return hit, false
	}
	snap, logits, err := r.disk.Load(de, r.codec)
	if err != nil {
		return hit, false // the file is gone; memory's hit, if any, still serves
	}
	return &prefixcache.Entry{Tokens: de.Tokens, Snap: snap, Logits: logits}, true
}
