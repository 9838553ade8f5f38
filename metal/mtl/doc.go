// Package mtl is a thin, cgo-free binding of the Metal API (through purego's Objective-C runtime) for Lily's GPU executor.
//
// It covers what a compute-only engine needs: the default device and its limits, shared and
// no-copy buffers, compiling Metal Shading Language at run time (with a binary-archive pipeline
// cache on disk), one command queue, command buffers, and concurrent compute encoders. On
// systems other than macOS every constructor returns ErrUnavailable, so packages that use mtl
// build and test everywhere.
//
// # Calling convention
//
// Cold paths (creating devices, buffers, libraries, pipelines) send Objective-C messages
// through purego.SyscallN with cached selectors. The per-dispatch methods of ComputeEncoder
// (SetPipeline, SetBuffer, SetBytes, SetThreadgroupMemoryLength, DispatchThreadgroups,
// DispatchThreads, Barrier) reuse an argument block owned by the encoder and do not allocate.
// MTLSize arguments are 24-byte aggregates, which the arm64 procedure call standard passes as
// pointers to caller-made copies; the encoder keeps those copies in its own memory.
//
// # Ownership
//
// Every wrapper (Device, Buffer, Library, Function, Pipeline, CommandQueue, CommandBuffer,
// ComputeEncoder) owns exactly one reference to its Objective-C object and drops it in
// Release (End for an encoder). There are no finalizers: GPU memory is returned when the
// caller says so, not when Go's collector gets round to it. After Release the wrapper holds
// nil, and messages to nil are no-ops in Objective-C.
//
//   - Objects from new…/alloc-init methods arrive owned.
//   - Autoreleased results (command buffers, encoders, NSError, names) are retained or copied
//     inside a short autorelease pool, so wrappers never depend on the caller's pools.
//   - Temporaries (NSString, descriptors, URLs, compile options) are released before the
//     creating call returns.
//   - Command buffers are created with unretained references: keep every Buffer and Pipeline
//     an encoded command uses alive until the command buffer has completed.
//
// Metal may autorelease objects internally while encoding; wrap each step of a long-running
// encode loop, and each wait for a command buffer, in WithPool so they are drained (pools are per
// OS thread; WithPool pins the goroutine while it runs).
//
// Strings go to Foundation only as valid UTF-8 (CheckUTF8): NSString is nil for anything else,
// and a nil NSString passed on raises an exception, so the binding returns an error instead.
//
// # Concurrency and failures
//
// A Device may be used from any goroutine. An encoder or command buffer must be used by one
// goroutine at a time. Objective-C exceptions raised by Metal for API misuse (encoding into an
// ended encoder, a dispatch without a pipeline, ...) abort the process; they cannot be recovered.
// A failed command buffer's Err is a *CommandBufferError (Apple's MTLCommandBufferError codes,
// read as words); errors.Is(err, ErrWatchdog) tells one the system ended for running too long.
//
// # Availability
//
// Residency sets (ResidencySet, CommandQueue.AddResidencySet) need macOS 15: NewResidencySet
// checks for the class and the device's selector first and returns ErrNoResidencySets without
// them. Compile options' mathMode (macOS 15) is set only where the object responds to it.
package mtl
