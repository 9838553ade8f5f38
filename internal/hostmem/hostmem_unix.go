//go:build unix

// Package hostmem allocates memory outside the Go heap for what the program frees explicitly:
// prefix-cache snapshots, which the cache frees when it lets them go. On the heap, the
// collector's headroom (GOGC) would let gigabytes of dropped snapshots linger, up to doubling
// what the cache's budget says.
package hostmem

import "golang.org/x/sys/unix"

// Alloc returns n zeroed bytes outside the Go heap; Free gives them back.
func Alloc(n int64) ([]byte, error) {
	if n == 0 {
		return []byte{}, nil
	}
	return unix.Mmap(-1, 0, int(n), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE)
}

// Free returns Alloc's memory; b must not be used afterwards.
func Free(b []byte) {
	if len(b) > 0 {
		unix.Munmap(b)
	}
}
