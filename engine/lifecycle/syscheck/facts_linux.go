package syscheck

import "golang.org/x/sys/unix"

// probeSystem reports what applies on Linux: memory. The macOS checks are skipped.
func probeSystem() facts {
	f := facts{OS: "linux", MemSource: "sysinfo"}
	var si unix.Sysinfo_t
	if unix.Sysinfo(&si) == nil {
		f.MemBytes = uint64(si.Totalram) * uint64(si.Unit)
	}
	return f
}
