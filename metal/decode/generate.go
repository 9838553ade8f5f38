package decode

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"

	"github.com/lilyformac/lily/metal/exec"
	"github.com/lilyformac/lily/metal/plan"
)

// The decode loop keeps the token ids and the position on the GPU: argmax_final writes
// {pos+1, token} into the step buffer and the next step's embed_q4 reads it, so step t+1 can be
// committed before step t has finished (Metal runs the command buffers of one queue in commit
// order). The host must then not read the step buffer after waiting for step t: step t+1 may
// already have overwritten it. Each session's plan therefore ends with a readback dispatch: a
// second argmax_final over the same partial keys whose {pos, token} output is bound to one of two
// 8-byte slots of a readback buffer, alternating per step. Step t writes slot t%2, which step t+2
// (the next writer) is only committed after the host has waited for step t and read it.
//
// The readback dispatch shares argmax_final's params: with the greedy (all-zero) params it
// writes only its slot; penalty flags would make it count each token twice in the sample state.
// TODO(sampler): when sample_penalties/sample_select/sample_final replace argmax (temperature,
// top-k/p, penalties from kernels.SampleParams), the readback must copy the chosen token instead
// of re-running argmax_final, and the params block must be written per request before Generate.

// withReadback copies p (sharing the unchanged dispatches) and appends the readback buffer and
// dispatch; it returns the copy and the readback dispatch's index.
func withReadback(p *plan.Plan) (*plan.Plan, int) {
	q := &plan.Plan{Buffers: slices.Clone(p.Buffers), Dispatches: slices.Clone(p.Dispatches)}
	final := -1
	for i, d := range q.Dispatches {
		if d.Kernel == "argmax_final" {
			final = i
		}
	}
	if final < 0 {
		return q, -1
	}
	buf := len(q.Buffers)
	q.Buffers = append(q.Buffers, plan.Buffer{Name: "readback", Size: 16, Kind: plan.Control})
	d := q.Dispatches[final]
	bind := map[int]plan.Binding{}
	for k, v := range d.Buffers {
		bind[k] = v
	}
	bind[1] = plan.Binding{Buffer: buf}
	var reads []plan.Range
	for _, r := range d.Reads {
		if r.Buffer != d.Buffers[1].Buffer { // not the step buffer
			reads = append(reads, r)
		}
	}
	reads = append(reads, plan.Range{Buffer: buf, Len: 16})
	q.Dispatches = append(q.Dispatches, plan.Dispatch{
		Kernel: d.Kernel, Constants: d.Constants, Buffers: bind, ThreadgroupMem: d.ThreadgroupMem,
		Threadgroups: d.Threadgroups, Group: d.Group,
		Barrier: false, // reads only the partial keys, as argmax_final does: both may run together
		Reads:   reads, Writes: []plan.Range{{Buffer: buf, Len: 16}},
	})
	return q, len(q.Dispatches) - 1
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
	if s.err != nil {
		return nil, s.err
	}
	if s.pos == 0 {
		return nil, errors.New("generate: no prompt (feed it with Forward first)")
	}
	if s.readback < 0 {
		return nil, errors.New("generate: the plan has no argmax_final")
	}
	if maxTokens <= 0 {
		return nil, nil
	}
	room := s.e.step.MaxCtx - s.pos // positions left: each returned token takes one
	if room <= 0 {
		return nil, ErrContextFull
	}
	limit := min(maxTokens, room)

	s.e.mu.Lock()
	defer s.e.mu.Unlock()

	start := s.pos
	slots := s.x.Bytes(s.plan.Dispatches[s.readback].Buffers[1].Buffer)
	type inflight struct {
		p    exec.Pending
		step int
	}
	var queue []inflight
	submitted := 0 // steps committed; step k consumes token k-1 at position start+k-1
	submit := func() error {
		k := submitted + 1
		off := 8 * int64(k%2)
		binary.LittleEndian.PutUint32(slots[off:], uint32(start+k-1))
		binary.LittleEndian.PutUint32(slots[off+4:], ^uint32(0))
		s.plan.Dispatches[s.readback].Buffers[1] = plan.Binding{Buffer: s.plan.Dispatches[s.readback].Buffers[1].Buffer, Offset: off}
		p, err := s.x.Submit()
		if err != nil {
			return err
		}
		submitted = k
		queue = append(queue, inflight{p, k})
		return nil
	}
	// fail drains what is in flight and marks the session unusable.
	fail := func(err error) error {
		for _, f := range queue {
			_ = f.p.Wait()
		}
		queue = nil
		s.err = fmt.Errorf("generate: step failed, session unusable: %w", err)
		return s.err
	}

	tokens := []int{s.NextToken()}
	byStop := false // onToken or a stop id ended it
	stopped := func(id int) bool {
		if onToken != nil && onToken(id) || slices.Contains(stopIDs, id) {
			byStop = true
		}
		return byStop
	}
	done := stopped(tokens[0]) || ctx.Err() != nil
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
		tokens = append(tokens, id)
		done = stopped(id) || ctx.Err() != nil
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
	if err := ctx.Err(); err != nil {
		return tokens, err
	}
	if !byStop && len(tokens) < maxTokens {
		return tokens, ErrContextFull
	}
	return tokens, nil
}
