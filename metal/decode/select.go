package decode

import (
	"github.com/lilyformac/lily/engine/model"
	"github.com/lilyformac/lily/engine/quant"
	"github.com/lilyformac/lily/metal/kernels"
	"github.com/lilyformac/lily/metal/plan"
)

// head adds the LM head with the final norm folded in (each chunk size's +logits and +last forms
// too), and returns the modes the greedy selection runs in. Every dispatch from here on runs in
// the selection modes and the chunks' +last modes (b.modes) unless it names its own.
func (b *builder) head() (greedyModes []string) {
	H, V, eps := b.c.HiddenSize, b.c.VocabSize, b.eps
	finalNorm := b.vector("norm", H, true, func(w *model.Weights) []float32 { return w.FinalNorm })
	head := b.matrix("lm_head", V, H, 4, func(w *model.Weights) *quant.Matrix { return w.LMHead })
	for _, ch := range b.chs {
		if b.o.ChunkLogits {
			ch.logitsRows(head, finalNorm, eps)
		}
	}
	// The next token's selection follows in one of two modes (plan.Dispatch.Modes): greedy
	// (argmax) or sampling (engine/sample's procedure). Both select from sample_penalties' output
	// (bias, repetition, frequency and presence; a copy when none is set), so the logits buffer
	// keeps what the model produced for a host that reads it. A prefill token whose logits nobody
	// reads runs in ModePrefill, which ends after the layers. Every row of a multi-row step
	// selects with its own settings, as the one-row step would.
	b.modes = []string{ModeGreedy, ModeSample, ModeGreedyLogprobs, ModeSampleLogprobs}
	b.qmvNorm(head, b.bufs.res, finalNorm, b.s.Logits, eps)
	greedyModes = []string{ModeGreedy, ModeGreedyLogprobs}
	for _, ch := range b.chs {
		// a chunk's +last mode: the LM head on its last row, then the greedy selection (NextToken)
		ch.lastRowLogits(head, finalNorm, eps)
		b.modes = append(b.modes, ChunkModes(ch.n).Last)
		greedyModes = append(greedyModes, ChunkModes(ch.n).Last)
	}
	return greedyModes
}

// selection adds the next token's selection: sample_penalties, then argmax_partial/final in
// greedyModes or sample_select/final in the sampling modes, each writing the chosen token and
// the next position into the step buffer. It returns the penalised logits' buffer.
func (b *builder) selection(greedyModes []string) (pl int) {
	s, R, V := b.s, b.rows, b.c.VocabSize
	sb, partial := s.Sampler, b.bufs.partial
	pl = b.floats("sample.logits", R*V, plan.Activations)
	chunk := kernels.SampleDefaultChunk
	b.call(kernels.SamplePenaltiesRowsCall(V, chunk, b.o.MaxCtx+1, R, kernels.SamplePenaltiesBuffers[int]{
		Logits: s.Logits, Params: sb.Params, State: sb.State, Bias: sb.Bias, Pen: sb.Pen, Out: pl}),
		[]plan.Range{b.whole(s.Logits), b.whole(sb.Params), b.whole(sb.State), b.whole(sb.Bias), b.whole(sb.Pen)},
		[]plan.Range{b.whole(pl)})
	groups := kernels.ArgmaxDefaultGroups
	b.call(kernels.ArgmaxPartialRowsCall(V, groups, kernels.ArgmaxThreads, R, kernels.ArgmaxPartialBuffers[int]{Logits: pl, Partial: partial}),
		[]plan.Range{b.whole(pl)}, []plan.Range{b.whole(partial)}, greedyModes...)
	b.call(kernels.ArgmaxFinalRowsCall(V, groups, kernels.ArgmaxThreads, R, kernels.ArgmaxFinalBuffers[int]{
		Partial: partial, Step: s.StepBuf, Params: sb.Params, State: sb.State}),
		[]plan.Range{b.whole(partial), b.whole(s.StepBuf), b.whole(sb.Params)},
		[]plan.Range{b.whole(s.StepBuf), b.whole(sb.State)}, greedyModes...)
	cand := b.buffer("sample.cand", 8*int64(R*kernels.SampleCandLen(V, chunk)), plan.Activations)
	b.call(kernels.SampleSelectRowsCall(V, chunk, kernels.SampleThreads, R, kernels.SampleSelectBuffers[int]{Logits: pl, Params: sb.Params, Cand: cand}),
		[]plan.Range{b.whole(pl), b.whole(sb.Params)}, []plan.Range{b.whole(cand)}, ModeSample, ModeSampleLogprobs)
	b.call(kernels.SampleFinalRowsCall(V, chunk, kernels.SampleThreads, R, kernels.SampleFinalBuffers[int]{
		Params: sb.Params, Cand: cand, Step: s.StepBuf, State: sb.State, Status: sb.Status}),
		[]plan.Range{b.whole(sb.Params), b.whole(cand), b.whole(s.StepBuf), b.whole(sb.State)},
		[]plan.Range{b.whole(s.StepBuf), b.whole(sb.State), b.whole(sb.Status)}, ModeSample, ModeSampleLogprobs)
	return pl
}

// logprobs adds the logprob modes' tail, after the selection wrote the token: the record a
// step's host reads instead of the logits (kernels.LogprobRecordLen words a row; two slots of R
// rows, the binding's offset chooses the slot), from the penalised logits pl.
func (b *builder) logprobs(pl int) {
	s, R, V := b.s, b.rows, b.c.VocabSize
	chunk := kernels.SampleDefaultChunk
	lpGroups := kernels.SampleGroups(V, chunk)
	lpMS := b.buffer("logprob.ms", 8*int64(R*lpGroups), plan.Activations)
	lpTop := b.buffer("logprob.top", 8*int64(R*lpGroups*kernels.LogprobTopN), plan.Activations)
	s.Logprobs = b.buffer("logprob.record", 2*4*int64(R*kernels.LogprobRecordLen), plan.Control)
	lpModes := []string{ModeGreedyLogprobs, ModeSampleLogprobs}
	b.call(kernels.LogprobPartialRowsCall(V, chunk, R, kernels.LogprobPartialBuffers[int]{Logits: pl, MS: lpMS, Top: lpTop}),
		[]plan.Range{b.whole(pl)}, []plan.Range{b.whole(lpMS), b.whole(lpTop)}, lpModes...)
	b.call(kernels.LogprobFinalRowsCall(V, chunk, R, kernels.LogprobFinalBuffers[int]{Logits: pl, MS: lpMS, Top: lpTop, Step: s.StepBuf, Out: s.Logprobs}),
		[]plan.Range{b.whole(pl), b.whole(lpMS), b.whole(lpTop), b.whole(s.StepBuf)},
		[]plan.Range{{Buffer: s.Logprobs, Len: 4 * int64(R*kernels.LogprobRecordLen)}}, lpModes...)
}
