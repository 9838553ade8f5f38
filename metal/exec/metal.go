package exec

import (
	"fmt"
	"math"
	"os"
	"strings"
	"unsafe"

	"github.com/lilyformac/lily/metal/kernels"
	"github.com/lilyformac/lily/metal/mtl"
	"github.com/lilyformac/lily/metal/plan"
)

// MetalDevice runs plans on the GPU (macOS; elsewhere every call fails with mtl's error).
type MetalDevice struct {
	dev   *mtl.Device
	queue *mtl.CommandQueue
	libs  map[string]*mtl.Library // kernel name → the library of the .metal file defining it
	// Warnings collects what went wrong with the on-disk pipeline cache (the pipelines were then
	// built without it): worth a log line, never fatal.
	Warnings []error
}

// NewMetalDevice compiles each source on the default device, with the kernel file's compile
// options (kernels.CompileOptions: the pinned MSL version and its math mode). sources maps kernel
// file names to text.
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
		return nil, err
	}
	m := &MetalDevice{dev: dev, queue: q, libs: map[string]*mtl.Library{}}
	for name, src := range sources {
		lib, err := dev.NewLibrary(src, opts[name])
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		for _, k := range KernelNames(src) {
			m.libs[k] = lib
		}
	}
	return m, nil
}

// WorkingSet is the device's recommendedMaxWorkingSetSize: how much memory the GPU may keep
// resident without slowing down, the budget weights, KV caches and scratch must fit in.
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

// Alloc makes a shared-storage buffer (unified memory: the host view is the GPU's memory).
func (m *MetalDevice) Alloc(b plan.Buffer) (Memory, error) {
	buf, err := m.dev.NewBuffer(int(b.Size), mtl.StorageModeShared)
	if err != nil {
		return nil, err
	}
	return metalMemory{buf}, nil
}

// Free releases the buffer (a View's underlying buffer; a no-copy buffer's pages stay with the
// mapping that owns them).
func (m *MetalDevice) Free(mem Memory) {
	switch v := mem.(type) {
	case View:
		m.Free(v.Mem)
	case metalMemory:
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
	if warning != nil {
		m.Warnings = append(m.Warnings, warning)
	}
	if err != nil {
		return nil, err
	}
	return metalPipeline{p}, nil
}

type metalPipeline struct{ p *mtl.Pipeline }

func (p metalPipeline) MaxThreads() int { return p.p.MaxTotalThreadsPerThreadgroup }

// Encode runs f, one step's encoding and commit, in an autorelease pool with the goroutine
// pinned to its OS thread: what Metal autoreleases while encoding is drained every step.
func (m *MetalDevice) Encode(f func()) { mtl.WithPool(f) }

// Begin opens a command buffer with a concurrent compute encoder.
func (m *MetalDevice) Begin() (Encoder, error) {
	cb, err := m.queue.CommandBuffer()
	if err != nil {
		return nil, err
	}
	enc, err := cb.ComputeEncoder(true)
	if err != nil {
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

// Wait waits for the committed command buffer, releases it and returns its error. Call it once.
func (e *metalEncoder) Wait() error {
	e.cb.WaitUntilCompleted()
	defer e.cb.Release()
	return e.cb.Err()
}

func (e *metalEncoder) Finish() error {
	e.Commit()
	return e.Wait()
}
