package quant

import "golang.org/x/sys/cpu"

// useAsm selects the AVX2+FMA kernels; tests clear it to cover the pure-Go path.
var useAsm = cpu.X86.HasAVX2 && cpu.X86.HasFMA

// q4MulAsm sets dst[i] = row i · x for rows consecutive 4-bit rows of groups
// groups each, reading x in Input.xp layout. The bias term is included for
// whole blocks of 8 groups only; the caller adds the rest.
//
//go:noescape
func q4MulAsm(dst *float32, w *uint32, s, b *uint16, xp, gsum *float32, rows, groups int)

// q8MulAsm is q4MulAsm for 8-bit rows, reading x in natural order.
//
//go:noescape
func q8MulAsm(dst *float32, w *uint32, s, b *uint16, x, gsum *float32, rows, groups int)
