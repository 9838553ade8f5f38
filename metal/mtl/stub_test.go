//go:build !darwin

package mtl

import (
	"errors"
	"testing"
)

func TestStubUnavailable(t *testing.T) {
	if ErrUnavailable.Error() != "mtl: Metal is only available on macOS" {
		t.Fatalf("ErrUnavailable = %q", ErrUnavailable)
	}
	d, err := DefaultDevice()
	if d != nil || !errors.Is(err, ErrUnavailable) {
		t.Fatalf("DefaultDevice() = %v, %v; want nil, ErrUnavailable", d, err)
	}
	// Methods exist for code that compiles everywhere; they fail the same way.
	var dev Device
	checks := map[string]error{}
	_, checks["NewBuffer"] = dev.NewBuffer(16, StorageModeShared)
	_, checks["NewBufferNoCopy"] = dev.NewBufferNoCopy(make([]byte, 16), StorageModeShared)
	_, checks["NewLibrary"] = dev.NewLibrary("", CompileOptions{})
	_, checks["NewPipeline"] = dev.NewPipeline(nil)
	_, _, checks["NewPipelineCached"] = dev.NewPipelineCached(nil, "")
	_, checks["NewCommandQueue"] = dev.NewCommandQueue()
	_, checks["NewFunction"] = (&Library{}).NewFunction("f", nil)
	_, checks["CommandBuffer"] = (&CommandQueue{}).CommandBuffer()
	_, checks["ComputeEncoder"] = (&CommandBuffer{}).ComputeEncoder(true)
	for name, err := range checks {
		if !errors.Is(err, ErrUnavailable) {
			t.Errorf("%s: err = %v, want ErrUnavailable", name, err)
		}
	}

	name, family, ws, ok, reason := Probe()
	if ok || name != "" || family != "" || ws != 0 || reason != "Metal is only available on macOS" {
		t.Fatalf("Probe() = %q, %q, %d, %v, %q", name, family, ws, ok, reason)
	}
	ran := false
	WithPool(func() { ran = true })
	if !ran {
		t.Fatal("WithPool did not run f")
	}
}
