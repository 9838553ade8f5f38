//go:build !amd64

package quant

var useAsm = false // no SIMD kernels on this architecture

func q4MulAsm(dst *float32, w *uint32, s, b *uint16, xp, gsum *float32, rows, groups int) {
	panic("unreachable")
}

func q8MulAsm(dst *float32, w *uint32, s, b *uint16, x, gsum *float32, rows, groups int) {
	panic("unreachable")
}
