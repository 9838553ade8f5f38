//go:build !darwin && !linux

package syscheck

import "runtime"

// probeSystem knows nothing here: memory and the macOS checks are skipped.
func probeSystem() facts { return facts{OS: runtime.GOOS} }
