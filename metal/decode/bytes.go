package decode

import (
	"fmt"
	"unsafe"
)

// BytesOf is the little-endian bytes of a slice of 2- or 4-byte values (every host Lily runs on,
// x86-64 and arm64, is little-endian, as Metal's unified memory views are).
func BytesOf[T uint16 | uint32 | float32](v []T) []byte {
	if len(v) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&v[0])), len(v)*int(unsafe.Sizeof(v[0])))
}

// put copies v into dst, which must be exactly its size. A nil dst is a buffer served from the
// checkpoint itself (Step.Views): nothing to copy.
func put[T uint16 | uint32 | float32](dst []byte, v []T, name string) error {
	if dst == nil {
		return nil
	}
	src := BytesOf(v)
	if len(src) != len(dst) {
		return fmt.Errorf("decode: %s: %d bytes for a buffer of %d", name, len(src), len(dst))
	}
	copy(dst, src)
	return nil
}

// FloatsOf reads little-endian float32 values.
func FloatsOf(b []byte) []float32 {
	out := make([]float32, len(b)/4)
	copy(BytesOf(out), b)
	return out
}

// U32sOf reads little-endian uint32 values.
func U32sOf(b []byte) []uint32 {
	out := make([]uint32, len(b)/4)
	copy(BytesOf(out), b)
	return out
}
