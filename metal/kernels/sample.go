package kernels

import (
	"fmt"
	"math"

	"github.com/lilyformac/lily/engine/sample"
)

// Sampler function constant indices (sample.metal).
const (
	SampleVocab   = 0 // uint SAMPLE_N: ids that may be chosen (the vocab limit)
	SampleChunk   = 1 // uint SAMPLE_CHUNK: ids per sample_select threadgroup
	SampleProbeOp = 2 // uint SAMPLE_PROBE_OP (sample_probe only)
	// SamplePenStride is uint SAMPLE_PEN_STRIDE: the penalty tables' row stride in floats of a
	// multi-row sample_penalties (SamplePenaltiesRowsCall at rows > 1); one-row dispatches leave
	// it unset (0: the one row starts at 0), so their pipelines are unchanged.
	SamplePenStride = 3
)

// Sampler geometry.
const (
	SampleMaxK           = 1024 // candidates sample_final sorts (SAMPLE_MAX_K)
	SampleThreads        = 1024 // sample_select and sample_final threadgroups
	SamplePenaltyThreads = 256  // sample_penalties threadgroups (dispatchThreads over n)
	SampleDefaultChunk   = 4096 // ids per sample_select threadgroup: 61 groups for 248320 ids
	LogprobThreads       = 256  // logprob_partial and logprob_final threadgroups
	LogprobTopN          = 20   // alternatives logprob_final reports (LOGPROB_TOPN)
)

// LogprobRecordLen is the length in float32 words of logprob_final's output: the chosen token's
// logprob, the token (as bits), then LogprobTopN (id as bits, logprob) pairs, most likely first.
const LogprobRecordLen = 2 + 2*LogprobTopN

// LogprobRecord decodes logprob_final's output into the chosen token's logprob and the first k
// alternatives.
func LogprobRecord(rec []float32, k int) (token int, logprob float32, top []sample.Candidate) {
	token = int(math.Float32bits(rec[1]))
	for r := range min(k, LogprobTopN) {
		top = append(top, sample.Candidate{ID: int(math.Float32bits(rec[2+2*r])), Logprob: rec[3+2*r]})
	}
	return token, rec[0], top
}

// SampleGroups is the number of sample_select threadgroups for n ids.
func SampleGroups(n, chunk int) int { return (n + chunk - 1) / chunk }

// SampleCandLen is the length in uint64 keys of the buffer sample_select writes and sample_final
// reads (buffer 2): groups × min(SampleMaxK, chunk), enough for any top_k; a multi-row Cand holds
// a row of this length per sequence.
func SampleCandLen(n, chunk int) int { return SampleGroups(n, chunk) * min(SampleMaxK, chunk) }

// Flags of SampleParams.Flags.
const (
	SampleFlagBias  = 1 // add the bias buffer
	SampleFlagCount = 2 // frequency/presence penalties; count chosen tokens
	SampleFlagSeen  = 4 // repetition penalty; mark chosen tokens seen
)

// TokenSeen is the bit of a token-state word (buffer 2 of sample_penalties, 4 of sample_final and
// 3 of argmax_final) that marks a token seen (prompt or generated) for the repetition penalty;
// the low 31 bits count the generated occurrences for the frequency and presence penalties.
const TokenSeen = 1 << 31

// SampleParams is the constant buffer every selection kernel reads (buffer 1 of the sampler
// kernels, 2 of argmax_final): the request's sampling settings, as 16 uint32 words.
type SampleParams struct {
	Temperature float32
	TopK        uint32
	TopP, MinP  float32
	Repetition  float32
	Flags       uint32
	Seed        uint64
	Pos0        uint32 // step.pos when the sampler takes its step 0
	PenLen      uint32 // entries of the penalty table
}

// Words encodes p in the kernels' layout.
func (p SampleParams) Words() []uint32 {
	w := make([]uint32, 16)
	w[0] = math.Float32bits(p.Temperature)
	w[1] = p.TopK
	w[2] = math.Float32bits(p.TopP)
	w[3] = math.Float32bits(p.MinP)
	w[4] = math.Float32bits(p.Repetition)
	w[5] = p.Flags
	w[6], w[7] = uint32(p.Seed), uint32(p.Seed>>32)
	w[8] = p.Pos0
	w[9] = p.PenLen
	return w
}

// SampleSetup is what the GPU sampler needs for one sequence, derived from sample.Params.
type SampleSetup struct {
	Params SampleParams
	State  []uint32  // [n] token states: TokenSeen for prompt ids when the repetition penalty is on
	Bias   []float32 // [n] logit bias (nil when there is none)
	Pen    []float32 // penalty table: Pen[c] = frequency·c + presence (nil when both are 0)
}

// NewSampleSetup prepares the buffers that make the GPU kernels reproduce sample.New(p, prompt):
// n is the vocab limit (SAMPLE_N), pos0 the step.pos of the first sampled token, maxCount the
// most times a token can be generated (the penalty table's last index; counts are clamped to it).
// p.Seed must be set: the GPU cannot read a sampler's random seed. With Temperature 0 (greedy:
// sample_penalties, then argmax_partial/argmax_final) only the penalty buffers and flags matter.
func NewSampleSetup(p sample.Params, prompt []int, n, pos0, maxCount int) (*SampleSetup, error) {
	if p.Seed == nil {
		return nil, fmt.Errorf("sample: the GPU sampler needs an explicit seed")
	}
	s := &SampleSetup{Params: SampleParams{
		Temperature: p.Temperature, TopK: uint32(max(p.TopK, 0)), TopP: p.TopP, MinP: p.MinP,
		Repetition: p.RepetitionPenalty, Seed: *p.Seed, Pos0: uint32(pos0), PenLen: 1,
	}}
	s.State = make([]uint32, n)
	if rp := p.RepetitionPenalty; rp != 0 && rp != 1 {
		s.Params.Flags |= SampleFlagSeen
		for _, id := range prompt {
			if id >= 0 && id < n {
				s.State[id] |= TokenSeen
			}
		}
	}
	if p.FrequencyPenalty != 0 || p.PresencePenalty != 0 {
		s.Params.Flags |= SampleFlagCount
		s.Pen = PenaltyTable(p.FrequencyPenalty, p.PresencePenalty, maxCount)
		s.Params.PenLen = uint32(len(s.Pen))
	}
	if len(p.LogitBias) > 0 {
		s.Params.Flags |= SampleFlagBias
		s.Bias = make([]float32, n)
		for id, b := range p.LogitBias {
			if id >= 0 && id < n {
				s.Bias[id] = b
			}
		}
	}
	return s, nil
}

// PenaltyTable returns frequency·float32(c) + presence for c = 0..maxCount, computed with the
// expression engine/sample uses, so it rounds the same way on this GOARCH (Go fuses the
// multiply-add on arm64 and not on amd64; the table carries whichever this build does).
func PenaltyTable(frequency, presence float32, maxCount int) []float32 {
	t := make([]float32, maxCount+1)
	for c := range t {
		t[c] = frequency*float32(c) + presence
	}
	return t
}

// sampleConstants are sample.metal's function constants for n ids in chunks of chunk
// (SampleDefaultChunk in production), which every kernel of the file takes.
func sampleConstants(n, chunk int) map[int]any {
	return map[int]any{SampleVocab: n, SampleChunk: chunk, SampleProbeOp: 0}
}

// SamplePenaltiesBuffers are sample_penalties' buffers, by role. For SamplePenaltiesRowsCall
// each holds a row per sequence: Logits, State, Bias and Out [rows][n], Params [rows][16] words
// (each row's own settings), Pen [rows][penStride] (row r's table at r·penStride, PenLen <=
// penStride entries of it read).
type SamplePenaltiesBuffers[B any] struct {
	Logits B // 0: [>= n] float32
	Params B // 1: SampleParams words
	State  B // 2: [n] token states, count | TokenSeen
	Bias   B // 3: [n] float32 (read with SampleFlagBias)
	Pen    B // 4: the penalty table (read with SampleFlagCount)
	Out    B // 5: [n] the penalised logits (may be Logits)
}

// SamplePenaltiesCall is sample_penalties over n ids: one thread per id, in whole threadgroups of
// SamplePenaltyThreads.
func SamplePenaltiesCall[B any](n, chunk int, b SamplePenaltiesBuffers[B]) Call[B] {
	return SamplePenaltiesRowsCall(n, chunk, 0, 1, b)
}

// SamplePenaltiesRowsCall is sample_penalties for the rows sequences of a multi-row decode step:
// SamplePenaltiesCall's threads once per row (the grid's second dimension), row r's penalty
// table at r·penStride floats of Pen (SAMPLE_PEN_STRIDE, the plan's MaxCtx+1: at least every
// row's PenLen). At one row penStride is not used and the constant stays unset, so rows 1 is
// SamplePenaltiesCall (today's pipeline); more rows need penStride >= 1.
func SamplePenaltiesRowsCall[B any](n, chunk, penStride, rows int, b SamplePenaltiesBuffers[B]) Call[B] {
	c := sampleConstants(n, chunk)
	if recurrentRows(rows) > 1 {
		if penStride < 1 {
			panic(fmt.Sprintf("kernels: sample_penalties over %d rows with a penalty-table stride of %d", rows, penStride))
		}
		c[SamplePenStride] = penStride
	}
	return Call[B]{
		Kernel: "sample_penalties", Constants: c,
		Buffers:      map[int]B{0: b.Logits, 1: b.Params, 2: b.State, 3: b.Bias, 4: b.Pen, 5: b.Out},
		Threadgroups: [3]int{groupsFor(n, SamplePenaltyThreads), rows, 1}, Group: grid(SamplePenaltyThreads),
	}
}

// SampleSelectBuffers are sample_select's buffers, by role. For SampleSelectRowsCall each holds
// a row per sequence: Logits [rows][n], Params [rows][16] words, Cand [rows][SampleCandLen].
type SampleSelectBuffers[B any] struct {
	Logits B // 0: [>= n] the penalised logits
	Params B // 1: SampleParams words
	Cand   B // 2: [SampleCandLen] uint64 candidate keys
}

// SampleSelectCall is sample_select over n ids: a threadgroup of threads (SampleThreads in
// production) per chunk.
func SampleSelectCall[B any](n, chunk, threads int, b SampleSelectBuffers[B]) Call[B] {
	return SampleSelectRowsCall(n, chunk, threads, 1, b)
}

// SampleSelectRowsCall is sample_select for the rows sequences of a multi-row decode step:
// SampleSelectCall's threadgroups once per row (the grid's second dimension), so rows 1 is
// SampleSelectCall.
func SampleSelectRowsCall[B any](n, chunk, threads, rows int, b SampleSelectBuffers[B]) Call[B] {
	return Call[B]{
		Kernel: "sample_select", Constants: sampleConstants(n, chunk), Buffers: map[int]B{0: b.Logits, 1: b.Params, 2: b.Cand},
		Threadgroups: [3]int{SampleGroups(n, chunk), recurrentRows(rows), 1}, Group: grid(threads),
	}
}

// SampleFinalBuffers are sample_final's buffers, by role (it has no buffer 0). For
// SampleFinalRowsCall each holds a row per sequence: Params [rows][16] words, Cand
// [rows][SampleCandLen], Step [rows]{pos, token}, State [rows][n], Status [rows] words.
type SampleFinalBuffers[B any] struct {
	Params B // 1: SampleParams words
	Cand   B // 2: sample_select's output
	Step   B // 3: the step buffer {pos, token} -> {pos+1, chosen}
	State  B // 4: [n] token states
	Status B // 5: uint32, bit 0: redo the step on the host
}

// SampleFinalCall is sample_final: one threadgroup of threads (SampleThreads in production).
func SampleFinalCall[B any](n, chunk, threads int, b SampleFinalBuffers[B]) Call[B] {
	return SampleFinalRowsCall(n, chunk, threads, 1, b)
}

// SampleFinalRowsCall is sample_final for the rows sequences of a multi-row decode step: a
// threadgroup per row, each drawing with its row's settings and seed, writing its row's step
// entry and status word and recording into its row's token states, so rows 1 is
// SampleFinalCall.
func SampleFinalRowsCall[B any](n, chunk, threads, rows int, b SampleFinalBuffers[B]) Call[B] {
	return Call[B]{
		Kernel: "sample_final", Constants: sampleConstants(n, chunk),
		Buffers:      map[int]B{1: b.Params, 2: b.Cand, 3: b.Step, 4: b.State, 5: b.Status},
		Threadgroups: grid(recurrentRows(rows)), Group: grid(threads),
	}
}

// LogprobPartialBuffers are logprob_partial's buffers, by role. For LogprobPartialRowsCall each
// holds a row per sequence: Logits [rows][n], MS [rows][groups], Top [rows][groups][LogprobTopN]
// (groups = SampleGroups(n, chunk)).
type LogprobPartialBuffers[B any] struct {
	Logits B // 0: [>= n] the penalised logits
	MS     B // 1: [groups] (max, Σ exp(x - max)) float32 pairs
	Top    B // 2: [groups][LogprobTopN] uint64 keys
}

// LogprobPartialCall is logprob_partial over n ids: a threadgroup of LogprobThreads per chunk.
func LogprobPartialCall[B any](n, chunk int, b LogprobPartialBuffers[B]) Call[B] {
	return LogprobPartialRowsCall(n, chunk, 1, b)
}

// LogprobPartialRowsCall is logprob_partial for the rows sequences of a multi-row decode step:
// LogprobPartialCall's threadgroups once per row (the grid's second dimension), so rows 1 is
// LogprobPartialCall.
func LogprobPartialRowsCall[B any](n, chunk, rows int, b LogprobPartialBuffers[B]) Call[B] {
	return Call[B]{
		Kernel: "logprob_partial", Constants: sampleConstants(n, chunk), Buffers: map[int]B{0: b.Logits, 1: b.MS, 2: b.Top},
		Threadgroups: [3]int{SampleGroups(n, chunk), recurrentRows(rows), 1}, Group: grid(LogprobThreads),
	}
}

// LogprobFinalBuffers are logprob_final's buffers, by role. For LogprobFinalRowsCall each holds a
// row per sequence: Logits [rows][n], MS and Top as LogprobPartialRowsCall's, Step [rows]{pos,
// token}, Out [rows][LogprobRecordLen].
type LogprobFinalBuffers[B any] struct {
	Logits B // 0: [>= n] the penalised logits
	MS     B // 1: logprob_partial's
	Top    B // 2: logprob_partial's
	Step   B // 3: the step buffer {pos, token}: the chosen token
	Out    B // 4: [LogprobRecordLen] float32 words (LogprobRecord)
}

// LogprobFinalCall is logprob_final: one threadgroup of LogprobThreads.
func LogprobFinalCall[B any](n, chunk int, b LogprobFinalBuffers[B]) Call[B] {
	return LogprobFinalRowsCall(n, chunk, 1, b)
}

// LogprobFinalRowsCall is logprob_final for the rows sequences of a multi-row decode step: a
// threadgroup per row, each writing its row's record for its row's chosen token, so rows 1 is
// LogprobFinalCall.
func LogprobFinalRowsCall[B any](n, chunk, rows int, b LogprobFinalBuffers[B]) Call[B] {
	return Call[B]{
		Kernel: "logprob_final", Constants: sampleConstants(n, chunk),
		Buffers:      map[int]B{0: b.Logits, 1: b.MS, 2: b.Top, 3: b.Step, 4: b.Out},
		Threadgroups: grid(recurrentRows(rows)), Group: grid(LogprobThreads),
	}
}

// SampleProbeOps name sample_probe's operations (SAMPLE_PROBE_OP): out[i] = op(a[i], b[i]).
var SampleProbeOps = []string{"f32_add", "f32_mul", "f32_div", "f32_exp", "f64_add", "f64_mul", "f32_to_f64", "uniform", "p_chain"}

// SampleProbeThreads is sample_probe's threadgroup.
const SampleProbeThreads = 256

// SampleProbeBuffers are sample_probe's buffers, by role (a test hook of the soft float).
type SampleProbeBuffers[B any] struct {
	A, B B // 0, 1: [n] uint64 operands
	Out  B // 2: [n] uint64 results
}

// SampleProbeCall is sample_probe's operation op (an index of SampleProbeOps) over n operand
// pairs. The hook reads a[i] unchecked, so n must be a whole number of SampleProbeThreads
// threadgroups.
func SampleProbeCall[B any](op, n int, b SampleProbeBuffers[B]) Call[B] {
	if n%SampleProbeThreads != 0 {
		panic(fmt.Sprintf("sample_probe: %d operands, not a multiple of %d", n, SampleProbeThreads))
	}
	return Call[B]{
		Kernel: "sample_probe", Constants: map[int]any{SampleVocab: 1, SampleChunk: 1, SampleProbeOp: op},
		Buffers:      map[int]B{0: b.A, 1: b.B, 2: b.Out},
		Threadgroups: grid(n / SampleProbeThreads), Group: grid(SampleProbeThreads),
	}
}
