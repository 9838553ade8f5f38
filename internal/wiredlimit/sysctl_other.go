//go:build !darwin

package wiredlimit

// Memory is 0 off macOS: the GPU limit and the defaults that depend on a Mac's memory do not
// apply.
func Memory() uint64 { return 0 }

// CurrentMB is 0 off macOS.
func CurrentMB() uint64 { return 0 }
