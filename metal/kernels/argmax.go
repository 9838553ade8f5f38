package kernels

import "math"

// Argmax function constant indices (argmax.metal).
const (
	ArgmaxVocab  = 0 // uint ARGMAX_N: ids that may be chosen (the vocab limit)
	ArgmaxGroups = 1 // uint ARGMAX_GROUPS: argmax_partial's threadgroups
)

// Argmax geometry: argmax_partial runs ArgmaxDefaultGroups threadgroups (1940 ids each for the
// model's 248320) and argmax_final one, all of ArgmaxThreads threads.
const (
	ArgmaxDefaultGroups = 128
	ArgmaxThreads       = 256
)

// Argmax is the Go reference of argmax_partial + argmax_final: engine/sample's argmax over
// x[:n] (largest value, ties to the lowest id, NaNs skipped unless all are NaN: id 0).
func Argmax(x []float32, n int) int {
	x = x[:n]
	best := 0
	for i, v := range x {
		if v > x[best] || (math.IsNaN(float64(x[best])) && !math.IsNaN(float64(v))) {
			best = i
		}
	}
	return best
}

// ArgmaxRows is the Go reference of argmax_partial + argmax_final over rows rows of n logits
// ([rows][n]): Argmax on each row.
func ArgmaxRows(x []float32, n, rows int) []int {
	ids := make([]int, rows)
	for r := range ids {
		ids[r] = Argmax(x[r*n:(r+1)*n], n)
	}
	return ids
}

// ArgmaxRecord is argmax_final's record of the chosen id for the penalties, as sample_final's:
// with SampleFlagCount in flags state[id] counts one more, with SampleFlagSeen it gets TokenSeen
// (ids >= len(state), which no real choice gives, record nothing).
func ArgmaxRecord(state []uint32, id int, flags uint32) {
	if id >= len(state) {
		return
	}
	if flags&SampleFlagCount != 0 {
		state[id]++
	}
	if flags&SampleFlagSeen != 0 {
		state[id] |= TokenSeen
	}
}

// StepCopy is step_copy's Go reference: the slot gets the step buffer's {pos, token}.
func StepCopy(step []uint32) [2]uint32 { return [2]uint32{step[0], step[1]} }

// argmaxConstants are argmax.metal's function constants for n ids and groups argmax_partial
// threadgroups, which every kernel of the file takes.
func argmaxConstants(n, groups int) map[int]any {
	return map[int]any{ArgmaxVocab: n, ArgmaxGroups: groups}
}

// ArgmaxPartialBuffers are argmax_partial's buffers, by role (a row per sequence for the Rows
// calls).
type ArgmaxPartialBuffers[B any] struct {
	Logits  B // 0: [>= n] float32 ([rows][n] for ArgmaxPartialRowsCall)
	Partial B // 1: [groups] uint64 keys ([rows][groups])
}

// ArgmaxPartialCall is argmax_partial over n ids in groups threadgroups of threads
// (ArgmaxDefaultGroups of ArgmaxThreads in production).
func ArgmaxPartialCall[B any](n, groups, threads int, b ArgmaxPartialBuffers[B]) Call[B] {
	return ArgmaxPartialRowsCall(n, groups, threads, 1, b)
}

// ArgmaxPartialRowsCall is argmax_partial over the rows logits rows of a multi-row decode step:
// ArgmaxPartialCall's threadgroups once per row (the grid's second dimension), so rows 1 is
// ArgmaxPartialCall.
func ArgmaxPartialRowsCall[B any](n, groups, threads, rows int, b ArgmaxPartialBuffers[B]) Call[B] {
	return Call[B]{
		Kernel: "argmax_partial", Constants: argmaxConstants(n, groups), Buffers: map[int]B{0: b.Logits, 1: b.Partial},
		Threadgroups: [3]int{groups, recurrentRows(rows), 1}, Group: grid(threads),
	}
}

// ArgmaxFinalBuffers are argmax_final's buffers, by role. For ArgmaxFinalRowsCall each holds a
// row per sequence: Partial [rows][groups], Step [rows]{pos, token}, and the per-sequence sampler
// buffers Params [rows][16] words and State [rows][n].
type ArgmaxFinalBuffers[B any] struct {
	Partial B // 0: argmax_partial's [groups] keys
	Step    B // 1: the step buffer {pos, token} -> {pos+1, argmax}
	Params  B // 2: SampleParams words (flags only)
	State   B // 3: [n] token states, updated when flagged
}

// ArgmaxFinalCall is argmax_final over argmax_partial's groups keys: one threadgroup of threads.
func ArgmaxFinalCall[B any](n, groups, threads int, b ArgmaxFinalBuffers[B]) Call[B] {
	return ArgmaxFinalRowsCall(n, groups, threads, 1, b)
}

// ArgmaxFinalRowsCall is argmax_final for the rows sequences of a multi-row decode step: a
// threadgroup per row, each writing its row's step entry and updating its row's sampler state,
// so rows 1 is ArgmaxFinalCall.
func ArgmaxFinalRowsCall[B any](n, groups, threads, rows int, b ArgmaxFinalBuffers[B]) Call[B] {
	return Call[B]{
		Kernel: "argmax_final", Constants: argmaxConstants(n, groups),
		Buffers:      map[int]B{0: b.Partial, 1: b.Step, 2: b.Params, 3: b.State},
		Threadgroups: grid(recurrentRows(rows)), Group: grid(threads),
	}
}

// StepCopyBuffers are step_copy's buffers, by role.
type StepCopyBuffers[B any] struct {
	Step B // 0: the step buffer {pos, token}
	Slot B // 1: where {pos, token} is copied (its binding's offset picks the slot)
}

// StepCopyCall is step_copy: one thread. n and groups only fill argmax.metal's constants, which
// step_copy does not read but the emulator, like a strict Metal, wants every one of the file.
func StepCopyCall[B any](n, groups int, b StepCopyBuffers[B]) Call[B] {
	return Call[B]{
		Kernel: "step_copy", Constants: argmaxConstants(n, groups), Buffers: map[int]B{0: b.Step, 1: b.Slot},
		Threadgroups: grid(1), Group: grid(1),
	}
}
