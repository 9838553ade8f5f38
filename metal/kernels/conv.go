package kernels

import (
	"fmt"
	"slices"

	"github.com/lilyformac/lily/engine/f32"
)

// Conv function constant indices (conv.metal).
const (
	ConvChannels = 0 // uint CONV_C
	ConvTokens   = 1 // uint CONV_T_FC: conv1d_chunk's tokens
	ConvGroups   = 2 // bool CONV_GROUPS_FC: conv1d_step's group form (Conv1DVerifyCall)
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
	convShift(window, x)
}

// convShift drops window's oldest input and appends x (the window is [3][C], oldest first).
func convShift(window, x []float32) {
	c := len(x)
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

// Speculative decoding verifies a sequence's K drafted tokens as K+1 consecutive rows of the
// multi-row decode step, a group (a sequence without drafts is a group of one row). The conv is
// serial in a group's rows, so conv1d_step's group form (Conv1DVerifyCall) runs them in turn from
// the committed window, copying each row's input into a ring, and leaves a longer group's window
// as it was; once the host knows how many rows each group keeps, conv1d_commit
// (Conv1DCommitCall) replays that many inputs from the ring into the window. Rejected drafts so
// cost nothing to undo, and a group of one row is today's row, committed by the step itself.

// ConvGroupRows is conv1d_step's groups buffer for groups of sizes rows each, in order: a
// group's size at its first row, 0 at its other rows. A size below 1 panics.
func ConvGroupRows(sizes []int) []uint32 {
	var out []uint32
	for _, n := range sizes {
		if n < 1 {
			panic(fmt.Sprintf("kernels: a conv group of %d rows", n))
		}
		out = append(out, uint32(n))
		out = append(out, make([]uint32, n-1)...)
	}
	return out
}

// ConvKeepRows is conv1d_commit's keep buffer for groups of sizes rows of which kept rows each
// were accepted: kept at a longer group's first row, 0 everywhere else. A group of one row gets 0
// whatever it kept, its step having shifted its window already (a second shift would corrupt
// it). Kept outside 0..size panics.
func ConvKeepRows(sizes, kept []int) []uint32 {
	out := ConvGroupRows(sizes)
	at := 0
	for g, n := range sizes {
		if kept[g] < 0 || kept[g] > n {
			panic(fmt.Sprintf("kernels: %d rows kept of a conv group of %d", kept[g], n))
		}
		out[at] = 0
		if n > 1 {
			out[at] = uint32(kept[g])
		}
		at += n
	}
	return out
}

// Conv1DVerify is the Go reference of conv1d_step's group form over the rows of groups
// (ConvGroupRows; x, u and ring [rows][C], window [rows][3][C]): each group's rows are
// Conv1DStep in turn from the window of its first row, which a group of one row keeps shifted
// and a longer group leaves as it was; ring receives x.
func Conv1DVerify(u, ring, window, taps, x []float32, groups []uint32) {
	c := len(x) / len(groups)
	w := (ConvKernel - 1) * c
	for r, n := range groups {
		if n == 0 {
			continue
		}
		win := window[r*w : (r+1)*w]
		if n > 1 {
			win = slices.Clone(win)
		}
		for i := r; i < r+int(n); i++ {
			Conv1DStep(u[i*c:(i+1)*c], win, taps, x[i*c:(i+1)*c])
		}
	}
	copy(ring, x)
}

// Conv1DCommit is the Go reference of conv1d_commit: the window of each row r with keep[r] = k
// > 0 shifts in ring's rows r .. r+k-1, as k Conv1DStep calls on them would.
func Conv1DCommit(window, ring []float32, keep []uint32) {
	c := len(ring) / len(keep)
	w := (ConvKernel - 1) * c
	for r, k := range keep {
		for i := r; i < r+int(k); i++ {
			convShift(window[r*w:(r+1)*w], ring[i*c:(i+1)*c])
		}
	}
}

// Conv1DVerifyBuffers are conv1d_step's buffers in its group form: the rows form's, and two more.
type Conv1DVerifyBuffers[B any] struct {
	Conv1DStepBuffers[B]
	Groups B // 4: [rows] uint32, a group's rows at its first row, else 0 (ConvGroupRows)
	Ring   B // 5: [rows][C] float32, each row's x for conv1d_commit (one per layer)
}

// Conv1DVerifyCall is conv1d_step's group form over rows rows: Conv1DStepRowsCall with
// ConvGroups set and the groups and ring buffers bound.
func Conv1DVerifyCall[B any](channels, threads, rows int, b Conv1DVerifyBuffers[B]) Call[B] {
	c := Conv1DStepRowsCall(channels, threads, rows, b.Conv1DStepBuffers)
	c.Constants[ConvGroups] = true
	c.Buffers[4], c.Buffers[5] = b.Groups, b.Ring
	return c
}

// Conv1DCommitBuffers are conv1d_commit's buffers.
type Conv1DCommitBuffers[B any] struct {
	Window B // 0: [rows][3][C] float32, the step's windows, shifted in place
	Ring   B // 1: [rows][C] float32, the verify step's ring
	Keep   B // 2: [rows] uint32, rows kept at a longer group's first row, else 0 (ConvKeepRows)
}

// Conv1DCommitCall is conv1d_commit over rows rows of channels channels, in the geometry of
// Conv1DStepRowsCall; it must follow the verify step's conv1d_step after a barrier.
func Conv1DCommitCall[B any](channels, threads, rows int, b Conv1DCommitBuffers[B]) Call[B] {
	return Call[B]{
		Kernel: "conv1d_commit", Constants: map[int]any{ConvChannels: channels},
		Buffers:      map[int]B{0: b.Window, 1: b.Ring, 2: b.Keep},
		Threadgroups: [3]int{groupsFor(channels, threads), recurrentRows(rows), 1}, Group: grid(threads),
	}
}
