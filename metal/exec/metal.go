package exec

import (
	"fmt"
	"math"
	"os"
	"strings"
	"sync"
	"unsafe"

	"github.com/lilyformac/lily/metal/kernels"
	"github.com/lilyformac/lily/metal/mtl"
	"github.com/lilyformac/lily/metal/plan"
)

// MetalDevice runs plans on the GPU (macOS; elsewhere every call fails with mtl's error). Close
// releases it.
type MetalDevice struct {
	dev   *mtl.Device
	queue *mtl.CommandQueue
	libs  map[string]*mtl.Library // kernel name → the library of the .metal file defining it
	mu    sync.Mutex
	pipes []*mtl.Pipeline        // every pipeline made, released by Close
	res   residency[*mtl.Buffer] // the weight and KV cache buffers, kept resident (macOS 15+)
	// Warnings collects what went wrong with the on-disk pipeline cache (the pipelines were then
	// built without it): worth a log line, never fatal.
	Warnings []error
	// NotResident says why wrapped weights are not kept resident (no MTLResidencySet before
	// macOS 15); nil when they are. Worth a log line, never fatal.
	NotResident error
	// tensor: the device runs tensor-op kernels (mtl.TensorOps), tensorWhy says why or why not.
	tensor    bool
	tensorWhy string
}

// NewMetalDevice compiles each source on the default device, with the kernel file's compile
// options (kernels.CompileOptions: the pinned MSL version and its math mode); a file of tensor-op
// kernels only where the device runs them (TensorOps). sources maps kernel file names to text.
func NewMetalDevice(sources map[string]string) (*MetalDevice, error) {
	opts := map[string]mtl.CompileOptions{}
	for name := range sources {
		o, err := kernels.CompileOptions(name)
		if err != nil {
			return nil, err
		}
		opts[name] = o
	}
	dev, err := mtl.DefaultDevice()
	if err != nil {
		return nil, err
	}
	q, err := dev.NewCommandQueue()
	if err != nil {
		dev.Release()
		return nil, err
	}
	m := &MetalDevice{dev: dev, queue: q, libs: map[string]*mtl.Library{}}
	m.tensor, m.tensorWhy = mtl.TensorOps(dev.Info().Family, dev.OSVersion())
	for name, src := range sources {
		if kernels.TensorFile(name) && !m.tensor {
			continue // MSL 4.0's tensor headers may not even exist here; TensorOps says why
		}
		lib, err := dev.NewLibrary(src, opts[name])
		if err != nil {
			m.Close()
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		for _, k := range KernelNames(src) {
			m.libs[k] = lib
		}
	}
	// Weights and the KV cache stay resident through a residency set on the queue: without one,
	// macOS may unwire the mapped checkpoint's pages between requests and wire them again on the
	// next (a stall).
	if set, err := dev.NewResidencySet(64); err == nil {
		q.AddResidencySet(set)
		m.res.set = metalResidencySet{set}
	} else {
		m.NotResident = fmt.Errorf("exec: weights are not kept resident (no MTLResidencySet): %w", err)
	}
	return m, nil
}

// Close releases the residency set, the pipelines, the libraries, the queue and the device
// reference; every executor must be closed and every step completed first.
func (m *MetalDevice) Close() {
	m.mu.Lock()
	defer m.mu.Unlock()
	if set, ok := m.res.set.(metalResidencySet); ok {
		m.queue.RemoveResidencySet(set.s)
		set.s.EndResidency()
		set.s.Release()
		m.res = residency[*mtl.Buffer]{}
	}
	for _, p := range m.pipes {
		p.Release()
	}
	m.pipes = nil
	released := map[*mtl.Library]bool{}
	for _, lib := range m.libs { // a library serves every kernel of its file
		if !released[lib] {
			released[lib] = true
			lib.Release()
		}
	}
	m.libs = map[string]*mtl.Library{}
	if m.queue != nil {
		m.queue.Release()
		m.queue = nil
	}
	if m.dev != nil {
		m.dev.Release()
		m.dev = nil
	}
}

// WorkingSet is the device's recommendedMaxWorkingSetSize: how much memory the GPU may keep
// resident without slowing down, the budget weights, KV caches and scratch must fit in.
// Name is the GPU's name ("Apple M4 Max"), which plan.ChipNamed reads.
func (m *MetalDevice) Name() string { return m.dev.Info().Name }

// TensorOps says whether the device runs the tensor-op kernels (kernels.TensorFile), and why
// or why not (mtl.TensorOps).
func (m *MetalDevice) TensorOps() (bool, string) { return m.tensor, m.tensorWhy }

func (m *MetalDevice) WorkingSet() int64 { return int64(m.dev.Info().RecommendedMaxWorkingSetSize) }

// KernelNames lists the kernels a .metal source defines (`kernel void NAME(` and
// `[[host_name("NAME")]]` instances), so a pipeline can be looked up by kernel name.
func KernelNames(src string) []string {
	var names []string
	for _, line := range strings.Split(src, "\n") {
		if i := strings.Index(line, `[[host_name("`); i >= 0 {
			rest := line[i+len(`[[host_name("`):]
			if j := strings.Index(rest, `")`); j > 0 {
				names = append(names, rest[:j])
			}
			continue
		}
		t := strings.TrimSpace(line)
		if after, ok := strings.CutPrefix(t, "kernel void "); ok {
			if j := strings.IndexAny(after, "( "); j > 0 {
				names = append(names, after[:j])
			}
		}
	}
	return names
}

type metalMemory struct{ b *mtl.Buffer }

func (m metalMemory) Bytes() []byte { return m.b.Contents() }

// Alloc makes a shared-storage buffer (unified memory: the host view is the GPU's memory). Weights
// (copied ones) and the KV cache join the residency set, as wrapped weights do.
func (m *MetalDevice) Alloc(b plan.Buffer) (Memory, error) {
	buf, err := m.dev.NewBuffer(int(b.Size), mtl.StorageModeShared)
	if err != nil {
		return nil, err
	}
	if b.Kind == plan.Weights || b.Kind == plan.KVCache {
		m.mu.Lock()
		m.res.add(buf)
		m.mu.Unlock()
	}
	return metalMemory{buf}, nil
}

// Free releases the buffer (a View's underlying buffer; a no-copy buffer's pages stay with the
// mapping that owns them), taking it out of the residency set first.
func (m *MetalDevice) Free(mem Memory) {
	switch v := mem.(type) {
	case View:
		m.Free(v.Mem)
	case metalMemory:
		m.mu.Lock()
		m.res.remove(v.b)
		m.mu.Unlock()
		v.b.Release()
	}
}

// Wrap serves data — a tensor inside the memory-mapped checkpoint — as a no-copy buffer over the
// whole pages that hold it (the mapping covers whole pages, so rounding out to page boundaries
// stays inside it). The caller keeps the mapping alive while the buffer is in use.
func (m *MetalDevice) Wrap(data []byte) (Memory, int64, error) {
	if len(data) == 0 {
		return nil, 0, fmt.Errorf("exec: nothing to wrap")
	}
	page := uintptr(os.Getpagesize())
	addr := uintptr(unsafe.Pointer(&data[0]))
	head := addr & (page - 1)
	if head%16 != 0 {
		// The kernels load 16-byte vectors: a tensor at an odd place in the file is copied instead.
		return nil, 0, fmt.Errorf("exec: tensor at %#x is not 16-byte aligned", addr)
	}
	n := (head + uintptr(len(data)) + page - 1) &^ (page - 1)
	window := unsafe.Slice((*byte)(unsafe.Add(unsafe.Pointer(&data[0]), -int(head))), n)
	buf, err := m.dev.NewBufferNoCopy(window, mtl.StorageModeShared)
	if err != nil {
		return nil, 0, err
	}
	m.mu.Lock()
	m.res.add(buf)
	m.mu.Unlock()
	return metalMemory{buf}, int64(head), nil
}

// Pipeline specialises kernel with constants (bool, int, uint32, float32 values).
func (m *MetalDevice) Pipeline(kernel string, constants map[int]any) (Pipeline, error) {
	lib, ok := m.libs[kernel]
	if !ok {
		return nil, fmt.Errorf("kernel %s is in no compiled source", kernel)
	}
	var fc mtl.FunctionConstants
	for i, v := range constants {
		switch x := v.(type) {
		case bool:
			fc.SetBool(i, x)
		case int:
			if x < 0 || x > math.MaxUint32 {
				return nil, fmt.Errorf("constant %d = %d does not fit a uint", i, x)
			}
			fc.SetUint(i, uint32(x))
		case uint32:
			fc.SetUint(i, x)
		case int32:
			fc.SetInt(i, x)
		case float32:
			fc.SetFloat(i, x)
		case float64:
			fc.SetFloat(i, float32(x))
		default:
			return nil, fmt.Errorf("constant %d has unsupported type %T", i, v)
		}
	}
	fn, err := lib.NewFunction(kernel, &fc)
	if err != nil {
		return nil, err
	}
	// Binary archives under the user cache directory make the second start skip GPU compilation.
	p, warning, err := m.dev.NewPipelineCached(fn, "")
	fn.Release() // the pipeline does not need the function object
	m.mu.Lock()
	defer m.mu.Unlock()
	if warning != nil {
		m.Warnings = append(m.Warnings, warning)
	}
	if err != nil {
		return nil, err
	}
	m.pipes = append(m.pipes, p)
	return metalPipeline{p, m.dev.Info().MaxThreadgroupMemoryLength}, nil
}

type metalPipeline struct {
	p         *mtl.Pipeline
	deviceTGM int // the device's maxThreadgroupMemoryLength
}

func (p metalPipeline) MaxThreads() int                    { return p.p.MaxTotalThreadsPerThreadgroup }
func (p metalPipeline) ThreadExecutionWidth() int          { return p.p.ThreadExecutionWidth }
func (p metalPipeline) StaticThreadgroupMemoryLength() int { return p.p.StaticThreadgroupMemoryLength }
func (p metalPipeline) MaxThreadgroupMemoryLength() int    { return p.deviceTGM }

// Encode runs f, one step's encoding and commit, in an autorelease pool with the goroutine
// pinned to its OS thread: what Metal autoreleases while encoding is drained every step.
func (m *MetalDevice) Encode(f func()) { mtl.WithPool(f) }

// Begin opens a command buffer with a concurrent compute encoder, first committing the residency
// set's changes (weights wrapped or freed since the last step).
func (m *MetalDevice) Begin() (Encoder, error) {
	m.mu.Lock()
	m.res.flush()
	m.mu.Unlock()
	cb, err := m.queue.CommandBuffer()
	if err != nil {
		return nil, err
	}
	enc, err := cb.ComputeEncoder(true)
	if err != nil {
		cb.Release()
		return nil, err
	}
	return &metalEncoder{cb: cb, enc: enc}, nil
}

type metalEncoder struct {
	cb  *mtl.CommandBuffer
	enc *mtl.ComputeEncoder
}

func (e *metalEncoder) SetPipeline(p Pipeline) { e.enc.SetPipeline(p.(metalPipeline).p) }

func (e *metalEncoder) SetBuffer(m Memory, offset int64, index int) {
	e.enc.SetBuffer(m.(metalMemory).b, int(offset), index)
}

func (e *metalEncoder) SetThreadgroupMemory(length, index int) {
	e.enc.SetThreadgroupMemoryLength(length, index)
}

func (e *metalEncoder) Dispatch(threadgroups, group [3]int) {
	one := func(v int) int { return max(v, 1) }
	e.enc.DispatchThreadgroups(mtl.NewSize(one(threadgroups[0]), one(threadgroups[1]), one(threadgroups[2])),
		mtl.NewSize(one(group[0]), one(group[1]), one(group[2])))
}

func (e *metalEncoder) Barrier() { e.enc.Barrier() }

// Commit ends the encoder and commits the command buffer; it does not wait.
func (e *metalEncoder) Commit() {
	e.enc.End()
	e.cb.Commit()
}

// Wait waits for the committed command buffer, releases it and returns its error (an
// *mtl.CommandBufferError). Call it once. It runs in an autorelease pool of its own, pinned to
// its thread: Pending.Wait calls it on a fresh goroutine, outside the step's pool.
func (e *metalEncoder) Wait() (err error) {
	mtl.WithPool(func() {
		e.cb.WaitUntilCompleted()
		err = e.cb.Err()
		e.cb.Release()
	})
	return err
}

func (e *metalEncoder) Finish() error {
	e.Commit()
	return e.Wait()
}

// residencySet is what MetalDevice uses of an MTLResidencySet (metalResidencySet; tests fake it).
type residencySet[B comparable] interface {
	Add(b B)
	Remove(b B)
	Commit()
	RequestResidency()
}

type metalResidencySet struct{ s *mtl.ResidencySet }

func (r metalResidencySet) Add(b *mtl.Buffer)    { r.s.Add(b) }
func (r metalResidencySet) Remove(b *mtl.Buffer) { r.s.Remove(b) }
func (r metalResidencySet) Commit()              { r.s.Commit() }
func (r metalResidencySet) RequestResidency()    { r.s.RequestResidency() }

// residency keeps the wrapped weight buffers in the device's residency set: adds are committed in
// one batch before the next command buffer (a commit per tensor would cost one each, for hundreds
// of tensors), then residency is requested so the first step does not wire the pages itself; a
// buffer leaves the set, committed at once, before it is released. With no set (macOS before 15)
// it does nothing.
type residency[B comparable] struct {
	set     residencySet[B]
	members map[B]bool
	dirty   bool
}

func (r *residency[B]) add(b B) {
	if r.set == nil || r.members[b] {
		return
	}
	if r.members == nil {
		r.members = map[B]bool{}
	}
	r.members[b] = true
	r.set.Add(b)
	r.dirty = true
}

func (r *residency[B]) remove(b B) {
	if r.set == nil || !r.members[b] {
		return
	}
	delete(r.members, b)
	r.set.Remove(b)
	r.set.Commit()
}

func (r *residency[B]) flush() {
	if r.set == nil || !r.dirty {
		return
	}
	r.set.Commit()
	r.set.RequestResidency()
	r.dirty = false
}
