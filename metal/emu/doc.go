// Package emu runs Metal Shading Language compute kernels on the CPU, so Linux CI can test the
// unmodified .metal sources against Go references.
//
// Compile translates .metal files with metal/emu/gen, compiles them with clang (>= 17) together
// with a small C++ runtime (metal/emu/runtime) and loads the result without cgo, through purego.
// Each threadgroup runs its threads as fibers on one OS thread: threadgroup_barrier and the
// SIMD-group functions (32-lane simdgroups) are scheduling points, threadgroup memory is
// poisoned (0xFF) for every group, and the order threads run in between scheduling points is
// forward, reverse or shuffled, chosen per dispatch. An AddressSanitizer build runs dispatches
// in a helper process and reports memory errors as Go errors. Metal 4 tensor ops (matmul2d on
// cooperative tensors) run too, each dispatch drawing the cooperative tensors' element-to-thread
// layout from Dispatch.LayoutSeed, so kernels that assume a layout fail.
//
// The implementation is Linux-only; on other systems the package holds only this comment and
// the portable types. See metal/README.md for the source conventions and the limits.
package emu

// Source is one input of Compile: a .metal file to compile, or a header (name ending in .h)
// that the .metal files may #include "by/name".
type Source struct {
	Name string // shown in diagnostics, e.g. "metal/kernels/qmv.metal"
	Code string
}

// Order is the order a threadgroup's threads run in between scheduling points.
type Order int

// Thread orders.
const (
	Forward Order = iota // thread 0 first
	Reverse              // the last thread first
	Shuffle              // a new seeded permutation every round
	// Ahead runs one simdgroup, drawn with the seed, through all its SIMD-group calls up to the
	// next barrier before another starts: code that counts on other simdgroups having read
	// threadgroup memory by the time one of its SIMD-group calls returns fails in it.
	Ahead
)

// Orders lists every order, for tests that run a kernel in each.
var Orders = []Order{Forward, Reverse, Shuffle, Ahead}

func (o Order) String() string {
	switch o {
	case Forward:
		return "forward"
	case Reverse:
		return "reverse"
	case Shuffle:
		return "shuffle"
	case Ahead:
		return "ahead"
	}
	return "order?"
}
