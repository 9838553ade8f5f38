package syscheck

import "golang.org/x/sys/unix"

// probeSystem reads sysctls through libSystem (x/sys/unix needs no cgo on darwin).
func probeSystem() facts {
	f := facts{OS: "darwin", MemSource: "hw.memsize"}
	f.OSVersion, _ = unix.Sysctl("kern.osproductversion")
	f.MemBytes, _ = unix.SysctlUint64("hw.memsize")
	f.Chip, _ = unix.Sysctl("machdep.cpu.brand_string")
	if mb, err := unix.SysctlUint32("iogpu.wired_limit_mb"); err == nil {
		f.WiredLimitMB = uint64(mb)
	}
	return f
}
