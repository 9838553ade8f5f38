//go:build darwin

package mtl

import (
	"errors"
	"strings"
	"testing"
)

// TestResidencySet: on macOS 15+ a buffer added to a residency set on the queue is counted in the
// set's footprint after Commit, and the set comes off the queue and is released cleanly; before
// 15 NewResidencySet says so with ErrNoResidencySets.
func TestResidencySet(t *testing.T) {
	d := device(t)
	set, err := d.NewResidencySet(4)
	if errors.Is(err, ErrNoResidencySets) {
		t.Skipf("no residency sets here: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	q, err := d.NewCommandQueue()
	if err != nil {
		t.Fatal(err)
	}
	defer q.Release()
	b, err := d.NewBuffer(1<<20, StorageModeShared)
	if err != nil {
		t.Fatal(err)
	}
	q.AddResidencySet(set)
	set.Add(b)
	set.Commit()
	set.RequestResidency()
	if n := set.AllocatedSize(); n < 1<<20 {
		t.Errorf("allocatedSize %d after committing a 1 MiB buffer", n)
	}
	cb, err := q.CommandBuffer()
	if err != nil {
		t.Fatal(err)
	}
	cb.Commit()
	cb.WaitUntilCompleted()
	if err := cb.Err(); err != nil {
		t.Fatal(err)
	}
	cb.Release()
	set.Remove(b)
	set.Commit()
	q.RemoveResidencySet(set)
	set.EndResidency()
	set.Release()
	b.Release()
}

// TestInvalidUTF8IsAnError: a kernel source, a function name or a cache path that is not valid
// UTF-8 fails with an error instead of a nil NSString raising an Objective-C exception.
func TestInvalidUTF8IsAnError(t *testing.T) {
	d := device(t)
	if _, err := d.NewLibrary("kernel void k() {} // caf\xe9", CompileOptions{}); err == nil || !strings.Contains(err.Error(), "not valid UTF-8") {
		t.Fatalf("NewLibrary of Latin-1 source: %v", err)
	}
	if _, err := d.NewLibrary(addSource, CompileOptions{Macros: map[string]string{"X\xff": "1"}}); err == nil || !strings.Contains(err.Error(), "not valid UTF-8") {
		t.Fatalf("NewLibrary with a Latin-1 macro: %v", err)
	}
	lib, err := d.NewLibrary(addSource, CompileOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer lib.Release()
	if _, err := lib.NewFunction("twice\xff", nil); err == nil || !strings.Contains(err.Error(), "not valid UTF-8") {
		t.Fatalf("NewFunction with a Latin-1 name: %v", err)
	}
	if _, err := fileURL("/tmp/caf\xe9"); err == nil {
		t.Fatal("fileURL of a Latin-1 path succeeded")
	}
}
