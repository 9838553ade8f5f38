//go:build darwin

package mtl

import (
	"fmt"
	"runtime"
	"sync"
	"unsafe"

	"github.com/ebitengine/purego"
	"github.com/ebitengine/purego/objc"
)

const (
	libobjcPath      = "/usr/lib/libobjc.A.dylib"
	foundationPath   = "/System/Library/Frameworks/Foundation.framework/Foundation"
	coreGraphicsPath = "/System/Library/Frameworks/CoreGraphics.framework/CoreGraphics"
	metalPath        = "/System/Library/Frameworks/Metal.framework/Metal"

	nsUTF8StringEncoding = 4
)

// rt holds what load resolves once: C entry points and the classes this package instantiates.
var rt struct {
	once sync.Once
	err  error

	msgSend                      uintptr // objc_msgSend
	poolPush, poolPop            uintptr // objc_autoreleasePoolPush / Pop
	createDevice, copyAllDevices uintptr // MTLCreateSystemDefaultDevice / MTLCopyAllDevices

	// Results SyscallN cannot express: a float register, or a C string purego copies for us.
	sendF64 func(objc.ID, objc.SEL) float64
	sendStr func(objc.ID, objc.SEL) string
	sendPtr func(objc.ID, objc.SEL) unsafe.Pointer

	clsNSString, clsNSURL, clsNSArray, clsNSMutableDictionary objc.Class
	clsCompileOptions, clsConstantValues                      objc.Class
	clsPipelineDescriptor, clsArchiveDescriptor               objc.Class
}

// load opens the frameworks on first use, so importing mtl costs nothing until Metal is needed
// and a machine without Metal gets an error instead of a panic.
func load() error {
	rt.once.Do(func() { rt.err = loadRuntime() })
	return rt.err
}

func loadRuntime() error {
	libobjc, err := purego.Dlopen(libobjcPath, purego.RTLD_NOW|purego.RTLD_GLOBAL)
	if err != nil {
		return fmt.Errorf("mtl: %w", err)
	}
	for _, s := range []struct {
		p    *uintptr
		name string
	}{{&rt.msgSend, "objc_msgSend"}, {&rt.poolPush, "objc_autoreleasePoolPush"}, {&rt.poolPop, "objc_autoreleasePoolPop"}} {
		if *s.p, err = purego.Dlsym(libobjc, s.name); err != nil {
			return fmt.Errorf("mtl: %w", err)
		}
	}
	if _, err := purego.Dlopen(foundationPath, purego.RTLD_NOW|purego.RTLD_GLOBAL); err != nil {
		return fmt.Errorf("mtl: %w", err)
	}
	// Apple: "In macOS, in order for the system to provide a default Metal device object, you
	// must link to the CoreGraphics framework" — command-line tools have to load it themselves.
	_, _ = purego.Dlopen(coreGraphicsPath, purego.RTLD_NOW|purego.RTLD_GLOBAL)
	metal, err := purego.Dlopen(metalPath, purego.RTLD_NOW|purego.RTLD_GLOBAL)
	if err != nil {
		return fmt.Errorf("mtl: cannot load Metal.framework: %w", err)
	}
	if rt.createDevice, err = purego.Dlsym(metal, "MTLCreateSystemDefaultDevice"); err != nil {
		return fmt.Errorf("mtl: %w", err)
	}
	rt.copyAllDevices, _ = purego.Dlsym(metal, "MTLCopyAllDevices") // fallback only

	purego.RegisterFunc(&rt.sendF64, rt.msgSend)
	purego.RegisterFunc(&rt.sendStr, rt.msgSend)
	purego.RegisterFunc(&rt.sendPtr, rt.msgSend)
	registerArch()

	for _, c := range []struct {
		p    *objc.Class
		name string
	}{
		{&rt.clsNSString, "NSString"}, {&rt.clsNSURL, "NSURL"}, {&rt.clsNSArray, "NSArray"},
		{&rt.clsNSMutableDictionary, "NSMutableDictionary"}, {&rt.clsCompileOptions, "MTLCompileOptions"},
		{&rt.clsConstantValues, "MTLFunctionConstantValues"}, {&rt.clsPipelineDescriptor, "MTLComputePipelineDescriptor"},
		{&rt.clsArchiveDescriptor, "MTLBinaryArchiveDescriptor"},
	} {
		if *c.p = objc.GetClass(c.name); *c.p == 0 {
			return fmt.Errorf("mtl: Objective-C class %s not found", c.name)
		}
	}
	return nil
}

// Selectors, registered once at package initialisation (purego/objc has loaded libobjc by then).
var (
	selAlloc               = objc.RegisterName("alloc")
	selInit                = objc.RegisterName("init")
	selRetain              = objc.RegisterName("retain")
	selRelease             = objc.RegisterName("release")
	selRespondsToSelector  = objc.RegisterName("respondsToSelector:")
	selCount               = objc.RegisterName("count")
	selObjectAtIndex       = objc.RegisterName("objectAtIndex:")
	selArrayWithObject     = objc.RegisterName("arrayWithObject:")
	selInitWithCapacity    = objc.RegisterName("initWithCapacity:")
	selSetObjectForKey     = objc.RegisterName("setObject:forKey:")
	selInitWithBytesLength = objc.RegisterName("initWithBytes:length:encoding:")
	selUTF8String          = objc.RegisterName("UTF8String")
	selFileURLWithPath     = objc.RegisterName("fileURLWithPath:")
	selLocalizedDesc       = objc.RegisterName("localizedDescription")
	selCode                = objc.RegisterName("code")

	selName                         = objc.RegisterName("name")
	selSupportsFamily               = objc.RegisterName("supportsFamily:")
	selRecommendedMaxWorkingSetSize = objc.RegisterName("recommendedMaxWorkingSetSize")
	selMaxThreadgroupMemoryLength   = objc.RegisterName("maxThreadgroupMemoryLength")
	selHasUnifiedMemory             = objc.RegisterName("hasUnifiedMemory")
	selMaxBufferLength              = objc.RegisterName("maxBufferLength")
	selCurrentAllocatedSize         = objc.RegisterName("currentAllocatedSize")

	selNewBufferWithLength      = objc.RegisterName("newBufferWithLength:options:")
	selNewBufferWithBytesNoCopy = objc.RegisterName("newBufferWithBytesNoCopy:length:options:deallocator:")
	selContents                 = objc.RegisterName("contents")
	selLength                   = objc.RegisterName("length")

	selSetLanguageVersion    = objc.RegisterName("setLanguageVersion:")
	selSetMathMode           = objc.RegisterName("setMathMode:")
	selSetFastMathEnabled    = objc.RegisterName("setFastMathEnabled:")
	selSetMathFPFunctions    = objc.RegisterName("setMathFloatingPointFunctions:")
	selSetPreprocessorMacros = objc.RegisterName("setPreprocessorMacros:")
	selNewLibraryWithSource  = objc.RegisterName("newLibraryWithSource:options:error:")
	selNewFunctionWithName   = objc.RegisterName("newFunctionWithName:")
	selNewFunctionConstants  = objc.RegisterName("newFunctionWithName:constantValues:error:")
	selSetConstantValue      = objc.RegisterName("setConstantValue:type:atIndex:")

	selNewPipelineWithFunction   = objc.RegisterName("newComputePipelineStateWithFunction:error:")
	selNewPipelineWithDescriptor = objc.RegisterName("newComputePipelineStateWithDescriptor:options:reflection:error:")
	selSetComputeFunction        = objc.RegisterName("setComputeFunction:")
	selSetBinaryArchives         = objc.RegisterName("setBinaryArchives:")
	selMaxTotalThreads           = objc.RegisterName("maxTotalThreadsPerThreadgroup")
	selThreadExecutionWidth      = objc.RegisterName("threadExecutionWidth")
	selStaticThreadgroupMemory   = objc.RegisterName("staticThreadgroupMemoryLength")
	selNewBinaryArchive          = objc.RegisterName("newBinaryArchiveWithDescriptor:error:")
	selSetURL                    = objc.RegisterName("setUrl:")
	selAddComputeFunctions       = objc.RegisterName("addComputePipelineFunctionsWithDescriptor:error:")
	selSerializeToURL            = objc.RegisterName("serializeToURL:error:")

	selNewCommandQueue         = objc.RegisterName("newCommandQueue")
	selCommandBufferUnretained = objc.RegisterName("commandBufferWithUnretainedReferences")
	selComputeEncoderWithType  = objc.RegisterName("computeCommandEncoderWithDispatchType:")
	selCommit                  = objc.RegisterName("commit")
	selWaitUntilCompleted      = objc.RegisterName("waitUntilCompleted")
	selStatus                  = objc.RegisterName("status")
	selError                   = objc.RegisterName("error")
	selGPUStartTime            = objc.RegisterName("GPUStartTime")
	selGPUEndTime              = objc.RegisterName("GPUEndTime")
	selAddCompletedHandler     = objc.RegisterName("addCompletedHandler:")
	selSetComputePipelineState = objc.RegisterName("setComputePipelineState:")
	selSetBuffer               = objc.RegisterName("setBuffer:offset:atIndex:")
	selSetBytes                = objc.RegisterName("setBytes:length:atIndex:")
	selSetThreadgroupMemory    = objc.RegisterName("setThreadgroupMemoryLength:atIndex:")
	selDispatchThreadgroups    = objc.RegisterName("dispatchThreadgroups:threadsPerThreadgroup:")
	selDispatchThreads         = objc.RegisterName("dispatchThreads:threadsPerThreadgroup:")
	selMemoryBarrierWithScope  = objc.RegisterName("memoryBarrierWithScope:")
	selEndEncoding             = objc.RegisterName("endEncoding")
)

// send sends a message whose arguments and result fit integer registers. A pointer to Go
// memory may be passed as uintptr(unsafe.Pointer(p)) written directly in the call:
// go:uintptrescapes keeps the pointee on the heap and alive until send returns. It allocates;
// the hot paths use msg0..msg2 or the encoder's argument block instead.
//
//go:uintptrescapes
func send(id objc.ID, sel objc.SEL, args ...uintptr) uintptr {
	a := argPool.Get().(*[8]uintptr)
	a[0], a[1] = uintptr(id), uintptr(sel)
	n := 2 + copy(a[2:], args)
	r, _, _ := purego.SyscallN(rt.msgSend, a[:n]...)
	argPool.Put(a)
	return r
}

// argPool recycles argument blocks: a heap block passed as a slice keeps SyscallN from
// allocating one per call.
var argPool = sync.Pool{New: func() any { return new([8]uintptr) }}

// msg0, msg1 and msg2 send messages without allocating. Their arguments must not be Go pointers.
func msg0(id objc.ID, sel objc.SEL) uintptr { return msgN(id, sel, 0, 0, 0) }

func msg1(id objc.ID, sel objc.SEL, a uintptr) uintptr { return msgN(id, sel, a, 0, 1) }

func msg2(id objc.ID, sel objc.SEL, a, b uintptr) uintptr { return msgN(id, sel, a, b, 2) }

func msgN(id objc.ID, sel objc.SEL, a, b uintptr, n int) uintptr {
	blk := argPool.Get().(*[8]uintptr)
	blk[0], blk[1], blk[2], blk[3] = uintptr(id), uintptr(sel), a, b
	r, _, _ := purego.SyscallN(rt.msgSend, blk[:2+n]...)
	argPool.Put(blk)
	return r
}

// isYes reads a BOOL result: only the low byte of the return register is defined.
func isYes(r uintptr) bool { return r&0xff != 0 }

func retain(id objc.ID) objc.ID {
	msg0(id, selRetain)
	return id
}

func release(id objc.ID) {
	if id != 0 {
		msg0(id, selRelease)
	}
}

// newObject returns [[cls alloc] init], owned by the caller; init's result is the object.
func newObject(cls objc.Class) objc.ID {
	return objc.ID(msg0(objc.ID(msg0(objc.ID(cls), selAlloc)), selInit))
}

// nsString returns an owned NSString holding a copy of s. initWithBytes:length:encoding: returns
// nil for bytes that are not valid UTF-8, and a nil NSString passed on (to fileURLWithPath:,
// setObject:forKey:, ...) raises an Objective-C exception, which aborts the process: s is checked
// here (CheckUTF8) and a nil result is an error too.
func nsString(s string) (objc.ID, error) {
	if err := CheckUTF8(s); err != nil {
		return 0, err
	}
	p := unsafe.StringData(s)
	if p == nil {
		p = &emptyString[0]
	}
	obj := objc.ID(msg0(objc.ID(rt.clsNSString), selAlloc))
	id := objc.ID(send(obj, selInitWithBytesLength, uintptr(unsafe.Pointer(p)), uintptr(len(s)), nsUTF8StringEncoding))
	if id == 0 {
		return 0, fmt.Errorf("mtl: NSString of %d bytes could not be created", len(s))
	}
	return id, nil
}

var emptyString = [1]byte{}

// goString copies an NSString; call it inside a pool, UTF8String may autorelease a buffer.
func goString(s objc.ID) string {
	if s == 0 {
		return ""
	}
	return rt.sendStr(s, selUTF8String)
}

// fileURL returns an autoreleased file NSURL for path.
func fileURL(path string) (objc.ID, error) {
	s, err := nsString(path)
	if err != nil {
		return 0, fmt.Errorf("mtl: path: %w", err)
	}
	defer release(s)
	u := objc.ID(msg1(objc.ID(rt.clsNSURL), selFileURLWithPath, uintptr(s)))
	if u == 0 {
		return 0, fmt.Errorf("mtl: no file URL for %q", path)
	}
	return u, nil
}

// nsErrorText returns an NSError's localizedDescription ("" for nil).
func nsErrorText(e objc.ID) string {
	if e == 0 {
		return ""
	}
	return goString(objc.ID(msg0(e, selLocalizedDesc)))
}

// nsError turns an NSError into a Go error prefixed with what failed (nil for nil).
func nsError(what string, e objc.ID) error {
	if e == 0 {
		return nil
	}
	return fmt.Errorf("mtl: %s: %s (code %d)", what, nsErrorText(e), int(msg0(e, selCode)))
}

// WithPool runs f inside an Objective-C autorelease pool, with the goroutine locked to its OS
// thread meanwhile (pools belong to threads), and drains the pool when f returns or panics.
func WithPool(f func()) {
	if load() != nil {
		f()
		return
	}
	withPool(f)
}

func withPool(f func()) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	pool, _, _ := purego.SyscallN(rt.poolPush)
	defer call1(rt.poolPop, pool)
	f()
}

// call1 calls a C function of one integer argument without allocating.
func call1(fn, a uintptr) {
	blk := argPool.Get().(*[8]uintptr)
	blk[0] = a
	purego.SyscallN(fn, blk[:1]...)
	argPool.Put(blk)
}

// owned retains the autoreleased object get returns inside a pool of its own, so the caller
// owns it whatever pools the calling thread has.
func owned(get func() uintptr) objc.ID {
	var id objc.ID
	withPool(func() { id = objc.ID(get()); retain(id) })
	return id
}
