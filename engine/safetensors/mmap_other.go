//go:build !unix

package safetensors

import "os"

// mapFile reads the whole file: platforms without mmap get a heap copy.
func mapFile(path string) ([]byte, error) { return os.ReadFile(path) }

func unmap([]byte) error { return nil }

// syncDir is a no-op where directories cannot be opened for fsync.
func syncDir(string) error { return nil }
