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
	"github.com/lilyformac/lily/metal/kernels"
	"github.com/lilyformac/lily/metal/plan"
)

// The decode loop keeps the token ids and the position on the GPU: the step's selection
// (argmax_final or sample_final) writes {pos+1, token} into the step buffer and the next step's
// embed_q4 reads it, so step t+1 can be committed before step t has finished (Metal runs the
// command buffers of one queue in commit order). The host must then not read the step buffer
// after waiting for step t: step t+1 may already have overwritten it. Each session's plan
// therefore ends with a readback dispatch, step_copy, which copies the step buffer into one of
// two 8-byte slots of a readback buffer, alternating per step. decode.Step t writes slot t%2, which
// step t+2 (the next writer) is only committed after the host has waited for step t and read it.

// withReadback copies the step's plan (sharing the unchanged dispatches) and appends the
// readback buffer and dispatch; it returns the copy and the readback dispatch's index.
// (logprob_final's record, rebound per step too, is found by logprobDispatch.)
func withReadback(s *decode.Step) (*plan.Plan, int) {
	p := s.Plan
	q := &plan.Plan{Buffers: slices.Clone(p.Buffers), Dispatches: slices.Clone(p.Dispatches)}
	buf := len(q.Buffers)
	q.Buffers = append(q.Buffers, plan.Buffer{Name: "readback", Size: 16, Kind: plan.Control})
	d := decode.Dispatch(kernels.StepCopyCall(s.Config.VocabSize, kernels.ArgmaxDefaultGroups, kernels.StepCopyBuffers[int]{Step: s.StepBuf, Slot: buf}),
		[]plan.Range{{Buffer: s.StepBuf, Len: 8}}, []plan.Range{{Buffer: buf, Len: 16}})
	d.Barrier = true // after the selection wrote the step buffer
	q.Dispatches = append(q.Dispatches, d)
	return q, len(q.Dispatches) - 1
}

// logprobDispatch is the index of logprob_final in p.
func logprobDispatch(p *plan.Plan) int {
	return slices.IndexFunc(p.Dispatches, func(d plan.Dispatch) bool { return d.Kernel == "logprob_final" })
}

// ErrContextFull is returned by Generate when the KV cache ends the generation.
var ErrContextFull = errors.New("generate: the KV cache is full")

// Generate continues the sequence with greedy tokens chosen on the GPU. The prompt must have been
// fed with Forward, which leaves the next greedy token in the step buffer: that is the first
// token returned. Each later token costs one step (one command buffer); the step consuming token
// t is committed before the host waits for the step that produced it, so two are in flight and
// the host reads only the 8 bytes {pos, token} of each finished step, never the logits.
//
// onToken (may be nil) sees every token in order, the stopping one included, and stops the
// generation by returning true. Generation also stops after a token in stopIDs (returned), after
// maxTokens tokens, or when ctx is done (checked after each token: Generate then returns the
// tokens so far and ctx.Err()). It returns ErrContextFull with the tokens when the KV cache ends
// it first.
//
// State rule: when Generate returns without a step error, the session has consumed every
// returned token (Pos grows by len(tokens)) and NextToken is the greedy continuation of the last
// one, as after Forward(tokens). The step in flight when a stop is seen is the one consuming the
// last returned token, so it is waited for, not discarded; only when nothing is in flight (the
// maxTokens limit) does Generate commit that one step itself. A stop id is thus consumed too,
// as a chat's next turn needs. If a step fails, the session is left unusable (its state is
// unknown) and every later call returns the error.
//
// Generate holds the backend's step lock for its whole run.
func (s *Session) Generate(ctx context.Context, maxTokens int, stopIDs []int, onToken func(id int) (stop bool)) ([]int, error) {
	if err := s.lock(); err != nil {
		return nil, err
	}
	defer s.e.mu.Unlock()
	if s.pos == 0 {
		return nil, errors.New("generate: no prompt (feed it with Forward first)")
	}
	if maxTokens <= 0 {
		return nil, nil
	}
	s.x.Mode = decode.ModeGreedy
	var notify func(sample.Choice) (bool, error)
	if onToken != nil {
		notify = func(c sample.Choice) (bool, error) { return onToken(c.ID), nil }
	}
	return s.loop(ctx, s.NextToken(), true, maxTokens, 0, stopIDs, notify)
}

// loop runs the pipelined steps: tokens[0] is first (passed to onToken when notify is set), each
// step consumes the last token and produces the next, two steps in flight; in a logprobs mode
// each token comes with its logprob and the first topN alternatives. It returns the tokens,
// first included, under Generate's stop and state rules. The caller holds the step lock.
func (s *Session) loop(ctx context.Context, first int, notify bool, maxTokens, topN int, stopIDs []int, onToken func(c sample.Choice) (bool, error)) ([]int, error) {
	room := s.e.step.MaxCtx - s.pos // positions left: each returned token takes one
	if room <= 0 {
		return nil, ErrContextFull
	}
	limit := min(maxTokens, room)
	start := s.pos
	slots := s.x.Bytes(s.plan.Dispatches[s.readback].Buffers[1].Buffer)
	logprobs := s.x.Mode == decode.ModeGreedyLogprobs || s.x.Mode == decode.ModeSampleLogprobs
	lpd := &s.plan.Dispatches[s.logprob]
	records := s.x.Bytes(lpd.Buffers[4].Buffer)
	const recBytes = 4 * kernels.LogprobRecordLen
	var queue []inflight
	submitted := 0 // steps committed; step k consumes token k-1 at position start+k-1
	step := s.x.Bytes(s.e.step.StepBuf)
	binary.LittleEndian.PutUint32(step[0:], uint32(start))
	binary.LittleEndian.PutUint32(step[4:], uint32(first))
	submit := func() error {
		k := submitted + 1
		// The page step k writes into: a new one, or (only before the first step, with nothing
		// in flight) a copy of a shared one; the table entry it sets is one no step in flight reads.
		if err := s.ensure(start + k - 1); err != nil {
			return err
		}
		off := 8 * int64(k%2)
		binary.LittleEndian.PutUint32(slots[off:], uint32(start+k-1))
		binary.LittleEndian.PutUint32(slots[off+4:], ^uint32(0))
		s.plan.Dispatches[s.readback].Buffers[1] = plan.Binding{Buffer: s.plan.Dispatches[s.readback].Buffers[1].Buffer, Offset: off}
		lpd.Buffers[4] = plan.Binding{Buffer: lpd.Buffers[4].Buffer, Offset: int64(k%2) * recBytes}
		p, err := s.x.Submit()
		if err != nil {
			return err
		}
		submitted = k
		queue = append(queue, inflight{p, k})
		return nil
	}
	// drain waits for what is in flight; fail also marks the session unusable.
	drain := func() {
		for _, f := range queue {
			_ = f.p.Wait()
		}
		queue = nil
	}
	fail := func(err error) error {
		drain()
		s.err = fmt.Errorf("generate: step failed, session unusable: %w", err)
		return s.err
	}

	tokens := []int{first}
	byStop := false // onToken or a stop id ended it
	var cbErr error
	stopped := func(c sample.Choice) bool {
		if onToken != nil {
			var stop bool
			if stop, cbErr = onToken(c); stop || cbErr != nil {
				byStop = true
			}
		}
		if slices.Contains(stopIDs, c.ID) {
			byStop = true
		}
		return byStop
	}
	done := notify && stopped(sample.Choice{ID: first}) || !notify && slices.Contains(stopIDs, first) || ctx.Err() != nil
	for !done && len(tokens) < limit {
		// Keep two steps in flight: the one producing the next token and the one consuming it.
		for len(queue) < 2 && submitted < limit {
			if err := submit(); err != nil {
				return tokens, fail(err)
			}
		}
		f := queue[0]
		queue = queue[1:]
		if err := f.p.Wait(); err != nil {
			return tokens, fail(err)
		}
		off := 8 * (f.step % 2)
		pos := int(binary.LittleEndian.Uint32(slots[off:]))
		id := int(binary.LittleEndian.Uint32(slots[off+4:]))
		if pos != start+f.step {
			return tokens, fail(fmt.Errorf("readback of step %d: position %d, want %d", f.step, pos, start+f.step))
		}
		c := sample.Choice{ID: id}
		if logprobs {
			rec := decode.FloatsOf(records[int64(f.step%2)*recBytes:][:recBytes])
			var tok int
			tok, c.Logprob, c.Top = kernels.LogprobRecord(rec, topN)
			if tok != id {
				return tokens, fail(fmt.Errorf("logprobs of step %d are for token %d, not %d", f.step, tok, id))
			}
		}
		tokens = append(tokens, id)
		done = stopped(c) || ctx.Err() != nil
	}
	// Consume every returned token: the step for the last one is in flight unless the limit
	// kept it from being committed.
	for submitted < len(tokens) {
		if err := submit(); err != nil {
			return tokens, fail(err)
		}
	}
	for _, f := range queue {
		if err := f.p.Wait(); err != nil {
			queue = nil
			return tokens, fail(err)
		}
	}
	queue = nil
	s.pos = start + len(tokens)
	switch {
	case cbErr != nil:
		return tokens, cbErr
	case ctx.Err() != nil:
		return tokens, ctx.Err()
	case !byStop && len(tokens) < maxTokens:
		return tokens, ErrContextFull
	}
	return tokens, nil
}

// Continue implements backend.Generator: the request's selection runs in the step (greedy:
// argmax of the penalised logits; sampling: sample_select + sample_final), bit for bit
// engine/sample's, with the token state (prompt ids seen, the generated ones counted), logit
// bias, the vocabulary limit (as a bias of -inf on the ids past it) and the penalty table written
// into the step's sampler buffers first. The sampler's step 0 sat at position pos−len(generated),
// so a paused generation's draws go on where they stopped.
func (s *Session) Continue(ctx context.Context, p sample.Params, prompt, generated []int, max int, stopIDs []int, onToken func(sample.Choice) (bool, error)) ([]float32, error) {
	if err := s.lock(); err != nil {
		return nil, err
	}
	defer s.e.mu.Unlock()
	if !onDevice(p) {
		return nil, backend.ErrNotOnDevice
	}
	if s.pos == 0 {
		return nil, errors.New("generate: no prompt (feed it with Forward first)")
	}
	if len(generated) == 0 || len(generated) > s.pos {
		return nil, fmt.Errorf("generate: %d generated tokens at position %d", len(generated), s.pos)
	}
	if err := s.setSampler(p, prompt, generated); err != nil {
		return nil, err
	}
	tokens, err := s.loop(ctx, generated[len(generated)-1], false, 1+max, p.TopLogprobs, stopIDs, onToken)
	if len(tokens) == 0 {
		return nil, err
	}
	return s.logits(), err
}

// onDevice reports whether the step reproduces p: greedy or a top-k the sampler sorts whole (with
// top-k off, or above kernels.SampleMaxK, sample_final may have to hand a step back to the host,
// which the pipelined loop cannot do), and at most kernels.LogprobTopN logprob alternatives.
func onDevice(p sample.Params) bool {
	return p.Seed != nil && p.TopLogprobs <= kernels.LogprobTopN &&
		(p.Temperature == 0 || p.TopK > 0 && p.TopK <= kernels.SampleMaxK)
}

// setSampler writes the request's sampler buffers and chooses the step's mode.
func (s *Session) setSampler(p sample.Params, prompt, generated []int) error {
	V := s.e.w.Config.VocabSize
	setup, err := kernels.NewSampleSetup(p, prompt, V, s.pos-len(generated), s.e.step.MaxCtx)
	if err != nil {
		return err
	}
	pr := &setup.Params
	for _, id := range generated {
		if id < 0 || id >= V {
			continue
		}
		if pr.Flags&kernels.SampleFlagCount != 0 {
			setup.State[id]++
		}
		if pr.Flags&kernels.SampleFlagSeen != 0 {
			setup.State[id] |= kernels.TokenSeen
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
	lp := p.Logprobs || p.TopLogprobs > 0
	switch {
	case p.Temperature == 0 && lp:
		s.x.Mode = decode.ModeGreedyLogprobs
	case p.Temperature == 0:
		s.x.Mode = decode.ModeGreedy
	case lp:
		s.x.Mode = decode.ModeSampleLogprobs
	default:
		s.x.Mode = decode.ModeSample
	}
	return nil
}
