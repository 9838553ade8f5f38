package syscheck

// System is what the OS reports about this machine, the facts the checks judge; a zero field is
// unknown or does not apply (the macOS fields off macOS).
type System struct {
	OS           string // runtime.GOOS
	OSVersion    string // kern.osproductversion (macOS)
	Chip         string // machdep.cpu.brand_string (macOS)
	MemBytes     uint64 // hw.memsize, or sysinfo's total RAM on Linux
	MemSource    string // where MemBytes came from
	WiredLimitMB uint64 // iogpu.wired_limit_mb (macOS; 0: macOS's default limit)
}

// Probe reads the system's facts, as Run does.
func Probe() System { return probe() }
