package mtl_test

import "github.com/lilyformac/lily/metal/mtl"

// The stub (!darwin) and the darwin implementation must offer the same API: this file is
// compiled on both (go test here, go test -c for darwin) and fails to build if they drift.
var (
	_ func() (*mtl.Device, error)                                 = mtl.DefaultDevice
	_ func() (string, string, uint64, bool, string)               = mtl.Probe
	_ func(func())                                                = mtl.WithPool
	_ func(string) func()                                         = mtl.BeginActivity
	_ func(*mtl.ComputeEncoder, [4]float32, int)                  = mtl.SetValue[[4]float32]
	_ func() mtl.DeviceInfo                                       = (*mtl.Device)(nil).Info
	_ func() string                                               = (*mtl.Device)(nil).Name
	_ func() string                                               = (*mtl.Device)(nil).OSVersion
	_ func(mtl.Family) bool                                       = (*mtl.Device)(nil).SupportsFamily
	_ func() uint64                                               = (*mtl.Device)(nil).CurrentAllocatedSize
	_ func(int, mtl.ResourceOptions) (*mtl.Buffer, error)         = (*mtl.Device)(nil).NewBuffer
	_ func([]byte, mtl.ResourceOptions) (*mtl.Buffer, error)      = (*mtl.Device)(nil).NewBufferNoCopy
	_ func(string, mtl.CompileOptions) (*mtl.Library, error)      = (*mtl.Device)(nil).NewLibrary
	_ func(*mtl.Function) (*mtl.Pipeline, error)                  = (*mtl.Device)(nil).NewPipeline
	_ func(*mtl.Function, string) (*mtl.Pipeline, error, error)   = (*mtl.Device)(nil).NewPipelineCached
	_ func() (*mtl.CommandQueue, error)                           = (*mtl.Device)(nil).NewCommandQueue
	_ func()                                                      = (*mtl.Device)(nil).Release
	_ func() []byte                                               = (*mtl.Buffer)(nil).Contents
	_ func() int                                                  = (*mtl.Buffer)(nil).Length
	_ func()                                                      = (*mtl.Buffer)(nil).Release
	_ func(string, *mtl.FunctionConstants) (*mtl.Function, error) = (*mtl.Library)(nil).NewFunction
	_ func()                                                      = (*mtl.Library)(nil).Release
	_ func() string                                               = (*mtl.Function)(nil).Name
	_ func()                                                      = (*mtl.Function)(nil).Release
	_ func()                                                      = (*mtl.Pipeline)(nil).Release
	_ func() (*mtl.CommandBuffer, error)                          = (*mtl.CommandQueue)(nil).CommandBuffer
	_ func(int) (*mtl.ResidencySet, error)                        = (*mtl.Device)(nil).NewResidencySet
	_ func(*mtl.Buffer)                                           = (*mtl.ResidencySet)(nil).Add
	_ func(*mtl.Buffer)                                           = (*mtl.ResidencySet)(nil).Remove
	_ func()                                                      = (*mtl.ResidencySet)(nil).Commit
	_ func()                                                      = (*mtl.ResidencySet)(nil).RequestResidency
	_ func()                                                      = (*mtl.ResidencySet)(nil).EndResidency
	_ func() uint64                                               = (*mtl.ResidencySet)(nil).AllocatedSize
	_ func()                                                      = (*mtl.ResidencySet)(nil).Release
	_ func(*mtl.ResidencySet)                                     = (*mtl.CommandQueue)(nil).AddResidencySet
	_ func(*mtl.ResidencySet)                                     = (*mtl.CommandQueue)(nil).RemoveResidencySet
	_ func()                                                      = (*mtl.CommandQueue)(nil).Release
	_ func(bool) (*mtl.ComputeEncoder, error)                     = (*mtl.CommandBuffer)(nil).ComputeEncoder
	_ func(func())                                                = (*mtl.CommandBuffer)(nil).AddCompletedHandler
	_ func()                                                      = (*mtl.CommandBuffer)(nil).Commit
	_ func()                                                      = (*mtl.CommandBuffer)(nil).WaitUntilCompleted
	_ func() mtl.CommandBufferStatus                              = (*mtl.CommandBuffer)(nil).Status
	_ func() error                                                = (*mtl.CommandBuffer)(nil).Err
	_ func() (float64, float64)                                   = (*mtl.CommandBuffer)(nil).GPUTimes
	_ func()                                                      = (*mtl.CommandBuffer)(nil).Release
	_ func(*mtl.Pipeline)                                         = (*mtl.ComputeEncoder)(nil).SetPipeline
	_ func(*mtl.Buffer, int, int)                                 = (*mtl.ComputeEncoder)(nil).SetBuffer
	_ func([]byte, int)                                           = (*mtl.ComputeEncoder)(nil).SetBytes
	_ func(int, int)                                              = (*mtl.ComputeEncoder)(nil).SetThreadgroupMemoryLength
	_ func(mtl.Size, mtl.Size)                                    = (*mtl.ComputeEncoder)(nil).DispatchThreadgroups
	_ func(mtl.Size, mtl.Size)                                    = (*mtl.ComputeEncoder)(nil).DispatchThreads
	_ func()                                                      = (*mtl.ComputeEncoder)(nil).Barrier
	_ func()                                                      = (*mtl.ComputeEncoder)(nil).End
)

// Exported fields both builds carry.
var (
	_ = mtl.Library{}.Warnings
	_ = mtl.Pipeline{}.MaxTotalThreadsPerThreadgroup + mtl.Pipeline{}.ThreadExecutionWidth + mtl.Pipeline{}.StaticThreadgroupMemoryLength
	_ = mtl.Pipeline{}.FromCache
)
