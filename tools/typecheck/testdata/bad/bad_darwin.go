//go:build darwin && cgo

// Package bad is cgo code for darwin with one type error.
package bad

// #include <stdlib.h>
import "C"

// One uses C, unchecked.
func One() int { return int(C.int(1)) }

// Size is wrong on purpose: a string where an int belongs.
func Size() int { return "one" }
