//go:build darwin

package main

import (
	"github.com/lilyformac/lily/engine/lifecycle/syscheck"
	"github.com/lilyformac/lily/metal/mtl"
)

// The Metal probe is wired here rather than in mtl so the binding does not depend on the
// lifecycle packages.
func init() {
	syscheck.ProbeGPU = func() syscheck.GPUInfo {
		name, family, workingSet, ok, reason := mtl.Probe()
		return syscheck.GPUInfo{Name: name, Family: family, RecommendedMaxWorkingSet: workingSet, Available: ok, Reason: reason}
	}
}
