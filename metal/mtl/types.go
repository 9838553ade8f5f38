package mtl

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"unsafe"
)

// ErrUnavailable is returned by every constructor on systems other than macOS.
var ErrUnavailable = errors.New("mtl: Metal is only available on macOS")

// Family is an MTLGPUFamily value (MTLDevice.h).
type Family int

// GPU families Lily cares about: M1 is Apple7, M2 Apple8, M3 and M4 Apple9, M5 Apple10.
const (
	FamilyApple7  Family = 1007
	FamilyApple8  Family = 1008
	FamilyApple9  Family = 1009
	FamilyApple10 Family = 1010
	FamilyMetal3  Family = 5001 // macOS 13
	FamilyMetal4  Family = 5002 // macOS 26
)

func (f Family) String() string {
	switch {
	case f == 0:
		return "none"
	case f > 1000 && f < 2000:
		return fmt.Sprintf("Apple%d", f-1000)
	case f > 5000 && f < 6000:
		return fmt.Sprintf("Metal%d", f-5000+2)
	}
	return fmt.Sprintf("Family(%d)", int(f))
}

// DeviceInfo is what a Device reports about itself, read once when it is opened.
type DeviceInfo struct {
	Name        string
	Family      Family // highest of Apple7..Apple10 the GPU supports; 0 if none
	MetalFamily Family // FamilyMetal4 or FamilyMetal3; 0 if neither
	// RecommendedMaxWorkingSetSize is the budget, in bytes, for resources the GPU keeps
	// resident with good performance; macOS derives it from the wired-memory limit.
	RecommendedMaxWorkingSetSize uint64
	MaxThreadgroupMemoryLength   int    // bytes of threadgroup memory per threadgroup
	MaxBufferLength              uint64 // largest single MTLBuffer
	HasUnifiedMemory             bool
}

// ResourceOptions is an MTLResourceOptions bit set (MTLResource.h).
type ResourceOptions uint

const (
	StorageModeShared         ResourceOptions = 0      // CPU and GPU share the pages (the only mode this package reads back)
	CPUCacheModeWriteCombined ResourceOptions = 1      // for buffers the CPU only writes
	HazardTrackingUntracked   ResourceOptions = 1 << 8 // no automatic hazard tracking between command buffers
)

// Size is an MTLSize: a grid or threadgroup extent.
type Size struct{ Width, Height, Depth uint64 }

// NewSize returns Size{w, h, d}.
func NewSize(w, h, d int) Size { return Size{uint64(w), uint64(h), uint64(d)} }

// CommandBufferStatus is an MTLCommandBufferStatus.
type CommandBufferStatus uint

const (
	StatusNotEnqueued CommandBufferStatus = iota
	StatusEnqueued
	StatusCommitted
	StatusScheduled
	StatusCompleted
	StatusError
)

func (s CommandBufferStatus) String() string {
	names := [...]string{"not enqueued", "enqueued", "committed", "scheduled", "completed", "error"}
	if int(s) < len(names) {
		return names[s]
	}
	return fmt.Sprintf("status(%d)", uint(s))
}

// LanguageVersion is an MTLLanguageVersion: major<<16 + minor.
type LanguageVersion uint

// The versions Apple's newest headers (Xcode 26) define from 3.0 on; 4.0 is the last. Only add a
// value once an SDK header declares it: newLibraryWithSource:options:error: fails on an unknown one.
const (
	LanguageVersion3_0 LanguageVersion = 3<<16 + 0 // macOS 13
	LanguageVersion3_1 LanguageVersion = 3<<16 + 1 // macOS 14
	LanguageVersion3_2 LanguageVersion = 3<<16 + 2 // macOS 15
	LanguageVersion4_0 LanguageVersion = 4<<16 + 0 // macOS 26
)

// MathMode selects floating-point optimisations. The zero value leaves Metal's default.
type MathMode int

const (
	MathDefault MathMode = iota
	MathSafe             // IEEE 754 semantics and the precise math functions (exp, log, sin, …)
	MathRelaxed          // reassociation and contraction, Inf/NaN preserved
	MathFast             // everything, including finite-math assumptions
)

// CompileOptions configure newLibraryWithSource:options:error:.
type CompileOptions struct {
	LanguageVersion LanguageVersion // 0: Metal's default for the OS
	// Math sets mathMode on macOS 15+, and mathFloatingPointFunctions (precise for MathSafe,
	// fast otherwise). Older systems only have fastMathEnabled: MathFast turns it on, MathSafe
	// and MathRelaxed turn it off (the safe side).
	Math   MathMode
	Macros map[string]string // preprocessor macros, as -D NAME=VALUE
}

// SetValue sets v's bytes as inline constant data for argument index (setBytes:length:atIndex:).
// T must be plain data without Go pointers, laid out as the kernel expects, at most 4 KiB.
func SetValue[T any](e *ComputeEncoder, v T, index int) {
	e.SetBytes(unsafe.Slice((*byte)(unsafe.Pointer(&v)), unsafe.Sizeof(v)), index)
}

// DefaultCacheDir is where NewPipelineCached keeps binary archives when given no directory:
// the user cache directory (~/Library/Caches on macOS) under lily/metal-pipelines.
func DefaultCacheDir() (string, error) {
	dir, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("mtl: no user cache directory: %w", err)
	}
	return filepath.Join(dir, "lily", "metal-pipelines"), nil
}
