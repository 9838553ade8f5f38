//go:build darwin

package mtl

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"unsafe"

	"github.com/ebitengine/purego/objc"
)

// pipelineOptionFailOnBinaryArchiveMiss (MTLPipelineOption, macOS 11): fail instead of
// compiling when the attached archives lack the pipeline, which is how a cache hit is told
// from a silent recompile.
const pipelineOptionFailOnBinaryArchiveMiss = 1 << 2

// Library is an MTLLibrary compiled from Metal Shading Language source.
type Library struct {
	id       objc.ID
	digest   [32]byte         // sourceDigest(source, options), for pipeline cache keys
	Warnings []CompileMessage // diagnostics of a successful compile
}

// NewLibrary compiles source with newLibraryWithSource:options:error:. A failure is a
// *CompileError carrying the compiler's log and its parsed diagnostics.
func (d *Device) NewLibrary(source string, opts CompileOptions) (*Library, error) {
	var lib *Library
	var err error
	withPool(func() {
		src, serr := nsString(source)
		if serr != nil {
			err = fmt.Errorf("mtl: kernel source: %w", serr)
			return
		}
		defer release(src)
		co, cerr := compileOptions(opts)
		if cerr != nil {
			err = cerr
			return
		}
		defer release(co)
		nserr := new(objc.ID)
		id := objc.ID(send(d.id, selNewLibraryWithSource, uintptr(src), uintptr(co), uintptr(unsafe.Pointer(nserr))))
		log := nsErrorText(*nserr) // set for warnings too (MTLLibraryErrorCompileWarning)
		if id == 0 {
			if log == "" {
				log = "newLibraryWithSource returned nil without an error"
			}
			err = &CompileError{Log: log, Messages: ParseCompileLog(log)}
			return
		}
		lib = &Library{id: id, digest: sourceDigest(source, opts), Warnings: ParseCompileLog(log)}
	})
	return lib, err
}

// compileOptions returns an owned MTLCompileOptions.
func compileOptions(opts CompileOptions) (objc.ID, error) {
	for k, v := range opts.Macros { // checked before any object is made
		if err := errors.Join(CheckUTF8(k), CheckUTF8(v)); err != nil {
			return 0, fmt.Errorf("mtl: macro %q: %w", k, err)
		}
	}
	co := newObject(rt.clsCompileOptions)
	if opts.LanguageVersion != 0 {
		msg1(co, selSetLanguageVersion, uintptr(opts.LanguageVersion))
	}
	if opts.Math >= MathSafe && opts.Math <= MathFast {
		if isYes(msg1(co, selRespondsToSelector, uintptr(selSetMathMode))) {
			msg1(co, selSetMathMode, uintptr(opts.Math-MathSafe)) // MTLMathModeSafe = 0, Relaxed = 1, Fast = 2
			// mathMode leaves the fast exp/log/sin in place; Safe also wants the precise ones, as
			// fastMathEnabled = NO gives them (MTLMathFloatingPointFunctionsFast = 0, Precise = 1).
			precise := uintptr(0)
			if opts.Math == MathSafe {
				precise = 1
			}
			msg1(co, selSetMathFPFunctions, precise)
		} else {
			fast := uintptr(0)
			if opts.Math == MathFast {
				fast = 1
			}
			msg1(co, selSetFastMathEnabled, fast)
		}
	}
	if len(opts.Macros) > 0 {
		dict := objc.ID(msg1(objc.ID(msg0(objc.ID(rt.clsNSMutableDictionary), selAlloc)), selInitWithCapacity, uintptr(len(opts.Macros))))
		for k, v := range opts.Macros {
			ks, _ := nsString(k) // valid UTF-8, checked above
			vs, _ := nsString(v)
			msg2(dict, selSetObjectForKey, uintptr(vs), uintptr(ks)) // the dictionary copies the key, retains the value
			release(ks)
			release(vs)
		}
		msg1(co, selSetPreprocessorMacros, uintptr(dict)) // a copy property
		release(dict)
	}
	return co, nil
}

// Release drops the library; functions made from it stay valid.
func (l *Library) Release() {
	release(l.id)
	l.id = 0
}

// Function is an MTLFunction, possibly specialised with function constants.
type Function struct {
	id     objc.ID
	name   string
	digest [32]byte
	consts *FunctionConstants
}

// NewFunction returns the kernel called name, specialised with consts when it has any
// (newFunctionWithName:constantValues:error:, which runs the compiler).
func (l *Library) NewFunction(name string, consts *FunctionConstants) (*Function, error) {
	var fn *Function
	var err error
	withPool(func() {
		ns, nerr := nsString(name)
		if nerr != nil {
			err = fmt.Errorf("mtl: function name: %w", nerr)
			return
		}
		defer release(ns)
		var id objc.ID
		if consts.Len() == 0 {
			if id = objc.ID(msg1(l.id, selNewFunctionWithName, uintptr(ns))); id == 0 {
				err = fmt.Errorf("mtl: no function %q in the library", name)
				return
			}
		} else {
			cv := constantValues(consts)
			defer release(cv)
			nserr := new(objc.ID)
			if id = objc.ID(send(l.id, selNewFunctionConstants, uintptr(ns), uintptr(cv), uintptr(unsafe.Pointer(nserr)))); id == 0 {
				err = nsError(fmt.Sprintf("specialising %q", name), *nserr)
				if err == nil {
					err = fmt.Errorf("mtl: specialising %q failed", name)
				}
				return
			}
		}
		fn = &Function{id: id, name: name, digest: l.digest, consts: consts.clone()}
	})
	return fn, err
}

// constantValues returns an owned MTLFunctionConstantValues holding c.
func constantValues(c *FunctionConstants) objc.ID {
	cv := newObject(rt.clsConstantValues)
	vals := make([]uint32, len(c.vals)) // heap copies: Metal reads them during the call
	for i, v := range c.vals {
		vals[i] = v.bits // a bool is read as one byte: the low byte on little-endian arm64
		send(cv, selSetConstantValue, uintptr(unsafe.Pointer(&vals[i])), uintptr(v.typ), uintptr(v.index))
	}
	return cv
}

// Name is the function's name in the source.
func (f *Function) Name() string { return f.name }

// Release drops the function; pipelines made from it stay valid.
func (f *Function) Release() {
	release(f.id)
	f.id = 0
}

// Pipeline is an MTLComputePipelineState with its limits read once.
type Pipeline struct {
	id                            objc.ID
	MaxTotalThreadsPerThreadgroup int  // may be below 1024 for register-heavy kernels
	ThreadExecutionWidth          int  // SIMD-group width
	StaticThreadgroupMemoryLength int  // bytes declared in the kernel
	FromCache                     bool // built from a binary archive on disk
}

// NewPipeline compiles f for the GPU with newComputePipelineStateWithFunction:error:.
func (d *Device) NewPipeline(f *Function) (*Pipeline, error) {
	var p *Pipeline
	var err error
	withPool(func() { p, err = d.plainPipeline(f) })
	return p, err
}

func (d *Device) plainPipeline(f *Function) (*Pipeline, error) {
	nserr := new(objc.ID)
	id := objc.ID(send(d.id, selNewPipelineWithFunction, uintptr(f.id), uintptr(unsafe.Pointer(nserr))))
	if id == 0 {
		if err := nsError("pipeline "+f.name, *nserr); err != nil {
			return nil, err
		}
		return nil, fmt.Errorf("mtl: pipeline %s: creation failed", f.name)
	}
	return wrapPipeline(id), nil
}

func wrapPipeline(id objc.ID) *Pipeline {
	return &Pipeline{
		id:                            id,
		MaxTotalThreadsPerThreadgroup: int(msg0(id, selMaxTotalThreads)),
		ThreadExecutionWidth:          int(msg0(id, selThreadExecutionWidth)),
		StaticThreadgroupMemoryLength: int(msg0(id, selStaticThreadgroupMemory)),
	}
}

// Release drops the pipeline. Commands already encoded with it must have completed.
func (p *Pipeline) Release() {
	release(p.id)
	p.id = 0
}

// NewPipelineCached is NewPipeline with an MTLBinaryArchive per pipeline under dir
// (DefaultCacheDir when ""), named by CacheKey, so a later start skips the GPU compile. A hit
// is proven by MTLPipelineOptionFailOnBinaryArchiveMiss and reported in Pipeline.FromCache. On
// a miss the pipeline is compiled into a fresh archive, which is then serialised to disk. Any
// cache failure falls back to plain compilation and is described in warning; err is only set
// when the pipeline itself cannot be built.
func (d *Device) NewPipelineCached(f *Function, dir string) (p *Pipeline, warning, err error) {
	if dir == "" {
		var derr error
		if dir, derr = DefaultCacheDir(); derr != nil {
			p, err = d.NewPipeline(f)
			return p, fmt.Errorf("mtl: pipeline cache disabled: %w", derr), err
		}
	}
	key := pipelineKey(f.digest, f.name, f.consts, d.info.Name, d.osVersion)
	var warns []error
	withPool(func() { p, err = d.cachedPipeline(f, dir, key, &warns) })
	return p, errors.Join(warns...), err
}

func (d *Device) cachedPipeline(f *Function, dir, key string, warns *[]error) (*Pipeline, error) {
	path := filepath.Join(dir, key+".metallib")
	desc := newObject(rt.clsPipelineDescriptor)
	defer release(desc)
	msg1(desc, selSetComputeFunction, uintptr(f.id))

	if _, statErr := os.Stat(path); statErr == nil {
		arch, err := d.newArchive(path)
		if err == nil {
			setArchive(desc, arch)
			id, perr := d.descriptorPipeline(desc, pipelineOptionFailOnBinaryArchiveMiss)
			release(arch)
			setArchive(desc, 0)
			if perr == nil {
				p := wrapPipeline(id)
				p.FromCache = true
				return p, nil
			}
			err = perr
		}
		*warns = append(*warns, fmt.Errorf("mtl: pipeline %s: archive %s not used, recompiling: %w", f.name, path, err))
	}

	// Compile into an empty archive first, then build the pipeline from it: one GPU compile.
	arch, err := d.newArchive("")
	if err == nil {
		nserr := new(objc.ID)
		if isYes(send(arch, selAddComputeFunctions, uintptr(desc), uintptr(unsafe.Pointer(nserr)))) {
			if err := serialize(arch, dir, key, path); err != nil {
				*warns = append(*warns, fmt.Errorf("mtl: pipeline %s: not cached: %w", f.name, err))
			}
			setArchive(desc, arch)
		} else {
			aerr := nsError("adding to the binary archive", *nserr)
			if aerr == nil {
				aerr = errors.New("mtl: addComputePipelineFunctionsWithDescriptor failed")
			}
			*warns = append(*warns, fmt.Errorf("mtl: pipeline %s: not cached: %w", f.name, aerr))
		}
		release(arch)
	} else {
		*warns = append(*warns, fmt.Errorf("mtl: pipeline %s: not cached: %w", f.name, err))
	}
	id, err := d.descriptorPipeline(desc, 0)
	if err == nil {
		return wrapPipeline(id), nil
	}
	*warns = append(*warns, fmt.Errorf("mtl: pipeline %s: retrying without the archive: %w", f.name, err))
	return d.plainPipeline(f)
}

// newArchive returns an owned MTLBinaryArchive read from path, or an empty one for "".
func (d *Device) newArchive(path string) (objc.ID, error) {
	desc := newObject(rt.clsArchiveDescriptor)
	defer release(desc)
	if path != "" {
		u, err := fileURL(path)
		if err != nil {
			return 0, err
		}
		msg1(desc, selSetURL, uintptr(u))
	}
	nserr := new(objc.ID)
	arch := objc.ID(send(d.id, selNewBinaryArchive, uintptr(desc), uintptr(unsafe.Pointer(nserr))))
	if arch == 0 {
		if err := nsError("binary archive", *nserr); err != nil {
			return 0, err
		}
		return 0, errors.New("mtl: newBinaryArchiveWithDescriptor failed")
	}
	return arch, nil
}

// setArchive sets the descriptor's binaryArchives to [arch], or clears it for 0.
func setArchive(desc, arch objc.ID) {
	var list uintptr
	if arch != 0 {
		list = msg1(objc.ID(rt.clsNSArray), selArrayWithObject, uintptr(arch)) // autoreleased; the property copies it
	}
	msg1(desc, selSetBinaryArchives, list)
}

func (d *Device) descriptorPipeline(desc objc.ID, options uintptr) (objc.ID, error) {
	nserr := new(objc.ID)
	id := objc.ID(send(d.id, selNewPipelineWithDescriptor, uintptr(desc), options, 0, uintptr(unsafe.Pointer(nserr))))
	if id == 0 {
		if err := nsError("pipeline from descriptor", *nserr); err != nil {
			return 0, err
		}
		return 0, errors.New("mtl: newComputePipelineStateWithDescriptor failed")
	}
	return id, nil
}

// serialize writes the archive next to path and renames it into place, so a concurrent start
// never reads a half-written file.
func serialize(arch objc.ID, dir, key, path string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	tmp := filepath.Join(dir, fmt.Sprintf(".%s.%d.tmp.metallib", key, os.Getpid()))
	u, err := fileURL(tmp)
	if err != nil {
		return err
	}
	nserr := new(objc.ID)
	if !isYes(send(arch, selSerializeToURL, uintptr(u), uintptr(unsafe.Pointer(nserr)))) {
		os.Remove(tmp)
		if err := nsError("serializing the binary archive", *nserr); err != nil {
			return err
		}
		return errors.New("mtl: serializeToURL failed")
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return err
	}
	return nil
}
