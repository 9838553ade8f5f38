package main

import (
	"debug/macho"
	"errors"
	"fmt"
	"os"
)

// Load commands read from the raw bytes (debug/macho does not name them).
const (
	lcCodeSignature = 0x1d
	lcBuildVersion  = 0x32
	platformMacOS   = 1
)

// CheckMachO verifies that path is an executable darwin/arm64 Mach-O, built for macOS, with a
// code signature (the Go linker signs arm64 binaries ad hoc; arm64 macOS runs nothing unsigned).
func CheckMachO(path string) (string, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return "", err
	}
	if fi.Mode().Perm()&0o111 == 0 {
		return "", errors.New("not executable")
	}
	f, err := macho.Open(path)
	if err != nil {
		return "", fmt.Errorf("not a Mach-O file: %w", err)
	}
	defer f.Close()
	if f.Cpu != macho.CpuArm64 {
		return "", fmt.Errorf("CPU %v, want arm64", f.Cpu)
	}
	if f.Type != macho.TypeExec {
		return "", fmt.Errorf("file type %v, want an executable", f.Type)
	}
	signed, platform, minos := false, uint32(0), uint32(0)
	for _, l := range f.Loads {
		raw := l.Raw()
		if len(raw) < 8 {
			continue
		}
		switch f.ByteOrder.Uint32(raw[0:4]) {
		case lcCodeSignature:
			signed = true
		case lcBuildVersion:
			if len(raw) >= 16 {
				platform, minos = f.ByteOrder.Uint32(raw[8:12]), f.ByteOrder.Uint32(raw[12:16])
			}
		}
	}
	if platform != platformMacOS {
		return "", fmt.Errorf("LC_BUILD_VERSION platform %d, want 1 (macOS)", platform)
	}
	if !signed {
		return "", errors.New("no LC_CODE_SIGNATURE: arm64 macOS would kill it")
	}
	return fmt.Sprintf("Mach-O arm64 executable, macOS ≥ %d.%d, signed, %.1f MB", minos>>16, minos>>8&0xff, float64(fi.Size())/1e6), nil
}
