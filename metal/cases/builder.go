package cases

import (
	"github.com/lilyformac/lily/engine/quant"
	"github.com/lilyformac/lily/metal/exec"
	"github.com/lilyformac/lily/metal/kernels"
	"github.com/lilyformac/lily/metal/plan"
)

// Builder builds a small plan.Plan with its buffers' initial contents, through the kernels' Call
// constructors: what a case dispatches.
type Builder struct {
	Plan    plan.Plan
	Data    map[int][]byte // initial contents
	Outputs []int          // buffers the comparisons read (corrupted by tests)
}

// NewBuilder is an empty plan.
func NewBuilder() *Builder { return &Builder{Data: map[int][]byte{}} }

// Upload copies the initial contents into the executor's buffers.
func (b *Builder) Upload(x *exec.Executor) {
	for i, raw := range b.Data {
		copy(x.Bytes(i), raw)
	}
}

// In declares a buffer holding v ([]float32, []uint32, []uint16, []byte) and returns its index.
func (b *Builder) In(name string, v any) int {
	raw := Encode(v)
	b.Plan.Buffers = append(b.Plan.Buffers, plan.Buffer{Name: name, Size: int64(max(len(raw), 4)), Kind: plan.Activations})
	i := len(b.Plan.Buffers) - 1
	b.Data[i] = raw
	return i
}

// InOut declares a buffer holding v that the kernels update (an output: see Out).
func (b *Builder) InOut(name string, v any) int {
	i := b.In(name, v)
	b.Outputs = append(b.Outputs, i)
	return i
}

// Out declares an output of n bytes, pre-filled with 0xFF (NaN floats) so unwritten elements show.
func (b *Builder) Out(name string, n int) int {
	raw := make([]byte, n)
	for i := range raw {
		raw[i] = 0xFF
	}
	return b.InOut(name, raw)
}

// QM declares a quantized matrix's three buffers.
func (b *Builder) QM(name string, m *quant.Matrix) kernels.QMatrixBuffers[int] {
	return kernels.QMatrixBuffers[int]{Words: b.In(name+".w", m.Words), Scales: b.In(name+".s", m.Scales), Biases: b.In(name+".b", m.Biases)}
}

// Add appends the dispatch of a kernel call on the plan's buffers; barrier makes it wait for the
// dispatches before it.
func (b *Builder) Add(call kernels.Call[int], barrier bool) {
	bs := map[int]plan.Binding{}
	for idx, buf := range call.Buffers {
		bs[idx] = plan.Binding{Buffer: buf}
	}
	b.AddBound(kernels.Call[plan.Binding]{Kernel: call.Kernel, Constants: call.Constants, Buffers: bs, ThreadgroupMem: call.ThreadgroupMem,
		Threadgroups: call.Threadgroups, Group: call.Group}, barrier)
}

// AddBound is Add for a call whose bindings carry their offsets.
func (b *Builder) AddBound(call kernels.Call[plan.Binding], barrier bool) {
	b.Plan.Dispatches = append(b.Plan.Dispatches, plan.Dispatch{
		Kernel: call.Kernel, Constants: call.Constants, Buffers: call.Buffers, ThreadgroupMem: call.ThreadgroupMem,
		Threadgroups: call.Threadgroups, Group: call.Group, Barrier: barrier,
	})
}
