// Package kernels holds Lily's Metal compute kernels (the .metal sources, embedded), their
// dispatch geometry and a Go reference for each, shared by the Metal executor and the tests
// that run the kernels on Linux through the MSL emulator (metal/emu). Each kernel's constructor
// (a Call: constants, buffers by role, grid) is the one place its dispatch is written; the decode
// plan, the selftest and the tests all use it.
package kernels

import (
	"embed"
	"fmt"
)

//go:embed *.metal
var files embed.FS

// Source returns the text of a kernel file, e.g. Source("qmv.metal").
func Source(name string) string {
	b, err := files.ReadFile(name)
	if err != nil {
		panic(fmt.Sprintf("kernels: no file %s", name))
	}
	return string(b)
}

// Path is the repository path of a kernel file, as diagnostics should name it.
func Path(name string) string { return "metal/kernels/" + name }

// Files lists every kernel file the product ships (the embedded .metal files), sorted.
func Files() []string {
	entries, err := files.ReadDir(".")
	if err != nil {
		panic(fmt.Sprintf("kernels: %v", err))
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}
