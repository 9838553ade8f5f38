//go:build !unix

package server

// nofileLimit: no descriptor limit to read (sockets are not bounded by ulimit -n here); connCap
// uses its maximum.
func nofileLimit() uint64 { return 0 }
