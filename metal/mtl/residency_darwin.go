//go:build darwin

package mtl

import (
	"unsafe"

	"github.com/ebitengine/purego/objc"
)

// MTLResidencySet (macOS 15): MTLResidencySet.h, MTLDevice.h, MTLCommandQueue.h.
var (
	selNewResidencySet    = objc.RegisterName("newResidencySetWithDescriptor:error:")
	selSetInitialCapacity = objc.RegisterName("setInitialCapacity:")
	selAddAllocation      = objc.RegisterName("addAllocation:")
	selRemoveAllocation   = objc.RegisterName("removeAllocation:")
	selRequestResidency   = objc.RegisterName("requestResidency")
	selEndResidency       = objc.RegisterName("endResidency")
	selAllocatedSize      = objc.RegisterName("allocatedSize")
	selAddResidencySet    = objc.RegisterName("addResidencySet:")
	selRemoveResidencySet = objc.RegisterName("removeResidencySet:")
)

// ResidencySet is an MTLResidencySet: allocations the GPU keeps resident while a command queue
// it is added to runs. Adds and removes take effect at Commit. Not safe for concurrent use.
type ResidencySet struct{ id objc.ID }

// NewResidencySet makes an empty residency set (newResidencySetWithDescriptor:error:) with room
// for capacity allocations. Where the system lacks residency sets (macOS before 15: no
// MTLResidencySetDescriptor class, or a device not answering the selector) it returns
// ErrNoResidencySets, and the caller runs without one.
func (d *Device) NewResidencySet(capacity int) (*ResidencySet, error) {
	cls := objc.GetClass("MTLResidencySetDescriptor")
	if cls == 0 || !isYes(msg1(d.id, selRespondsToSelector, uintptr(selNewResidencySet))) {
		return nil, ErrNoResidencySets
	}
	var set objc.ID
	var err error
	withPool(func() {
		desc := newObject(cls)
		defer release(desc)
		msg1(desc, selSetInitialCapacity, uintptr(max(capacity, 0)))
		nserr := new(objc.ID)
		set = objc.ID(send(d.id, selNewResidencySet, uintptr(desc), uintptr(unsafe.Pointer(nserr))))
		if set == 0 {
			if err = nsError("newResidencySetWithDescriptor", *nserr); err == nil {
				err = ErrNoResidencySets
			}
		}
	})
	if err != nil {
		return nil, err
	}
	return &ResidencySet{set}, nil
}

// Add adds b, uncommitted (addAllocation:; an MTLBuffer is an MTLAllocation).
func (s *ResidencySet) Add(b *Buffer) { msg1(s.id, selAddAllocation, uintptr(b.id)) }

// Remove marks b to leave the set at the next Commit (removeAllocation:).
func (s *ResidencySet) Remove(b *Buffer) { msg1(s.id, selRemoveAllocation, uintptr(b.id)) }

// Commit applies the pending adds and removes; allocations added to a resident set become
// resident now.
func (s *ResidencySet) Commit() { msg0(s.id, selCommit) }

// RequestResidency asks for the set's committed allocations to be made resident now, rather than
// when a command buffer first needs them.
func (s *ResidencySet) RequestResidency() { msg0(s.id, selRequestResidency) }

// EndResidency lets the system make the set's allocations non-resident.
func (s *ResidencySet) EndResidency() { msg0(s.id, selEndResidency) }

// AllocatedSize is the set's footprint, in bytes, at the last Commit.
func (s *ResidencySet) AllocatedSize() uint64 { return uint64(msg0(s.id, selAllocatedSize)) }

// Release drops the set; remove it from every queue first.
func (s *ResidencySet) Release() {
	release(s.id)
	s.id = 0
}

// AddResidencySet keeps s resident while any command buffer of the queue runs (addResidencySet:).
// Only call it with a set NewResidencySet returned (the selector exists from macOS 15).
func (q *CommandQueue) AddResidencySet(s *ResidencySet) {
	msg1(q.id, selAddResidencySet, uintptr(s.id))
}

// RemoveResidencySet undoes AddResidencySet (removeResidencySet:).
func (q *CommandQueue) RemoveResidencySet(s *ResidencySet) {
	msg1(q.id, selRemoveResidencySet, uintptr(s.id))
}
