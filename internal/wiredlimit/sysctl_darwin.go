package wiredlimit

import "golang.org/x/sys/unix"

// Memory is this Mac's memory in bytes (hw.memsize; 0: unknown).
func Memory() uint64 {
	n, err := unix.SysctlUint64("hw.memsize")
	if err != nil {
		return 0
	}
	return n
}

// CurrentMB is iogpu.wired_limit_mb (0: macOS's default limit, or unknown).
func CurrentMB() uint64 {
	n, err := unix.SysctlUint32("iogpu.wired_limit_mb")
	if err != nil {
		return 0
	}
	return uint64(n)
}
