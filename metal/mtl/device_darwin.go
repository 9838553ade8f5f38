//go:build darwin

package mtl

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"unsafe"

	"github.com/ebitengine/purego"
	"github.com/ebitengine/purego/objc"
	"golang.org/x/sys/unix"
)

// Device is a Metal GPU (id<MTLDevice>). It may be used from any goroutine.
type Device struct {
	id        objc.ID
	info      DeviceInfo
	osVersion string
}

// DefaultDevice returns a reference to the system's default GPU. The device is created once
// per process — MTLCreateSystemDefaultDevice, or the first device MTLCopyAllDevices lists when
// that returns nil (it does in some non-GUI contexts) — and every call retains it again.
func DefaultDevice() (*Device, error) {
	if err := load(); err != nil {
		return nil, err
	}
	sys.mu.Lock()
	defer sys.mu.Unlock()
	if sys.dev == nil {
		withPool(func() { sys.dev = openDefaultDevice() })
		if sys.dev == nil {
			return nil, errors.New("mtl: no Metal device (MTLCreateSystemDefaultDevice and MTLCopyAllDevices found none)")
		}
	}
	d := *sys.dev
	retain(d.id)
	return &d, nil
}

// sys keeps the process's reference to the default device.
var sys struct {
	mu  sync.Mutex
	dev *Device
}

func openDefaultDevice() *Device {
	r, _, _ := purego.SyscallN(rt.createDevice) // returns retained
	id := objc.ID(r)
	if id == 0 && rt.copyAllDevices != 0 {
		r, _, _ := purego.SyscallN(rt.copyAllDevices) // returns a retained NSArray
		if all := objc.ID(r); all != 0 {
			if msg0(all, selCount) > 0 { // objectAtIndex: on an empty array raises
				id = retain(objc.ID(msg1(all, selObjectAtIndex, 0)))
			}
			release(all)
		}
	}
	if id == 0 {
		return nil
	}
	d := &Device{id: id}
	d.info = DeviceInfo{
		Name:                         goString(objc.ID(msg0(id, selName))),
		RecommendedMaxWorkingSetSize: uint64(msg0(id, selRecommendedMaxWorkingSetSize)),
		MaxThreadgroupMemoryLength:   int(msg0(id, selMaxThreadgroupMemoryLength)),
		MaxBufferLength:              uint64(msg0(id, selMaxBufferLength)),
		HasUnifiedMemory:             isYes(msg0(id, selHasUnifiedMemory)),
	}
	for _, f := range []Family{FamilyApple10, FamilyApple9, FamilyApple8, FamilyApple7} {
		if d.SupportsFamily(f) {
			d.info.Family = f
			break
		}
	}
	for _, f := range []Family{FamilyMetal4, FamilyMetal3} {
		if d.SupportsFamily(f) {
			d.info.MetalFamily = f
			break
		}
	}
	// The build number, not just "15.5": the Metal compiler changes with every OS build.
	product, _ := unix.Sysctl("kern.osproductversion")
	build, _ := unix.Sysctl("kern.osversion")
	d.osVersion = product + " (" + build + ")"
	return d
}

// Info returns what the device reported when it was opened.
func (d *Device) Info() DeviceInfo { return d.info }

// Name is the GPU's name, e.g. "Apple M3 Max".
func (d *Device) Name() string { return d.info.Name }

// OSVersion is the macOS version and build the device was opened on, as CacheKey wants it.
func (d *Device) OSVersion() string { return d.osVersion }

// SupportsFamily asks supportsFamily:.
func (d *Device) SupportsFamily(f Family) bool {
	return isYes(msg1(d.id, selSupportsFamily, uintptr(f)))
}

// CurrentAllocatedSize is the bytes of all resources the device has allocated now.
func (d *Device) CurrentAllocatedSize() uint64 { return uint64(msg0(d.id, selCurrentAllocatedSize)) }

// Release drops this reference to the device (the process keeps its own).
func (d *Device) Release() {
	release(d.id)
	d.id = 0
}

// Buffer is an MTLBuffer in shared storage: Contents is the same memory the GPU uses.
type Buffer struct {
	id  objc.ID
	ptr unsafe.Pointer
	n   int
}

// NewBuffer allocates length bytes (zero-filled by the kernel) with newBufferWithLength:options:.
func (d *Device) NewBuffer(length int, opts ResourceOptions) (*Buffer, error) {
	if length <= 0 {
		return nil, fmt.Errorf("mtl: buffer length %d", length)
	}
	var b *Buffer
	withPool(func() { b = wrapBuffer(objc.ID(msg2(d.id, selNewBufferWithLength, uintptr(length), uintptr(opts)))) })
	if b == nil {
		return nil, fmt.Errorf("mtl: cannot allocate a %d-byte buffer (maxBufferLength %d, allocated %d)",
			length, d.info.MaxBufferLength, d.CurrentAllocatedSize())
	}
	return b, nil
}

// NewBufferNoCopy wraps memory the GPU reads and writes in place, with
// newBufferWithBytesNoCopy:length:options:deallocator: and no deallocator. b must start on a
// page boundary, its length must be a multiple of the page size (PlanNoCopy computes such
// windows), and it must not be Go-allocated memory: use an mmap'd file or anonymous mapping
// and keep it mapped until the buffer is released and no command using it is pending.
func (d *Device) NewBufferNoCopy(b []byte, opts ResourceOptions) (*Buffer, error) {
	page := os.Getpagesize()
	p := unsafe.Pointer(unsafe.SliceData(b))
	if len(b) == 0 || uintptr(p)%uintptr(page) != 0 || len(b)%page != 0 {
		return nil, fmt.Errorf("mtl: no-copy buffer at %p, %d bytes: needs page-aligned address and length (page %d)", p, len(b), page)
	}
	var buf *Buffer
	withPool(func() {
		buf = wrapBuffer(objc.ID(send(d.id, selNewBufferWithBytesNoCopy, uintptr(p), uintptr(len(b)), uintptr(opts), 0)))
	})
	if buf == nil {
		return nil, fmt.Errorf("mtl: newBufferWithBytesNoCopy failed for %d bytes (maxBufferLength %d)", len(b), d.info.MaxBufferLength)
	}
	return buf, nil
}

func wrapBuffer(id objc.ID) *Buffer {
	if id == 0 {
		return nil
	}
	return &Buffer{id: id, ptr: rt.sendPtr(id, selContents), n: int(msg0(id, selLength))}
}

// Contents returns the buffer's memory. It stays valid until Release.
func (b *Buffer) Contents() []byte {
	if b.ptr == nil {
		return nil
	}
	return unsafe.Slice((*byte)(b.ptr), b.n)
}

// Length is the buffer's size in bytes.
func (b *Buffer) Length() int { return b.n }

// Release drops the buffer; a no-copy buffer's memory stays with its owner.
func (b *Buffer) Release() {
	release(b.id)
	*b = Buffer{}
}

// Probe opens the default device and reports what `lily doctor` shows: its name, its highest
// Apple GPU family (e.g. "Apple9") and its recommended working-set size. ok is false, with a
// reason, when there is no Metal device or it predates Apple7 (M1), which Lily's kernels need.
func Probe() (name, family string, workingSet uint64, ok bool, reason string) {
	d, err := DefaultDevice()
	if err != nil {
		return "", "", 0, false, err.Error()
	}
	defer d.Release()
	info := d.Info()
	if info.Family == 0 {
		return info.Name, "", info.RecommendedMaxWorkingSetSize, false,
			fmt.Sprintf("%s supports no Apple GPU family from Apple7 (M1) on", info.Name)
	}
	return info.Name, info.Family.String(), info.RecommendedMaxWorkingSetSize, true, ""
}
