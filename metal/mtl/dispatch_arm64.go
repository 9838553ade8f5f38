//go:build darwin && arm64

package mtl

import (
	"unsafe"

	"github.com/ebitengine/purego/objc"
)

func registerArch() {}

// dispatch sends a message taking two MTLSize values. An MTLSize is a 24-byte composite, and
// AAPCS64 (which Apple's arm64 ABI follows here) passes composites over 16 bytes as a pointer
// to a copy the caller made; the callee may write to that copy, so it is refreshed every call.
func (e *ComputeEncoder) dispatch(sel objc.SEL, a, b Size) {
	e.sizes[0] = abiSize{width: a.Width, height: a.Height, depth: a.Depth}
	e.sizes[1] = abiSize{width: b.Width, height: b.Height, depth: b.Depth}
	e.args[0], e.args[1] = uintptr(e.id), uintptr(sel)
	e.args[2], e.args[3] = uintptr(unsafe.Pointer(&e.sizes[0])), uintptr(unsafe.Pointer(&e.sizes[1]))
	e.call(4)
}
