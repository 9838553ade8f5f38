//go:build linux

package emu

import (
	"fmt"
	"unsafe"
)

// Buffer is device memory for the emulator: Go-owned, 256-byte aligned, with canary bytes on
// both sides that Dispatch checks afterwards, so a kernel writing just outside a buffer fails
// even without AddressSanitizer.
type Buffer struct {
	raw []byte
	off int // of the first byte
	n   int
}

const (
	bufAlign  = 256
	canaryLen = 256
)

// NewBuffer returns a zeroed buffer of n bytes.
func NewBuffer(n int) *Buffer {
	if n < 0 {
		panic(fmt.Sprintf("emu: NewBuffer(%d)", n))
	}
	raw := make([]byte, n+2*canaryLen+bufAlign)
	mis := int(uintptr(unsafe.Pointer(&raw[0])) % bufAlign)
	off := canaryLen + (bufAlign-mis)%bufAlign
	b := &Buffer{raw: raw, off: off, n: n}
	b.setCanaries()
	return b
}

// BufferOf returns a new buffer holding a copy of s.
func BufferOf[T any](s []T) *Buffer {
	var zero T
	b := NewBuffer(len(s) * int(unsafe.Sizeof(zero)))
	if len(s) > 0 {
		copy(b.Bytes(), unsafe.Slice((*byte)(unsafe.Pointer(&s[0])), b.n))
	}
	return b
}

// Len is the buffer's length in bytes.
func (b *Buffer) Len() int { return b.n }

// Bytes returns the buffer's memory.
func (b *Buffer) Bytes() []byte { return b.raw[b.off : b.off+b.n : b.off+b.n] }

// Float32s views the buffer as float32s.
func (b *Buffer) Float32s() []float32 { return view[float32](b) }

// Uint32s views the buffer as uint32s.
func (b *Buffer) Uint32s() []uint32 { return view[uint32](b) }

// Uint16s views the buffer as uint16s (bf16 and half bits).
func (b *Buffer) Uint16s() []uint16 { return view[uint16](b) }

func view[T any](b *Buffer) []T {
	var zero T
	n := b.n / int(unsafe.Sizeof(zero))
	if n == 0 {
		return nil
	}
	return unsafe.Slice((*T)(unsafe.Pointer(&b.raw[b.off])), n)
}

// Fill sets every byte to v (0xFF makes float32 NaNs: a kernel that leaves an output unwritten
// is then visible).
func (b *Buffer) Fill(v byte) {
	s := b.Bytes()
	for i := range s {
		s[i] = v
	}
}

func (b *Buffer) ptr(off int) unsafe.Pointer { return unsafe.Pointer(&b.raw[b.off+off]) }

func canaryByte(i int) byte { return byte(i*151 + 0x5b) }

func (b *Buffer) setCanaries() {
	for i := 0; i < b.off; i++ {
		b.raw[i] = canaryByte(i)
	}
	for i := b.off + b.n; i < len(b.raw); i++ {
		b.raw[i] = canaryByte(i)
	}
}

// checkCanaries reports a write just before or after the buffer, and re-arms the canaries.
func (b *Buffer) checkCanaries() error {
	var err error
	for i := 0; i < b.off; i++ {
		if b.raw[i] != canaryByte(i) {
			err = fmt.Errorf("a kernel wrote %d bytes before the start of a %d-byte buffer", b.off-i, b.n)
			break
		}
	}
	if err == nil {
		for i := len(b.raw) - 1; i >= b.off+b.n; i-- {
			if b.raw[i] != canaryByte(i) {
				err = fmt.Errorf("a kernel wrote past the end of a %d-byte buffer (up to byte %d after it)", b.n, i-(b.off+b.n)+1)
				break
			}
		}
	}
	if err != nil {
		b.setCanaries()
	}
	return err
}
