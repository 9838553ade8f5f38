package kernels

import (
	"math"

	"github.com/lilyformac/lily/engine/quant"
)

// Embed function constant indices (embed.metal).
const (
	EmbedHidden = 0 // uint EMBED_H
	EmbedVocab  = 1 // uint EMBED_VOCAB
)

// EmbedThreads is embed_q4's threadgroup size: one thread per uint32 word of the row (8 values).
const EmbedThreads = 64

// EmbedThreadsGrid is embed_q4's grid in threads (dispatchThreads) for a hidden size h.
func EmbedThreadsGrid(h int) int { return h / 8 }

// EmbedHostRow is the token id by which the host tells embed_q4 and embed_chunk to leave a row of
// their output as the host wrote it (an image's embedding in place of its pad token's): any id
// past the vocabulary does, this one by convention.
const EmbedHostRow = math.MaxUint32

// Embed is the Go reference of embed_q4: row token of the 4-bit embedding e, dequantized as
// engine/cpu does (quant.Matrix.DequantRow), or prev (the output row as it was) for an id past
// the last row (EmbedHostRow). Buffers 0-2 of the kernel are e.Words, e.Scales and e.Biases; 3
// is the step buffer {pos, token}; 4 the output.
func Embed(e *quant.Matrix, token uint32, prev []float32) []float32 {
	out := make([]float32, e.Cols)
	if int64(token) >= int64(e.Rows) {
		copy(out, prev)
		return out
	}
	e.DequantRow(int(token), out)
	return out
}

// EmbedBuffers are embed_q4's buffers, by role.
type EmbedBuffers[B any] struct {
	Embed QMatrixBuffers[B] // 0-2: the 4-bit embedding [vocab][hidden]
	Step  B                 // 3: the step buffer {pos, token} ([rows]{pos, token} for EmbedRowsCall)
	Out   B                 // 4: [hidden] float32 ([rows][hidden])
}

// EmbedCall is embed_q4 for the step buffer's token of a vocab × hidden embedding: one thread
// per word of the row (EmbedThreadsGrid), in whole threadgroups of EmbedThreads.
func EmbedCall[B any](hidden, vocab int, b EmbedBuffers[B]) Call[B] {
	return EmbedRowsCall(hidden, vocab, 1, b)
}

// EmbedRowsCall is embed_q4 for the rows steps of a multi-row decode step ([rows]{pos, token} in
// b.Step, [rows][hidden] out): EmbedCall's threadgroups once per row; rows 1 is EmbedCall.
func EmbedRowsCall[B any](hidden, vocab, rows int, b EmbedBuffers[B]) Call[B] {
	bs := map[int]B{3: b.Step, 4: b.Out}
	b.Embed.bind(bs, 0)
	return Call[B]{
		Kernel: "embed_q4", Constants: map[int]any{EmbedHidden: hidden, EmbedVocab: vocab}, Buffers: bs,
		Threadgroups: [3]int{groupsFor(EmbedThreadsGrid(hidden), EmbedThreads), rows, 1}, Group: grid(EmbedThreads),
	}
}

// EmbedChunkBuffers are embed_chunk's buffers, by role.
type EmbedChunkBuffers[B any] struct {
	Embed  QMatrixBuffers[B] // 0-2: the 4-bit embedding [vocab][hidden]
	Tokens B                 // 3: [tokens] uint32
	Out    B                 // 4: [tokens][hidden] float32
}

// EmbedChunkCall is embed_chunk: a row of threadgroups (EmbedCall's) per token.
func EmbedChunkCall[B any](hidden, vocab, tokens int, b EmbedChunkBuffers[B]) Call[B] {
	c := EmbedCall(hidden, vocab, EmbedBuffers[B]{Embed: b.Embed, Step: b.Tokens, Out: b.Out})
	c.Kernel = "embed_chunk"
	c.Threadgroups[1] = tokens
	return c
}
