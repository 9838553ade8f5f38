package quant

import "golang.org/x/sys/cpu"

// kernels lists the kernels this CPU runs, the default first. The default computes float32
// products (the reference backend must not add approximations); VNNI, faster on busy cores and in
// prefill but with x rounded to fixed point, is opt-in (LILY_Q4_KERNEL=vnni).
func kernels() []kernel {
	ks := []kernel{kernGo}
	if cpu.X86.HasAVX2 && cpu.X86.HasFMA {
		ks = []kernel{kernAVX2, kernGo}
		if cpu.X86.HasAVX512F && cpu.X86.HasAVX512VL && cpu.X86.HasAVX512BW && cpu.X86.HasAVX512VNNI {
			ks = []kernel{kernAVX2, kernVNNI, kernGo}
		}
	}
	return ks
}

// q4MulAVX2 sets dst[i] = row i · x for rows consecutive 4-bit rows of
// groups groups each, x in Input.xp layout. The bias term is included for
// whole blocks of 8 groups only; the caller adds the rest.
//
//go:noescape
func q4MulAVX2(dst *float32, w *uint32, s, b *uint16, x, gsum *float32, rows, groups int)

// q4MulVNNI is q4MulAVX2 for x in Input.xq layout (AVX-512 VNNI).
//
//go:noescape
func q4MulVNNI(dst *float32, w *uint32, s, b *uint16, x *byte, gsum *float32, rows, groups int)

// q8MulAVX2 is q4MulAVX2 for 8-bit rows, x in natural order.
//
//go:noescape
func q8MulAVX2(dst *float32, w *uint32, s, b *uint16, x, gsum *float32, rows, groups int)
