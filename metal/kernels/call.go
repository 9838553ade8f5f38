package kernels

// Call is one dispatch of a kernel as its Go side defines it: the kernel, its function
// constants, the buffer bound at each [[buffer(n)]], the grid of threadgroups, the threadgroup
// size and the [[threadgroup(n)]] lengths. B names a buffer where the call is made: a plan
// buffer index (metal/decode, metal/selftest) or an emulator buffer (the kernel tests). Each
// kernel's constructor below its Go reference is the one place its bindings are written.
type Call[B any] struct {
	Kernel         string
	Constants      map[int]any
	Buffers        map[int]B
	Threadgroups   [3]int
	Group          [3]int
	ThreadgroupMem map[int]int
}

// QMatrixBuffers are a quantized matrix's three buffers (engine/quant's Words, Scales and
// Biases), which every kernel reading one binds at three consecutive [[buffer(n)]] indices.
type QMatrixBuffers[B any] struct{ Words, Scales, Biases B }

// bind puts the matrix at buffer indices first, first+1, first+2.
func (m QMatrixBuffers[B]) bind(bs map[int]B, first int) {
	bs[first], bs[first+1], bs[first+2] = m.Words, m.Scales, m.Biases
}

// grid is a one-dimensional grid or threadgroup of n.
func grid(n int) [3]int { return [3]int{n, 1, 1} }

// groupsFor is the number of threadgroups of group threads that cover n threads: the kernels
// that run one thread per element return from the threads past n.
func groupsFor(n, group int) int { return (n + group - 1) / group }
