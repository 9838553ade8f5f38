//go:build !amd64

package quant

func kernels() []kernel { return []kernel{kernGo} }

func q4MulAVX2(dst *float32, w *uint32, s, b *uint16, x, gsum *float32, rows, groups int) {
	panic("unreachable")
}

func q4MulVNNI(dst *float32, w *uint32, s, b *uint16, x *byte, gsum *float32, rows, groups int) {
	panic("unreachable")
}

func q8MulAVX2(dst *float32, w *uint32, s, b *uint16, x, gsum *float32, rows, groups int) {
	panic("unreachable")
}
