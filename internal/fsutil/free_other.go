//go:build !darwin && !linux

package fsutil

func freeSpace(string) (uint64, error) { return 0, ErrUnsupported }
