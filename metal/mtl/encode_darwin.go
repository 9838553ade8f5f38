//go:build darwin

package mtl

import (
	"errors"
	"fmt"
	"structs"
	"unsafe"

	"github.com/ebitengine/purego"
	"github.com/ebitengine/purego/objc"
)

// CommandQueue is an MTLCommandQueue. Command buffers run in the order they are committed.
type CommandQueue struct{ id objc.ID }

// NewCommandQueue creates a queue (newCommandQueue; at most 64 uncompleted command buffers).
func (d *Device) NewCommandQueue() (*CommandQueue, error) {
	var q objc.ID
	withPool(func() { q = objc.ID(msg0(d.id, selNewCommandQueue)) })
	if q == 0 {
		return nil, errors.New("mtl: newCommandQueue failed")
	}
	return &CommandQueue{q}, nil
}

// Release drops the queue.
func (q *CommandQueue) Release() {
	release(q.id)
	q.id = 0
}

// CommandBuffer is an MTLCommandBuffer.
type CommandBuffer struct{ id objc.ID }

// CommandBuffer returns a new command buffer that does not retain the resources its commands
// use (commandBufferWithUnretainedReferences): cheaper to encode, so the caller keeps every
// Buffer and Pipeline alive until the command buffer completes.
func (q *CommandQueue) CommandBuffer() (*CommandBuffer, error) {
	id := owned(func() uintptr { return msg0(q.id, selCommandBufferUnretained) })
	if id == 0 {
		return nil, errors.New("mtl: commandBufferWithUnretainedReferences failed")
	}
	return &CommandBuffer{id}, nil
}

// ComputeEncoder starts a compute pass. With concurrent set (MTLDispatchTypeConcurrent),
// dispatches may overlap unless separated by Barrier; otherwise they run in order.
func (c *CommandBuffer) ComputeEncoder(concurrent bool) (*ComputeEncoder, error) {
	var dispatchType uintptr // MTLDispatchTypeSerial
	if concurrent {
		dispatchType = 1 // MTLDispatchTypeConcurrent
	}
	id := owned(func() uintptr { return msg1(c.id, selComputeEncoderWithType, dispatchType) })
	if id == 0 {
		return nil, errors.New("mtl: computeCommandEncoderWithDispatchType failed")
	}
	return &ComputeEncoder{id: id}, nil
}

// AddCompletedHandler arranges for f to run, on a Metal thread, when the command buffer
// completes. Call it before Commit. Each call costs a block allocation; the block's Go function
// slot is shared by all handlers.
func (c *CommandBuffer) AddCompletedHandler(f func()) {
	blk := objc.NewBlock(func(objc.Block, objc.ID) { f() })
	msg1(c.id, selAddCompletedHandler, uintptr(blk)) // Metal copies the block
	blk.Release()
}

// Commit submits the command buffer to its queue.
func (c *CommandBuffer) Commit() { msg0(c.id, selCommit) }

// WaitUntilCompleted blocks until the GPU has finished the command buffer.
func (c *CommandBuffer) WaitUntilCompleted() { msg0(c.id, selWaitUntilCompleted) }

// Status reports where the command buffer is in its life.
func (c *CommandBuffer) Status() CommandBufferStatus {
	return CommandBufferStatus(msg0(c.id, selStatus))
}

// Err returns the command buffer's error (page fault, timeout, out of memory, ...) as a
// *CommandBufferError, or nil. errors.Is(err, ErrWatchdog) tells a watchdog kill.
func (c *CommandBuffer) Err() error {
	var err error
	withPool(func() {
		if e := objc.ID(msg0(c.id, selError)); e != 0 {
			err = &CommandBufferError{Code: CommandBufferErrorCode(int(msg0(e, selCode))), Description: nsErrorText(e)}
		}
	})
	return err
}

// GPUTimes returns when the GPU started and finished the command buffer, in seconds of host
// time; both are 0 until it has completed.
func (c *CommandBuffer) GPUTimes() (start, end float64) {
	return rt.sendF64(c.id, selGPUStartTime), rt.sendF64(c.id, selGPUEndTime)
}

// Release drops the command buffer; a committed one still runs to completion.
func (c *CommandBuffer) Release() {
	release(c.id)
	c.id = 0
}

// setBytesMax bounds inline constant data: Apple documents setBytes:length:atIndex: only for
// data smaller than 4 KB.
const setBytesMax = 4096

// ComputeEncoder is an MTLComputeCommandEncoder. Its per-dispatch methods reuse the argument
// block and scratch memory below (heap memory that outlives each call), so they do not
// allocate; it must be used by one goroutine at a time.
type ComputeEncoder struct {
	id    objc.ID
	args  [6]uintptr
	sizes [2]abiSize        // caller copies of the MTLSize arguments
	bytes [setBytesMax]byte // setBytes data; Metal copies it during the call
}

// abiSize is MTLSize in C layout: three NSUIntegers.
type abiSize struct {
	_                    structs.HostLayout
	width, height, depth uint64
}

func (e *ComputeEncoder) call(n int) { purego.SyscallN(rt.msgSend, e.args[:n]...) }

// SetPipeline sets the compute pipeline for the following dispatches.
func (e *ComputeEncoder) SetPipeline(p *Pipeline) {
	e.args[0], e.args[1], e.args[2] = uintptr(e.id), uintptr(selSetComputePipelineState), uintptr(p.id)
	e.call(3)
}

// SetBuffer binds b at byte offset to [[buffer(index)]]; nil unbinds.
func (e *ComputeEncoder) SetBuffer(b *Buffer, offset, index int) {
	var id objc.ID
	if b != nil {
		id = b.id
	}
	e.args[0], e.args[1], e.args[2], e.args[3], e.args[4] = uintptr(e.id), uintptr(selSetBuffer), uintptr(id), uintptr(offset), uintptr(index)
	e.call(5)
}

// SetBytes copies up to 4 KiB of constant data to [[buffer(index)]]; larger data belongs in a
// Buffer, and SetBytes panics on it. See SetValue for structs.
func (e *ComputeEncoder) SetBytes(b []byte, index int) {
	if len(b) > setBytesMax {
		panic(fmt.Sprintf("mtl: SetBytes of %d bytes; Metal takes at most %d, use a Buffer", len(b), setBytesMax))
	}
	n := copy(e.bytes[:], b)
	e.args[0], e.args[1], e.args[2], e.args[3], e.args[4] = uintptr(e.id), uintptr(selSetBytes), uintptr(unsafe.Pointer(&e.bytes[0])), uintptr(n), uintptr(index)
	e.call(5)
}

// SetThreadgroupMemoryLength sizes the [[threadgroup(index)]] allocation, in bytes (a multiple of 16).
func (e *ComputeEncoder) SetThreadgroupMemoryLength(length, index int) {
	e.args[0], e.args[1], e.args[2], e.args[3] = uintptr(e.id), uintptr(selSetThreadgroupMemory), uintptr(length), uintptr(index)
	e.call(4)
}

// DispatchThreadgroups runs groups threadgroups of threads threads each.
func (e *ComputeEncoder) DispatchThreadgroups(groups, threads Size) {
	e.dispatch(selDispatchThreadgroups, groups, threads)
}

// DispatchThreads runs a grid of grid threads, in threadgroups of threads (non-uniform edges allowed).
func (e *ComputeEncoder) DispatchThreads(grid, threads Size) {
	e.dispatch(selDispatchThreads, grid, threads)
}

// Barrier orders buffer accesses: dispatches after it see the writes of dispatches before it
// (memoryBarrierWithScope: MTLBarrierScopeBuffers). Needed only with a concurrent encoder.
func (e *ComputeEncoder) Barrier() {
	e.args[0], e.args[1], e.args[2] = uintptr(e.id), uintptr(selMemoryBarrierWithScope), 1 // MTLBarrierScopeBuffers
	e.call(3)
}

// End ends the pass (endEncoding) and releases the encoder, which must not be used afterwards
// (if it is, its messages go to nil and do nothing).
func (e *ComputeEncoder) End() {
	msg0(e.id, selEndEncoding)
	release(e.id)
	e.id = 0
}
