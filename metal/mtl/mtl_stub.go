//go:build !darwin

package mtl

// The types below mirror the darwin API so code using mtl compiles everywhere; no value of
// them can be obtained, because every constructor fails with ErrUnavailable.

// Device is a Metal GPU.
type Device struct{}

// DefaultDevice returns ErrUnavailable on this system.
func DefaultDevice() (*Device, error) { return nil, ErrUnavailable }

// Probe reports that no Metal GPU exists on this system.
func Probe() (name, family string, workingSet uint64, ok bool, reason string) {
	return "", "", 0, false, "Metal is only available on macOS"
}

// WithPool runs f; there are no autorelease pools on this system.
func WithPool(f func()) { f() }

// BeginActivity does nothing off macOS.
func BeginActivity(string) (end func()) { return func() {} }

func (d *Device) Info() DeviceInfo                        { return DeviceInfo{} }
func (d *Device) Name() string                            { return "" }
func (d *Device) SupportsFamily(f Family) bool            { return false }
func (d *Device) CurrentAllocatedSize() uint64            { return 0 }
func (d *Device) OSVersion() string                       { return "" }
func (d *Device) NewCommandQueue() (*CommandQueue, error) { return nil, ErrUnavailable }
func (d *Device) Release()                                {}

func (d *Device) NewBuffer(length int, opts ResourceOptions) (*Buffer, error) {
	return nil, ErrUnavailable
}

func (d *Device) NewBufferNoCopy(b []byte, opts ResourceOptions) (*Buffer, error) {
	return nil, ErrUnavailable
}

func (d *Device) NewLibrary(source string, opts CompileOptions) (*Library, error) {
	return nil, ErrUnavailable
}

func (d *Device) NewPipeline(f *Function) (*Pipeline, error) { return nil, ErrUnavailable }

func (d *Device) NewPipelineCached(f *Function, dir string) (p *Pipeline, warning, err error) {
	return nil, nil, ErrUnavailable
}

// Buffer is an MTLBuffer.
type Buffer struct{}

func (b *Buffer) Contents() []byte { return nil }
func (b *Buffer) Length() int      { return 0 }
func (b *Buffer) Release()         {}

// Library is an MTLLibrary compiled from source.
type Library struct {
	Warnings []CompileMessage
}

func (l *Library) NewFunction(name string, consts *FunctionConstants) (*Function, error) {
	return nil, ErrUnavailable
}
func (l *Library) Release() {}

// Function is an MTLFunction.
type Function struct{}

func (f *Function) Name() string { return "" }
func (f *Function) Release()     {}

// Pipeline is an MTLComputePipelineState.
type Pipeline struct {
	MaxTotalThreadsPerThreadgroup int
	ThreadExecutionWidth          int
	StaticThreadgroupMemoryLength int
	FromCache                     bool
}

func (p *Pipeline) Release() {}

// CommandQueue is an MTLCommandQueue.
type CommandQueue struct{}

func (q *CommandQueue) CommandBuffer() (*CommandBuffer, error) { return nil, ErrUnavailable }
func (q *CommandQueue) Release()                               {}

// CommandBuffer is an MTLCommandBuffer.
type CommandBuffer struct{}

func (c *CommandBuffer) ComputeEncoder(concurrent bool) (*ComputeEncoder, error) {
	return nil, ErrUnavailable
}
func (c *CommandBuffer) AddCompletedHandler(f func())   {}
func (c *CommandBuffer) Commit()                        {}
func (c *CommandBuffer) WaitUntilCompleted()            {}
func (c *CommandBuffer) Status() CommandBufferStatus    { return StatusNotEnqueued }
func (c *CommandBuffer) Err() error                     { return nil }
func (c *CommandBuffer) GPUTimes() (start, end float64) { return 0, 0 }
func (c *CommandBuffer) Release()                       {}

// ResidencySet is an MTLResidencySet.
type ResidencySet struct{}

func (d *Device) NewResidencySet(capacity int) (*ResidencySet, error) { return nil, ErrUnavailable }
func (s *ResidencySet) Add(b *Buffer)                                 {}
func (s *ResidencySet) Remove(b *Buffer)                              {}
func (s *ResidencySet) Commit()                                       {}
func (s *ResidencySet) RequestResidency()                             {}
func (s *ResidencySet) EndResidency()                                 {}
func (s *ResidencySet) AllocatedSize() uint64                         { return 0 }
func (s *ResidencySet) Release()                                      {}
func (q *CommandQueue) AddResidencySet(s *ResidencySet)               {}
func (q *CommandQueue) RemoveResidencySet(s *ResidencySet)            {}

// ComputeEncoder is an MTLComputeCommandEncoder.
type ComputeEncoder struct{}

func (e *ComputeEncoder) SetPipeline(p *Pipeline)                      {}
func (e *ComputeEncoder) SetBuffer(b *Buffer, offset, index int)       {}
func (e *ComputeEncoder) SetBytes(b []byte, index int)                 {}
func (e *ComputeEncoder) SetThreadgroupMemoryLength(length, index int) {}
func (e *ComputeEncoder) DispatchThreadgroups(groups, threads Size)    {}
func (e *ComputeEncoder) DispatchThreads(grid, threads Size)           {}
func (e *ComputeEncoder) Barrier()                                     {}
func (e *ComputeEncoder) End()                                         {}
