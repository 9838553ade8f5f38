//go:build linux

package emu

import (
	"errors"
	"fmt"
	"math"
	"runtime"
	"sort"
	"strings"
	"unsafe"

	"github.com/lilyformac/lily/engine/quant"
	"github.com/lilyformac/lily/metal/emu/gen"
)

// Options select how Compile builds and how dispatches run.
type Options struct {
	// ASan builds with AddressSanitizer. Dispatches then run in a helper process (ASan cannot
	// share a process with the Go runtime); every buffer is copied into an allocation of exactly
	// its length, and a memory error becomes the dispatch's error with ASan's report.
	ASan bool
	// Isolate runs dispatches in a helper process without ASan, so a crashing kernel cannot take
	// the Go process down.
	Isolate bool
	// Debug compiles at -O0 with debug info (for gdb: `break qmv.metal:40`).
	Debug bool
	// Workers is how many OS threads run threadgroups at once in process (default GOMAXPROCS).
	// Helper-process dispatches use one.
	Workers int
	// StackKiB is each GPU thread's fiber stack (default 64, 256 with ASan).
	StackKiB int
	// CacheDir holds compiled objects and libraries, keyed by a hash of sources, flags and
	// compiler (default $LILY_EMU_CACHE, else the user cache dir's lily/metal-emu).
	CacheDir string
	// Clang is the clang++ to use (default $LILY_CLANG, else the newest clang++-NN >= 17).
	Clang string
}

// Library is a set of compiled .metal files.
type Library struct {
	opts    Options
	kernels map[string]*kernelInfo
	be      backend
	path    string
}

type kernelInfo struct {
	index      int
	name       string
	unit       *gen.Unit
	gk         gen.Kernel
	params     []paramDesc // from the compiled code, in gen.Kernel.Params order
	maxThreads int
}

// paramDesc mirrors msl_emu_rt::ParamDesc.
type paramDesc struct {
	Kind  int32
	Index int32
	Size  uint32
	IsRef int32
}

// backend runs dispatches: in process (purego) or in a helper process.
type backend interface {
	describe() ([]kernelDesc, error)
	run(j *job) error
	close() error
}

// job is one dispatch as the backends see it.
type job struct {
	l       *launch
	bufs    []*Buffer // distinct buffers
	bind    [31]int   // index into bufs per buffer slot, or -1
	offs    [31]int
	fcv     []uint64
	fcd     []uint8
	workers int
}

type kernelDesc struct {
	name       string
	maxThreads uint32
	params     []paramDesc
}

// Compile translates, compiles (or finds in the cache) and loads srcs.
func Compile(srcs []Source, opts Options) (*Library, error) {
	if opts.StackKiB == 0 {
		opts.StackKiB = 64
		if opts.ASan {
			opts.StackKiB = 256
		}
	}
	if opts.Workers <= 0 {
		opts.Workers = runtime.GOMAXPROCS(0)
	}
	path, plan, err := build(srcs, opts)
	if err != nil {
		return nil, err
	}
	var be backend
	if plan.mode == "so" {
		be, err = loadInProcess(path)
	} else {
		be = newHelper(path, plan.tc, opts.ASan)
	}
	if err != nil {
		return nil, err
	}
	descs, err := be.describe()
	if err != nil {
		be.close()
		return nil, err
	}
	lib := &Library{opts: opts, kernels: map[string]*kernelInfo{}, be: be, path: path}
	byName := map[string]gen.Kernel{}
	units := map[string]*gen.Unit{}
	for _, u := range plan.units {
		for _, k := range u.Kernels {
			if prev := units[k.Name]; prev != nil {
				be.close()
				return nil, fmt.Errorf("emu: kernel %s is defined in %s and in %s", k.Name, prev.Name, u.Name)
			}
			byName[k.Name] = k
			units[k.Name] = u
		}
	}
	for i, d := range descs {
		gk, ok := byName[d.name]
		if !ok || len(gk.Params) != len(d.params) {
			be.close()
			return nil, fmt.Errorf("emu: kernel %s: generator and compiled code disagree", d.name)
		}
		lib.kernels[d.name] = &kernelInfo{index: i, name: d.name, unit: units[d.name], gk: gk, params: d.params, maxThreads: int(d.maxThreads)}
	}
	return lib, nil
}

// Kernels lists the library's kernel names, sorted.
func (l *Library) Kernels() []string {
	var s []string
	for n := range l.kernels {
		s = append(s, n)
	}
	sort.Strings(s)
	return s
}

// Path is the compiled shared library or helper executable.
func (l *Library) Path() string { return l.path }

// Close stops the helper process, if any. An in-process library stays loaded.
func (l *Library) Close() error { return l.be.close() }

// Pipeline is a kernel specialised with function constants.
type Pipeline struct {
	lib       *Library
	k         *kernelInfo
	fcValues  []uint64
	fcDefined []uint8
}

// Pipeline specialises kernel with function constants by index (Go bools, integers and floats,
// converted to each constant's declared type). Every constant the kernel's file declares must
// be given, except those it tests with is_function_constant_defined; indices it does not
// declare are ignored, as Metal does.
func (l *Library) Pipeline(kernel string, constants map[int]any) (*Pipeline, error) {
	k := l.kernels[kernel]
	if k == nil {
		return nil, fmt.Errorf("emu: no kernel %q (have %s)", kernel, strings.Join(l.Kernels(), ", "))
	}
	p := &Pipeline{lib: l, k: k}
	n := 0
	for _, c := range k.unit.Constants {
		n = max(n, c.Index+1)
	}
	p.fcValues = make([]uint64, n+1)
	p.fcDefined = make([]uint8, n+1)
	var missing []string
	for _, c := range k.unit.Constants {
		v, ok := constants[c.Index]
		if !ok {
			if !c.Optional {
				missing = append(missing, fmt.Sprintf("%s (index %d)", c.Name, c.Index))
			}
			continue
		}
		bits, err := constantBits(c.Type, v)
		if err != nil {
			return nil, fmt.Errorf("emu: %s: function constant %s (index %d): %w", kernel, c.Name, c.Index, err)
		}
		p.fcValues[c.Index] = bits
		p.fcDefined[c.Index] = 1
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("emu: %s: function constants not set: %s", kernel, strings.Join(missing, ", "))
	}
	return p, nil
}

func constantBits(typ string, v any) (uint64, error) {
	var i int64
	var u uint64
	var f float64
	kind := ""
	switch x := v.(type) {
	case bool:
		kind = "bool"
		if x {
			i, u, f = 1, 1, 1
		}
	case int:
		i, kind = int64(x), "int"
	case int8:
		i, kind = int64(x), "int"
	case int16:
		i, kind = int64(x), "int"
	case int32:
		i, kind = int64(x), "int"
	case int64:
		i, kind = x, "int"
	case uint:
		u, kind = uint64(x), "uint"
	case uint8:
		u, kind = uint64(x), "uint"
	case uint16:
		u, kind = uint64(x), "uint"
	case uint32:
		u, kind = uint64(x), "uint"
	case uint64:
		u, kind = x, "uint"
	case float32:
		f, kind = float64(x), "float"
	case float64:
		f, kind = x, "float"
	default:
		return 0, fmt.Errorf("unsupported Go type %T", v)
	}
	switch kind {
	case "int":
		u, f = uint64(i), float64(i)
		if i < 0 {
			u = 0
		}
	case "uint":
		i, f = int64(u), float64(u)
	}
	isInt := kind == "int" || kind == "uint" || kind == "bool"
	intRange := func(lo int64, hi uint64) (uint64, error) {
		if !isInt {
			return 0, fmt.Errorf("%v is not an integer", v)
		}
		if kind == "int" && i < lo || kind != "int" && u > hi || kind == "int" && i > 0 && uint64(i) > hi {
			return 0, fmt.Errorf("%v is out of range for %s", v, typ)
		}
		return uint64(i), nil
	}
	switch typ {
	case "bool":
		if kind != "bool" {
			return 0, fmt.Errorf("want a Go bool, got %T", v)
		}
		return u, nil
	case "char":
		return intRange(math.MinInt8, math.MaxInt8)
	case "uchar":
		return intRange(0, math.MaxUint8)
	case "short":
		return intRange(math.MinInt16, math.MaxInt16)
	case "ushort":
		return intRange(0, math.MaxUint16)
	case "int":
		return intRange(math.MinInt32, math.MaxInt32)
	case "uint":
		return intRange(0, math.MaxUint32)
	case "long":
		return intRange(math.MinInt64, math.MaxInt64)
	case "ulong":
		if kind == "int" && i < 0 || !isInt {
			return 0, fmt.Errorf("%v is out of range for ulong", v)
		}
		return u, nil
	case "float":
		return uint64(math.Float32bits(float32(f))), nil
	case "half":
		return uint64(quant.F32ToF16(float32(f))), nil
	case "bfloat":
		return uint64(f32ToBF16(float32(f))), nil
	}
	return 0, fmt.Errorf("unsupported constant type %s", typ)
}

// f32ToBF16 rounds to bfloat16, to nearest even.
func f32ToBF16(f float32) uint16 {
	b := math.Float32bits(f)
	if f != f {
		return uint16(b>>16) | 0x40
	}
	b += 0x7fff + (b>>16)&1
	return uint16(b >> 16)
}

// Binding binds a buffer, from Offset on, to a [[buffer(n)]] parameter.
type Binding struct {
	Buffer *Buffer
	Offset int
}

// Dispatch describes one dispatch. Set Threadgroups (dispatchThreadgroups) or Threads
// (dispatchThreads: the grid's size in threads, with smaller threadgroups at the edges).
// Zero extents count as 1.
type Dispatch struct {
	Threadgroups [3]int
	Threads      [3]int
	Group        [3]int // threads per threadgroup
	// Buffers binds [[buffer(n)]] parameters by index.
	Buffers map[int]Binding
	// ThreadgroupMem sets the byte length of [[threadgroup(n)]] parameters (a multiple of 16,
	// as setThreadgroupMemoryLength requires).
	ThreadgroupMem map[int]int
	// Order is the thread order within threadgroups; Seed seeds Shuffle and Ahead.
	Order Order
	Seed  uint64
	// LayoutSeed draws the element-to-thread layout of cooperative tensors (Metal 4 tensor ops):
	// a seeded permutation per op shape and scope, with slots that hold no element. The same seed
	// gives the same layout; run a tensor-op kernel under several to show a layout assumption.
	LayoutSeed uint64
}

// launch mirrors msl_emu_rt::Launch (runtime.cc).
type launch struct {
	kernel     uint64
	buffers    [31]unsafe.Pointer
	bufferLen  [31]uint64
	fcValues   unsafe.Pointer
	fcDefined  unsafe.Pointer
	seed       uint64
	layoutSeed uint64
	tgLen      [31]uint32
	groups     [3]uint32
	tg         [3]uint32
	grid       [3]uint32
	groupBegin uint32
	groupEnd   uint32
	order      uint32
	fcCount    uint32
	stackKiB   uint32
	flags      uint32
}

const launchSize = 720

// deviceMaxThreads is the threadgroup limit of every Apple GPU Lily supports.
const deviceMaxThreads = 1024

func init() {
	if unsafe.Sizeof(launch{}) != launchSize || unsafe.Offsetof(launch{}.tgLen) != 536 || unsafe.Offsetof(launch{}.groups) != 660 {
		panic("emu: launch layout does not match runtime.cc")
	}
}

// Kernel is the pipeline's kernel name.
func (p *Pipeline) Kernel() string { return p.k.name }

// MaxThreads is the most threads a threadgroup may have: the kernel's
// [[max_total_threads_per_threadgroup]], else 1024 (Metal's maxTotalThreadsPerThreadgroup).
func (p *Pipeline) MaxThreads() int {
	if p.k.maxThreads > 0 {
		return min(p.k.maxThreads, deviceMaxThreads)
	}
	return deviceMaxThreads
}

// deviceThreadgroupMemory is the threadgroup memory of every Apple GPU Lily supports (Apple7 and
// later: 32 KiB), the runtime's limit too.
const deviceThreadgroupMemory = 32 * 1024

// ThreadExecutionWidth is the SIMD-group width: 32 lanes, as on Apple GPUs.
func (p *Pipeline) ThreadExecutionWidth() int { return 32 }

// StaticThreadgroupMemoryLength is 0: the emulator allocates a kernel's threadgroup arrays when
// the threads first reach them, and fails the dispatch there if they overflow the limit.
func (p *Pipeline) StaticThreadgroupMemoryLength() int { return 0 }

// MaxThreadgroupMemoryLength is the device's limit for a threadgroup, declared and dynamic memory
// together: 32 KiB, Metal's maxThreadgroupMemoryLength on Apple GPUs.
func (p *Pipeline) MaxThreadgroupMemoryLength() int { return deviceThreadgroupMemory }

// Dispatch runs the kernel over a grid and returns when it is done. A kernel error (barrier or
// SIMD-group misuse, a write outside a buffer, a sanitizer report) is returned as an error.
func (p *Pipeline) Dispatch(d Dispatch) error {
	k := p.k
	one := func(v [3]int) [3]int {
		for i := range v {
			if v[i] == 0 {
				v[i] = 1
			}
		}
		return v
	}
	tg := one(d.Group)
	nt := tg[0] * tg[1] * tg[2]
	if tg[0] < 0 || tg[1] < 0 || tg[2] < 0 || nt > deviceMaxThreads {
		return fmt.Errorf("emu: %s: threadgroup %v: want 1..%d threads", k.name, d.Group, deviceMaxThreads)
	}
	if k.maxThreads > 0 && nt > k.maxThreads {
		return fmt.Errorf("emu: %s: threadgroup of %d threads exceeds [[max_total_threads_per_threadgroup(%d)]]", k.name, nt, k.maxThreads)
	}
	var groups, grid [3]int
	switch {
	case d.Threadgroups != [3]int{} && d.Threads != [3]int{}:
		return fmt.Errorf("emu: %s: set Threadgroups or Threads, not both", k.name)
	case d.Threads != [3]int{}:
		grid = one(d.Threads)
		for i := range grid {
			groups[i] = (grid[i] + tg[i] - 1) / tg[i]
		}
	default:
		groups = one(d.Threadgroups)
	}
	total := 1
	for i := range groups {
		if groups[i] <= 0 || grid[i] < 0 {
			return fmt.Errorf("emu: %s: empty or negative grid", k.name)
		}
		total *= groups[i]
	}
	if total > math.MaxUint32 {
		return fmt.Errorf("emu: %s: too many threadgroups", k.name)
	}

	l := &launch{kernel: uint64(k.index), seed: d.Seed, layoutSeed: d.LayoutSeed, order: uint32(d.Order), stackKiB: uint32(p.lib.opts.StackKiB)}
	l.fcValues = unsafe.Pointer(&p.fcValues[0])
	l.fcDefined = unsafe.Pointer(&p.fcDefined[0])
	l.fcCount = uint32(len(p.fcValues))
	for i := range 3 {
		l.groups[i], l.tg[i], l.grid[i] = uint32(groups[i]), uint32(tg[i]), uint32(grid[i])
	}
	var bufs []*Buffer
	var bindIdx, offs [31]int
	for i := range bindIdx {
		bindIdx[i] = -1
	}
	for i, gp := range k.gk.Params {
		pd := k.params[i]
		switch gp.Kind {
		case gen.Buffer:
			if gp.Gate != "" && !p.on(gp.Gate) {
				continue // the argument is absent from this pipeline: nothing to bind (nil in the kernel)
			}
			b, ok := d.Buffers[gp.Index]
			if !ok || b.Buffer == nil {
				return fmt.Errorf("emu: %s: no buffer bound at index %d (%s)", k.name, gp.Index, gp.Decl)
			}
			if b.Offset < 0 || b.Offset > b.Buffer.n {
				return fmt.Errorf("emu: %s: buffer %d: offset %d outside its %d bytes", k.name, gp.Index, b.Offset, b.Buffer.n)
			}
			if pd.IsRef == 1 && b.Buffer.n-b.Offset < int(pd.Size) {
				return fmt.Errorf("emu: %s: buffer %d (%s) holds %d bytes from its offset, the parameter needs %d", k.name, gp.Index, gp.Decl, b.Buffer.n-b.Offset, pd.Size)
			}
			j := -1
			for bi, have := range bufs {
				if have == b.Buffer {
					j = bi
				}
			}
			if j < 0 {
				j = len(bufs)
				bufs = append(bufs, b.Buffer)
			}
			bindIdx[gp.Index], offs[gp.Index] = j, b.Offset
			if b.Buffer.n > 0 {
				l.buffers[gp.Index] = b.Buffer.ptr(b.Offset)
			} else {
				l.buffers[gp.Index] = b.Buffer.ptr(0)
			}
			l.bufferLen[gp.Index] = uint64(b.Buffer.n - b.Offset)
		case gen.Threadgroup:
			n, ok := d.ThreadgroupMem[gp.Index]
			if !ok || n <= 0 {
				return fmt.Errorf("emu: %s: no threadgroup memory length set for index %d (%s)", k.name, gp.Index, gp.Decl)
			}
			if n%16 != 0 {
				return fmt.Errorf("emu: %s: threadgroup memory length %d at index %d is not a multiple of 16", k.name, n, gp.Index)
			}
			if n < int(pd.Size) {
				return fmt.Errorf("emu: %s: threadgroup memory %d holds %d bytes, less than one element", k.name, gp.Index, n)
			}
			l.tgLen[gp.Index] = uint32(n)
		}
	}
	err := p.lib.be.run(&job{l: l, bufs: bufs, bind: bindIdx, offs: offs, fcv: p.fcValues, fcd: p.fcDefined, workers: p.lib.opts.Workers})
	var ke *KernelError
	if errors.As(err, &ke) {
		ke.Kernel = k.name
	}
	var cerrs []error
	for i, b := range bufs {
		if cerr := b.checkCanaries(); cerr != nil {
			var at []string
			for idx, j := range bindIdx {
				if j == i {
					at = append(at, fmt.Sprint(idx))
				}
			}
			cerrs = append(cerrs, fmt.Errorf("emu: %s: buffer bound at index %s: %w", k.name, strings.Join(at, ", "), cerr))
		}
	}
	runtime.KeepAlive(p)
	runtime.KeepAlive(bufs)
	if err != nil {
		return err
	}
	return errors.Join(cerrs...)
}

// on reports whether the bool function constant name is set and true in the pipeline.
func (p *Pipeline) on(name string) bool {
	for _, c := range p.k.unit.Constants {
		if c.Name == name {
			return p.fcDefined[c.Index] == 1 && p.fcValues[c.Index] != 0
		}
	}
	return false
}

// KernelError is a failure inside a kernel: misuse the scheduler detected, or a sanitizer or
// crash report from the helper process (Report holds its full text).
type KernelError struct {
	Kernel string
	Msg    string
	Report string
}

func (e *KernelError) Error() string { return fmt.Sprintf("emu: kernel %s: %s", e.Kernel, e.Msg) }

// split divides [0, total) into at most n contiguous ranges.
func split(total, n int) [][2]int {
	n = max(1, min(n, total))
	var r [][2]int
	for i := range n {
		r = append(r, [2]int{total * i / n, total * (i + 1) / n})
	}
	return r
}
