//go:build darwin

package mtl

import (
	"encoding/binary"
	"errors"
	"math"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// addSource adds two arrays, scaled by a function constant, with a bound check from setBytes.
const addSource = `
#include <metal_stdlib>
using namespace metal;

constant float scale [[function_constant(0)]];

struct Params { uint n; };

kernel void add(device const float *a [[buffer(0)]],
                device const float *b [[buffer(1)]],
                device float *out     [[buffer(2)]],
                constant Params &p    [[buffer(3)]],
                uint i [[thread_position_in_grid]]) {
    if (i < p.n) out[i] = (a[i] + b[i]) * scale;
}

kernel void twice(device float *x [[buffer(0)]], uint i [[thread_position_in_grid]]) {
    x[i] *= 2.0f;
}
`

func device(t *testing.T) *Device {
	t.Helper()
	d, err := DefaultDevice()
	if err != nil {
		t.Skipf("no Metal device: %v", err)
	}
	t.Cleanup(d.Release)
	return d
}

func TestDeviceInfo(t *testing.T) {
	d := device(t)
	info := d.Info()
	t.Logf("%+v, OS %s, allocated %d", info, d.OSVersion(), d.CurrentAllocatedSize())
	if info.Name == "" || info.MaxBufferLength == 0 || info.MaxThreadgroupMemoryLength == 0 || info.RecommendedMaxWorkingSetSize == 0 {
		t.Fatalf("incomplete device info %+v", info)
	}
	if info.Family != 0 && !d.SupportsFamily(info.Family) {
		t.Fatalf("family %v reported but not supported", info.Family)
	}
	name, family, ws, ok, reason := Probe()
	t.Logf("Probe: %q %q %d %v %q", name, family, ws, ok, reason)
	if name != info.Name || ws != info.RecommendedMaxWorkingSetSize || ok != (info.Family != 0) {
		t.Fatal("Probe disagrees with Info")
	}
}

func TestAddArrays(t *testing.T) {
	d := device(t)
	const n = 1000
	lib, err := d.NewLibrary(addSource, CompileOptions{LanguageVersion: LanguageVersion3_1, Math: MathSafe})
	if err != nil {
		t.Fatal(err)
	}
	defer lib.Release()
	var consts FunctionConstants
	consts.SetFloat(0, 0.5)
	fn, err := lib.NewFunction("add", &consts)
	if err != nil {
		t.Fatal(err)
	}
	defer fn.Release()
	p, err := d.NewPipeline(fn)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Release()
	if p.MaxTotalThreadsPerThreadgroup == 0 || p.ThreadExecutionWidth == 0 {
		t.Fatalf("pipeline limits %+v", p)
	}

	// a: a shared buffer; b: a no-copy buffer over an anonymous mapping; out: shared.
	a, err := d.NewBuffer(4*n, StorageModeShared)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Release()
	page := os.Getpagesize()
	mapping, err := unix.Mmap(-1, 0, page, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(mapping)
	b, err := d.NewBufferNoCopy(mapping, StorageModeShared)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Release()
	out, err := d.NewBuffer(4*n, StorageModeShared)
	if err != nil {
		t.Fatal(err)
	}
	defer out.Release()
	for i := range n {
		binary.LittleEndian.PutUint32(a.Contents()[4*i:], math.Float32bits(float32(i)))
		binary.LittleEndian.PutUint32(mapping[4*i:], math.Float32bits(float32(3*i)))
	}
	if &b.Contents()[0] != &mapping[0] {
		t.Fatal("no-copy buffer does not share the mapping")
	}

	q, err := d.NewCommandQueue()
	if err != nil {
		t.Fatal(err)
	}
	defer q.Release()
	var cb *CommandBuffer
	WithPool(func() {
		if cb, err = q.CommandBuffer(); err != nil {
			return
		}
		var e *ComputeEncoder
		if e, err = cb.ComputeEncoder(true); err != nil {
			return
		}
		e.SetPipeline(p)
		e.SetBuffer(a, 0, 0)
		e.SetBuffer(b, 0, 1)
		e.SetBuffer(out, 0, 2)
		SetValue(e, struct{ N uint32 }{n}, 3)
		tg := min(p.MaxTotalThreadsPerThreadgroup, 256)
		e.DispatchThreadgroups(NewSize((n+tg-1)/tg, 1, 1), NewSize(tg, 1, 1))
		e.Barrier()
		e.End()
		cb.Commit()
		cb.WaitUntilCompleted()
	})
	if err != nil {
		t.Fatal(err)
	}
	defer cb.Release()
	if s := cb.Status(); s != StatusCompleted {
		t.Fatalf("status %v, error %v", s, cb.Err())
	}
	if start, end := cb.GPUTimes(); start <= 0 || end < start {
		t.Errorf("GPU times %v..%v", start, end)
	}
	for i := range n {
		got := math.Float32frombits(binary.LittleEndian.Uint32(out.Contents()[4*i:]))
		if want := float32(4*i) * 0.5; got != want {
			t.Fatalf("out[%d] = %v, want %v", i, got, want)
		}
	}
}

// TestCompletedHandler runs a Go function from a Metal completion thread through a purego block.
func TestCompletedHandler(t *testing.T) {
	d := device(t)
	q, err := d.NewCommandQueue()
	if err != nil {
		t.Fatal(err)
	}
	defer q.Release()
	cb, err := q.CommandBuffer()
	if err != nil {
		t.Fatal(err)
	}
	defer cb.Release()
	done := make(chan CommandBufferStatus, 1)
	cb.AddCompletedHandler(func() { done <- cb.Status() })
	cb.Commit()
	select {
	case s := <-done:
		if s != StatusCompleted {
			t.Fatalf("status in handler %v", s)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("completed handler did not run")
	}
}

func TestCompileErrors(t *testing.T) {
	d := device(t)
	_, err := d.NewLibrary("kernel void k(device float *x [[buffer(0)]]) {\n  x[0] = undeclared;\n}\n", CompileOptions{})
	var ce *CompileError
	if !errors.As(err, &ce) {
		t.Fatalf("err = %v, want a *CompileError", err)
	}
	t.Logf("log:\n%s", ce.Log)
	if len(ce.Messages) == 0 || ce.Messages[0].Line != 2 || ce.Messages[0].Severity != "error" {
		t.Fatalf("messages %+v", ce.Messages)
	}
	lib, err := d.NewLibrary(addSource, CompileOptions{Macros: map[string]string{"UNUSED": "1"}, Math: MathFast})
	if err != nil {
		t.Fatal(err)
	}
	defer lib.Release()
	if _, err := lib.NewFunction("missing", nil); err == nil {
		t.Fatal("no error for a missing function")
	}
}

func TestPipelineCache(t *testing.T) {
	d := device(t)
	dir := t.TempDir()
	lib, err := d.NewLibrary(addSource, CompileOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer lib.Release()
	fn, err := lib.NewFunction("twice", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer fn.Release()
	for i, wantCached := range []bool{false, true} {
		p, warn, err := d.NewPipelineCached(fn, dir)
		if err != nil {
			t.Fatal(err)
		}
		if warn != nil {
			t.Logf("run %d warning: %v", i, warn)
		}
		if p.FromCache != wantCached {
			t.Errorf("run %d: FromCache = %v, want %v", i, p.FromCache, wantCached)
		}
		p.Release()
	}
	files, _ := filepath.Glob(filepath.Join(dir, "*.metallib"))
	key := CacheKey(addSource, CompileOptions{}, "twice", nil, d.Name(), d.OSVersion())
	if len(files) != 1 || filepath.Base(files[0]) != key+".metallib" {
		t.Fatalf("cache files %v, want %s.metallib", files, key)
	}
}

func TestEncodingDoesNotAllocate(t *testing.T) {
	d := device(t)
	lib, err := d.NewLibrary(addSource, CompileOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer lib.Release()
	fn, err := lib.NewFunction("twice", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer fn.Release()
	p, err := d.NewPipeline(fn)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Release()
	buf, err := d.NewBuffer(4*64, StorageModeShared)
	if err != nil {
		t.Fatal(err)
	}
	defer buf.Release()
	q, err := d.NewCommandQueue()
	if err != nil {
		t.Fatal(err)
	}
	defer q.Release()
	WithPool(func() {
		cb, err := q.CommandBuffer()
		if err != nil {
			t.Fatal(err)
		}
		defer cb.Release()
		e, err := cb.ComputeEncoder(true)
		if err != nil {
			t.Fatal(err)
		}
		params := [4]uint32{1, 2, 3, 4}
		allocs := testing.AllocsPerRun(100, func() {
			e.SetPipeline(p)
			e.SetBuffer(buf, 0, 0)
			SetValue(e, params, 1)
			e.DispatchThreadgroups(NewSize(1, 1, 1), NewSize(64, 1, 1))
			e.Barrier()
		})
		e.End()
		cb.Commit()
		cb.WaitUntilCompleted()
		if allocs != 0 {
			t.Errorf("encoding allocates %v times per dispatch", allocs)
		}
	})
}
