package main

import (
	"debug/macho"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// Load commands read from the raw bytes (debug/macho does not name them).
const (
	lcCodeSignature    = 0x1d
	lcVersionMinMacOSX = 0x24 // older linkers' way to record the minimum macOS
	lcBuildVersion     = 0x32
	platformMacOS      = 1
)

// CheckMachO verifies that path is an executable darwin/arm64 Mach-O, built for macOS, with a
// code signature (the Go linker signs arm64 binaries ad hoc; arm64 macOS runs nothing unsigned).
// It returns the oldest macOS the binary runs on (LC_BUILD_VERSION's minos, or
// LC_VERSION_MIN_MACOSX's version), encoded as Mach-O encodes it: X<<16 | Y<<8 | Z.
func CheckMachO(path string) (desc string, minOS uint32, err error) {
	fi, err := os.Stat(path)
	if err != nil {
		return "", 0, err
	}
	if fi.Mode().Perm()&0o111 == 0 {
		return "", 0, errors.New("not executable")
	}
	f, err := macho.Open(path)
	if err != nil {
		return "", 0, fmt.Errorf("not a Mach-O file: %w", err)
	}
	defer f.Close()
	if f.Cpu != macho.CpuArm64 {
		return "", 0, fmt.Errorf("CPU %v, want arm64", f.Cpu)
	}
	if f.Type != macho.TypeExec {
		return "", 0, fmt.Errorf("file type %v, want an executable", f.Type)
	}
	signed, platform, minos, which := false, uint32(0), uint32(0), ""
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
				platform, minos, which = f.ByteOrder.Uint32(raw[8:12]), f.ByteOrder.Uint32(raw[12:16]), "LC_BUILD_VERSION"
			}
		case lcVersionMinMacOSX:
			if len(raw) >= 12 && which == "" { // LC_BUILD_VERSION, where both are present, wins
				platform, minos, which = platformMacOS, f.ByteOrder.Uint32(raw[8:12]), "LC_VERSION_MIN_MACOSX"
			}
		}
	}
	switch {
	case which == "":
		return "", 0, errors.New("no LC_BUILD_VERSION or LC_VERSION_MIN_MACOSX: the macOS it needs is unknown")
	case platform != platformMacOS:
		return "", 0, fmt.Errorf("LC_BUILD_VERSION platform %d, want 1 (macOS)", platform)
	case !signed:
		return "", 0, errors.New("no LC_CODE_SIGNATURE: arm64 macOS would kill it")
	}
	return fmt.Sprintf("Mach-O arm64 executable, macOS ≥ %s (%s), signed, %.1f MB", formatVersion(minos), which, float64(fi.Size())/1e6), minos, nil
}

// formatVersion writes a Mach-O version (X<<16 | Y<<8 | Z) as X.Y, or X.Y.Z when Z is not 0.
func formatVersion(v uint32) string {
	s := fmt.Sprintf("%d.%d", v>>16, v>>8&0xff)
	if v&0xff != 0 {
		s += fmt.Sprintf(".%d", v&0xff)
	}
	return s
}

// parseVersion reads a dotted macOS version ("15", "15.0", "15.0.1") as Mach-O encodes it.
func parseVersion(s string) (uint32, bool) {
	if !dottedNumbers(s, 3) {
		return 0, false
	}
	var v uint32
	parts := strings.Split(s, ".")
	for i, p := range parts {
		shift, bits := uint(16-8*i), 8 // X takes 16 bits of the encoding, Y and Z 8 each
		if i == 0 {
			bits = 16
		}
		n, err := strconv.ParseUint(p, 10, bits)
		if err != nil {
			return 0, false
		}
		v |= uint32(n) << shift
	}
	return v, true
}
