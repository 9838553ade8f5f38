//go:build darwin && cgo

// Package good is cgo code for darwin that type-checks.
package good

// #include <stdlib.h>
import "C"

// Half halves n through a C type.
func Half(n int) int { return int(C.int(n)) / 2 }
