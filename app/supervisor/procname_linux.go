package supervisor

import (
	"os"
	"strconv"
	"strings"
)

// processName is the kernel's short name of a process (at most 15 bytes on Linux).
func processName(pid int) (string, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/comm")
	return strings.TrimSpace(string(b)), err
}
