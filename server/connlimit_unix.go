//go:build unix

package server

import "syscall"

// nofileLimit is the process's soft limit on open descriptors, which connCap stays under (0:
// unknown). Go has already raised it to the hard limit at start, so it is the real ceiling.
func nofileLimit() uint64 {
	var lim syscall.Rlimit
	if syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim) != nil {
		return 0
	}
	return uint64(lim.Cur)
}
