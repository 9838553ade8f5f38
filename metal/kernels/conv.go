package kernels

import "github.com/lilyformac/lily/engine/f32"

// Conv function constant indices (conv.metal).
const (
	ConvChannels = 0 // uint CONV_C
	ConvTokens   = 1 // uint CONV_T_FC: conv1d_chunk's tokens
)

// ConvKernel is conv1d_step's (and the model's) conv kernel size; the window holds ConvKernel-1
// inputs.
const ConvKernel = 4

// ConvThreads is conv1d_step's threadgroup size; the grid is one thread per channel
// (dispatchThreads).
const ConvThreads = 256

// Conv1DStep is the Go reference of conv1d_step: engine/cpu's decode conv for one token with the
// same float32 operations in the same order. taps is [C][4], window [3][C] (oldest first,
// shifted in place), x the token's qkv projection; u receives f32.Silu(conv).
func Conv1DStep(u, window, taps, x []float32) {
	c := len(x)
	for ch := range c {
		t := taps[ch*ConvKernel : (ch+1)*ConvKernel]
		var acc float32
		for j := 0; j < ConvKernel-1; j++ {
			acc += t[j] * window[j*c+ch]
		}
		acc += t[ConvKernel-1] * x[ch]
		u[ch] = f32.Silu(acc)
	}
	copy(window, window[c:])
	copy(window[(ConvKernel-2)*c:], x)
}

// Conv1DStepRows is the Go reference of conv1d_step over rows rows (Conv1DStepRowsCall): each
// row is Conv1DStep on its own x and u rows ([rows][C]) and its own window ([rows][3][C]).
func Conv1DStepRows(u, window, taps, x []float32, rows int) {
	c := len(x) / rows
	w := (ConvKernel - 1) * c
	for r := range rows {
		Conv1DStep(u[r*c:(r+1)*c], window[r*w:(r+1)*w], taps, x[r*c:(r+1)*c])
	}
}

// Conv1DStepBuffers are conv1d_step's buffers, by role.
type Conv1DStepBuffers[B any] struct {
	X      B // 0: [C] the token's qkv projection ([rows][C] for Conv1DStepRowsCall)
	Taps   B // 1: [C][4] float32
	Window B // 2: [3][C] float32, shifted in place ([rows][3][C]: a window per sequence)
	U      B // 3: [C] silu(conv) ([rows][C])
}

// Conv1DStepCall is conv1d_step over channels channels: one thread per channel, in whole
// threadgroups of threads (ConvThreads in production).
func Conv1DStepCall[B any](channels, threads int, b Conv1DStepBuffers[B]) Call[B] {
	return Conv1DStepRowsCall(channels, threads, 1, b)
}

// Conv1DStepRowsCall is conv1d_step for the rows sequences of a multi-row decode step, each with
// its own window: Conv1DStepCall's threadgroups once per row (the grid's second dimension), so
// rows 1 is Conv1DStepCall.
func Conv1DStepRowsCall[B any](channels, threads, rows int, b Conv1DStepBuffers[B]) Call[B] {
	return Call[B]{
		Kernel: "conv1d_step", Constants: map[int]any{ConvChannels: channels},
		Buffers:      map[int]B{0: b.X, 1: b.Taps, 2: b.Window, 3: b.U},
		Threadgroups: [3]int{groupsFor(channels, threads), recurrentRows(rows), 1}, Group: grid(threads),
	}
}

// Conv1DChunk is Conv1DStep for each of the tokens rows of x ([tokens][C]), writing u's rows and
// leaving the window after the last token: in the chunk mode gdn_chunk computes u (GDNChunk) and
// conv1d_chunk the window.
func Conv1DChunk(u, window, taps, x []float32, tokens int) {
	c := len(x) / tokens
	for t := range tokens {
		Conv1DStep(u[t*c:(t+1)*c], window, taps, x[t*c:(t+1)*c])
	}
}

// Conv1DChunkBuffers are conv1d_chunk's buffers.
type Conv1DChunkBuffers[B any] struct {
	X      B // [tokens][C] the qkv projections (bfloat under BF16Acts)
	Window B // [3][C] float32, shifted in place
}

// Conv1DChunkCall is conv1d_chunk: the window update after tokens tokens over channels channels
// in one dispatch, a thread per channel (x float32; the chunk mode's is bfloat: BF16Acts).
func Conv1DChunkCall[B any](channels, threads, tokens int, b Conv1DChunkBuffers[B]) Call[B] {
	return Call[B]{
		Kernel: "conv1d_chunk", Constants: map[int]any{ConvChannels: channels, ConvTokens: tokens},
		Buffers:      map[int]B{0: b.X, 1: b.Window},
		Threadgroups: grid(groupsFor(channels, threads)), Group: grid(threads),
	}
}
