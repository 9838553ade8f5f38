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

// StepCopy is step_copy's Go reference: the slot gets the step buffer's {pos, token}.
func StepCopy(step []uint32) [2]uint32 { return [2]uint32{step[0], step[1]} }
