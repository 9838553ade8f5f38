package supervisor

import (
	"golang.org/x/sys/unix"
)

// processName is the kernel's short name of a process (p_comm, at most 16 bytes on macOS).
func processName(pid int) (string, error) {
	kp, err := unix.SysctlKinfoProc("kern.proc.pid", pid)
	if err != nil {
		return "", err
	}
	b := kp.Proc.P_comm[:]
	n := 0
	for n < len(b) && b[n] != 0 {
		n++
	}
	return string(b[:n]), nil
}
