//go:build !unix

package hostmem

// Alloc falls back to the Go heap where there is no mmap.
func Alloc(n int64) ([]byte, error) { return make([]byte, n), nil }

// Free does nothing: the collector takes the memory back.
func Free([]byte) {}
