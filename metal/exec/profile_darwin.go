//go:build darwin

package exec

import "github.com/lilyformac/lily/metal/mtl"

// waitGPU is Wait with the GPU's time of the command buffer: GPUEndTime − GPUStartTime
// (MTLCommandBuffer.h: `@property (readonly) CFTimeInterval GPUStartTime API_AVAILABLE(macos(10.15))`,
// and GPUEndTime, seconds of host time, valid once the command buffer has completed). In the
// profiling mode the command buffer holds one dispatch (profile.go).
func (e *metalEncoder) waitGPU() (secs float64, err error) {
	mtl.WithPool(func() { // as Wait: the wait's autoreleased objects drain here
		e.cb.WaitUntilCompleted()
		start, end := e.cb.GPUTimes()
		secs, err = end-start, e.cb.Err()
		e.cb.Release()
	})
	return secs, err
}
