//go:build !linux && !darwin

package supervisor

import "errors"

// processName is not available here: orphaned engines are then left alone.
func processName(pid int) (string, error) {
	return "", errors.New("process names are not supported on this system")
}
