#include "textflag.h"

// All kernels: func(dst *float32, w *uint32, s, b *uint16, x, gsum, rows, groups)
// set dst[i] = row i · x for rows consecutive rows, the bias term included
// for whole blocks of 8 groups.
//
// Registers: DI dst, SI packed words, R8 scales, R9 biases, R10 x layout,
// R11 gsum, DX groups per row, R12/R14 1x/3x row stride of the words in
// bytes, R13/R15 1x/3x row stride of scales and biases, BX x cursor (then
// gsum cursor), AX loop count, CX prefetch cursor; the rows left are kept in
// the argument slot.
//
// Rows go 2 or 4 at a time so x is read once per block. Each group's Σq·x
// starts from zero, so groups are independent chains and only the scale
// FMA depends on the previous group. Software prefetch walks the next block
// of rows linearly, one line per line consumed: the interleaved row streams
// defeat the hardware prefetcher (without it streaming runs at half speed
// or less).

DATA consts<>+0(SB)/4, $0x0000000f // in-place nibble masks, positions 0..6
DATA consts<>+4(SB)/4, $0x000000f0
DATA consts<>+8(SB)/4, $0x00000f00
DATA consts<>+12(SB)/4, $0x0000f000
DATA consts<>+16(SB)/4, $0x000f0000
DATA consts<>+20(SB)/4, $0x00f00000
DATA consts<>+24(SB)/4, $0x0f000000
DATA consts<>+28(SB)/4, $0x0f0f0f0f // low nibble of every byte
GLOBL consts<>(SB), RODATA|NOPTR, $32

#define PROLOGUE(wshift) \
	MOVQ dst+0(FP), DI; \
	MOVQ w+8(FP), SI; \
	MOVQ s+16(FP), R8; \
	MOVQ b+24(FP), R9; \
	MOVQ x+32(FP), R10; \
	MOVQ gsum+40(FP), R11; \
	MOVQ groups+56(FP), DX; \
	MOVQ DX, R12; \
	SHLQ $wshift, R12; \
	LEAQ (R12)(R12*2), R14; \
	LEAQ (DX)(DX*1), R13; \
	LEAQ (R13)(R13*2), R15

// total += scale (bf16 at src) · acc; bf16 -> f32 is a 16-bit left shift.
#define FOLD(src, acc, total, tmp) \
	VPBROADCASTW src, tmp; \
	VPSLLD $16, tmp, tmp; \
	VFMADD231PS tmp, acc, total

// total += 8 biases (bf16 at src) · 8 group sums at (BX).
#define BIAS8(src, total, tmp) \
	VPMOVZXWD src, tmp; \
	VPSLLD $16, tmp, tmp; \
	VFMADD231PS (BX), tmp, total

// Bias term of 1, 2 or 4 rows; R9 is advanced, then rewound.
#define BIASBEGIN(done) \
	MOVQ DX, AX; \
	SHRQ $3, AX; \
	JZ   done; \
	MOVQ R11, BX

#define BIASEND(label) \
	ADDQ $16, R9; \
	ADDQ $32, BX; \
	DECQ AX; \
	JNZ  label; \
	MOVQ DX, AX; \
	SHRQ $3, AX; \
	SHLQ $4, AX; \
	SUBQ AX, R9

#define BIAS4(label, done, tmp) \
	BIASBEGIN(done); \
label: \
	BIAS8((R9), Y0, tmp); \
	BIAS8((R9)(R13*1), Y1, tmp); \
	BIAS8((R9)(R13*2), Y2, tmp); \
	BIAS8((R9)(R15*1), Y3, tmp); \
	BIASEND(label); \
done:

#define BIAS2(label, done, tmp) \
	BIASBEGIN(done); \
label: \
	BIAS8((R9), Y0, tmp); \
	BIAS8((R9)(R13*1), Y1, tmp); \
	BIASEND(label); \
done:

#define BIAS1(label, done, tmp) \
	BIASBEGIN(done); \
label: \
	BIAS8((R9), Y0, tmp); \
	BIASEND(label); \
done:

// Horizontal sums of Y0 (Y0-Y1, Y0-Y3) -> dst.
#define STORE4 \
	VHADDPS Y1, Y0, Y0; \
	VHADDPS Y3, Y2, Y2; \
	VHADDPS Y2, Y0, Y0; \
	VEXTRACTF128 $1, Y0, X1; \
	VADDPS X1, X0, X0; \
	VMOVUPS X0, (DI)

#define STORE2 \
	VHADDPS Y1, Y0, Y0; \
	VEXTRACTF128 $1, Y0, X1; \
	VADDPS X1, X0, X0; \
	VHADDPS X0, X0, X0; \
	VMOVSD X0, (DI)

#define STORE1 \
	VEXTRACTF128 $1, Y0, X1; \
	VADDPS X1, X0, X0; \
	VHADDPS X0, X0, X0; \
	VHADDPS X0, X0, X0; \
	VMOVSS X0, (DI)

// ---- 4-bit, AVX2+FMA: float products. Nibble p of each word is masked
// in place (q·16^p, exact in float) against x/16^p (Input.xp), so one AND
// and one conversion per 8 nibbles; p = 7 is shifted down instead, since
// it would be negative as int32. Y4-Y10 hold the masks, Y11/Y12 the words
// of a group of 2 rows, Y0/Y1 the row totals, Y2/Y3 the group sums.

#define A2POS(mask, xoff) \
	VPAND Y11, mask, Y13; \
	VPAND Y12, mask, Y14; \
	VCVTDQ2PS Y13, Y13; \
	VCVTDQ2PS Y14, Y14; \
	VFMADD231PS xoff(BX), Y13, Y2; \
	VFMADD231PS xoff(BX), Y14, Y3

#define A1POS(mask, xoff) \
	VPAND Y11, mask, Y13; \
	VCVTDQ2PS Y13, Y13; \
	VFMADD231PS xoff(BX), Y13, Y2

// func q4MulAVX2(dst *float32, w *uint32, s, b *uint16, x, gsum *float32, rows, groups int)
TEXT ·q4MulAVX2(SB), NOSPLIT, $0-64
	PROLOGUE(5) // 32 bytes of words per group
	VPBROADCASTD consts<>+0(SB), Y4
	VPBROADCASTD consts<>+4(SB), Y5
	VPBROADCASTD consts<>+8(SB), Y6
	VPBROADCASTD consts<>+12(SB), Y7
	VPBROADCASTD consts<>+16(SB), Y8
	VPBROADCASTD consts<>+20(SB), Y9
	VPBROADCASTD consts<>+24(SB), Y10

a2rows:
	CMPQ rows+48(FP), $2
	JLT  a1rows
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	MOVQ   R10, BX
	MOVQ   DX, AX
	LEAQ   (SI)(R12*2), CX

a2group:
	PREFETCHT0 (CX)
	ADDQ    $64, CX
	VMOVDQU (SI), Y11
	VMOVDQU (SI)(R12*1), Y12
	VXORPS  Y2, Y2, Y2
	VXORPS  Y3, Y3, Y3
	A2POS(Y4, 0)
	A2POS(Y5, 32)
	A2POS(Y6, 64)
	A2POS(Y7, 96)
	A2POS(Y8, 128)
	A2POS(Y9, 160)
	A2POS(Y10, 192)
	VPSRLD $28, Y11, Y13
	VPSRLD $28, Y12, Y14
	VCVTDQ2PS Y13, Y13
	VCVTDQ2PS Y14, Y14
	VFMADD231PS 224(BX), Y13, Y2
	VFMADD231PS 224(BX), Y14, Y3
	FOLD((R8), Y2, Y0, Y15)
	FOLD((R8)(R13*1), Y3, Y1, Y15)
	ADDQ $32, SI
	ADDQ $2, R8
	ADDQ $256, BX
	DECQ AX
	JNZ  a2group

	BIAS2(a2bias, a2biasdone, Y15)
	STORE2
	ADDQ $8, DI
	ADDQ R12, SI // SI and R8 moved one row in the group loop
	ADDQ R13, R8
	LEAQ (R9)(R13*2), R9
	SUBQ $2, rows+48(FP)
	JMP  a2rows

a1rows:
	CMPQ rows+48(FP), $0
	JEQ  a4done
	VXORPS Y0, Y0, Y0
	MOVQ   R10, BX
	MOVQ   DX, AX

a1group:
	VMOVDQU (SI), Y11
	VXORPS  Y2, Y2, Y2
	A1POS(Y4, 0)
	A1POS(Y5, 32)
	A1POS(Y6, 64)
	A1POS(Y7, 96)
	A1POS(Y8, 128)
	A1POS(Y9, 160)
	A1POS(Y10, 192)
	VPSRLD $28, Y11, Y13
	VCVTDQ2PS Y13, Y13
	VFMADD231PS 224(BX), Y13, Y2
	FOLD((R8), Y2, Y0, Y15)
	ADDQ $32, SI
	ADDQ $2, R8
	ADDQ $256, BX
	DECQ AX
	JNZ  a1group

	BIAS1(a1bias, a1biasdone, Y15)
	STORE1
	ADDQ $4, DI
	ADDQ R13, R9
	DECQ rows+48(FP)
	JMP  a1rows

a4done:
	VZEROUPPER
	RET

// ---- 4-bit, AVX-512 VNNI: integer products. x is three signed-byte limbs
// (Input.xq); VPDPBUSD multiplies 32 nibbles by a limb and sums 4 at a time
// into int32, exactly. Per group, limbs combine as (l0 + 256·l1)·2^E +
// l2·2^(E+16) in float. Y16-Y21 hold the limbs of a group (even/odd
// elements), Y22 the nibble mask, Y4-Y15 three sums for each of 4 rows,
// K1 selects the high word of each dword (a bf16 broadcast lands as f32).

#define VROW(src, A0, A1, A2) \
	VPANDD src, Y22, Y24; \
	VPSRLW $4, src, Y25; \
	VPANDD Y25, Y22, Y25; \
	VPDPBUSD Y16, Y24, A0; \
	VPDPBUSD Y17, Y25, A0; \
	VPDPBUSD Y18, Y24, A1; \
	VPDPBUSD Y19, Y25, A1; \
	VPDPBUSD Y20, Y24, A2; \
	VPDPBUSD Y21, Y25, A2

#define VFOLD(ssrc, A0, A1, A2, total) \
	VPSLLD $8, A1, Y26; \
	VPADDD A0, Y26, Y26; \
	VCVTDQ2PS Y26, Y26; \
	VCVTDQ2PS A2, Y27; \
	VMULPS.BCST 192(BX), Y26, Y26; \
	VFMADD231PS.BCST 196(BX), Y27, Y26; \
	VPBROADCASTW.Z ssrc, K1, Y28; \
	VFMADD231PS Y28, Y26, total

#define VLIMBS \
	VMOVDQU32 (BX), Y16; \
	VMOVDQU32 32(BX), Y17; \
	VMOVDQU32 64(BX), Y18; \
	VMOVDQU32 96(BX), Y19; \
	VMOVDQU32 128(BX), Y20; \
	VMOVDQU32 160(BX), Y21

// func q4MulVNNI(dst *float32, w *uint32, s, b *uint16, x *byte, gsum *float32, rows, groups int)
TEXT ·q4MulVNNI(SB), NOSPLIT, $0-64
	PROLOGUE(5)
	VPBROADCASTD consts<>+28(SB), Y22
	MOVL $0xaaaa, AX
	KMOVW AX, K1

v4rows:
	CMPQ rows+48(FP), $4
	JLT  v1rows
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	MOVQ   R10, BX
	MOVQ   DX, AX
	LEAQ   (SI)(R12*4), CX

v4group:
	PREFETCHT0 (CX)
	PREFETCHT0 64(CX)
	ADDQ $128, CX
	VLIMBS
	VPXOR Y4, Y4, Y4
	VPXOR Y5, Y5, Y5
	VPXOR Y6, Y6, Y6
	VPXOR Y7, Y7, Y7
	VPXOR Y8, Y8, Y8
	VPXOR Y9, Y9, Y9
	VPXOR Y10, Y10, Y10
	VPXOR Y11, Y11, Y11
	VPXOR Y12, Y12, Y12
	VPXOR Y13, Y13, Y13
	VPXOR Y14, Y14, Y14
	VPXOR Y15, Y15, Y15
	VROW((SI), Y4, Y5, Y6)
	VROW((SI)(R12*1), Y7, Y8, Y9)
	VROW((SI)(R12*2), Y10, Y11, Y12)
	VROW((SI)(R14*1), Y13, Y14, Y15)
	VFOLD((R8), Y4, Y5, Y6, Y0)
	VFOLD((R8)(R13*1), Y7, Y8, Y9, Y1)
	VFOLD((R8)(R13*2), Y10, Y11, Y12, Y2)
	VFOLD((R8)(R15*1), Y13, Y14, Y15, Y3)
	ADDQ $32, SI
	ADDQ $2, R8
	ADDQ $256, BX
	DECQ AX
	JNZ  v4group

	BIAS4(v4bias, v4biasdone, Y24)
	STORE4
	ADDQ $16, DI
	ADDQ R14, SI // SI and R8 moved one row in the group loop
	ADDQ R15, R8
	LEAQ (R9)(R13*4), R9
	SUBQ $4, rows+48(FP)
	JMP  v4rows

v1rows:
	CMPQ rows+48(FP), $0
	JEQ  vdone
	VXORPS Y0, Y0, Y0
	MOVQ   R10, BX
	MOVQ   DX, AX

v1group:
	VLIMBS
	VPXOR Y4, Y4, Y4
	VPXOR Y5, Y5, Y5
	VPXOR Y6, Y6, Y6
	VROW((SI), Y4, Y5, Y6)
	VFOLD((R8), Y4, Y5, Y6, Y0)
	ADDQ $32, SI
	ADDQ $2, R8
	ADDQ $256, BX
	DECQ AX
	JNZ  v1group

	BIAS1(v1bias, v1biasdone, Y24)
	STORE1
	ADDQ $4, DI
	ADDQ R13, R9
	DECQ rows+48(FP)
	JMP  v1rows

vdone:
	VZEROUPPER
	RET

// ---- 8-bit, AVX2+FMA: 8 bytes at a time widened to int32, converted and
// multiplied by x in natural order; 4 rows share each x load (Y10).

#define Q8CHUNK(src, acc) \
	VPMOVZXBD src, Y8; \
	VCVTDQ2PS Y8, Y8; \
	VFMADD231PS Y8, Y10, acc

#define Q8STEP4(woff, xoff) \
	VMOVUPS xoff(BX), Y10; \
	Q8CHUNK(woff(SI), Y4); \
	Q8CHUNK(woff(SI)(R12*1), Y5); \
	Q8CHUNK(woff(SI)(R12*2), Y6); \
	Q8CHUNK(woff(SI)(R14*1), Y7)

#define Q8STEP1(woff, xoff) \
	VMOVUPS xoff(BX), Y10; \
	Q8CHUNK(woff(SI), Y4)

// func q8MulAVX2(dst *float32, w *uint32, s, b *uint16, x, gsum *float32, rows, groups int)
TEXT ·q8MulAVX2(SB), NOSPLIT, $0-64
	PROLOGUE(6) // 64 bytes of words per group

q8rows4:
	CMPQ rows+48(FP), $4
	JLT  q8rows1
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	MOVQ   R10, BX
	MOVQ   DX, AX
	LEAQ   (SI)(R12*4), CX

q8group4:
	PREFETCHT0 (CX)
	PREFETCHT0 64(CX)
	PREFETCHT0 128(CX)
	PREFETCHT0 192(CX)
	ADDQ   $256, CX
	VXORPS Y4, Y4, Y4
	VXORPS Y5, Y5, Y5
	VXORPS Y6, Y6, Y6
	VXORPS Y7, Y7, Y7
	Q8STEP4(0, 0)
	Q8STEP4(8, 32)
	Q8STEP4(16, 64)
	Q8STEP4(24, 96)
	Q8STEP4(32, 128)
	Q8STEP4(40, 160)
	Q8STEP4(48, 192)
	Q8STEP4(56, 224)
	FOLD((R8), Y4, Y0, Y8)
	FOLD((R8)(R13*1), Y5, Y1, Y8)
	FOLD((R8)(R13*2), Y6, Y2, Y8)
	FOLD((R8)(R15*1), Y7, Y3, Y8)
	ADDQ $64, SI
	ADDQ $2, R8
	ADDQ $256, BX
	DECQ AX
	JNZ  q8group4

	BIAS4(q8bias4, q8bias4done, Y8)
	STORE4
	ADDQ $16, DI
	ADDQ R14, SI
	ADDQ R15, R8
	LEAQ (R9)(R13*4), R9
	SUBQ $4, rows+48(FP)
	JMP  q8rows4

q8rows1:
	CMPQ rows+48(FP), $0
	JEQ  q8done
	VXORPS Y0, Y0, Y0
	MOVQ   R10, BX
	MOVQ   DX, AX

q8group1:
	VXORPS Y4, Y4, Y4
	Q8STEP1(0, 0)
	Q8STEP1(8, 32)
	Q8STEP1(16, 64)
	Q8STEP1(24, 96)
	Q8STEP1(32, 128)
	Q8STEP1(40, 160)
	Q8STEP1(48, 192)
	Q8STEP1(56, 224)
	FOLD((R8), Y4, Y0, Y8)
	ADDQ $64, SI
	ADDQ $2, R8
	ADDQ $256, BX
	DECQ AX
	JNZ  q8group1

	BIAS1(q8bias1, q8bias1done, Y8)
	STORE1
	ADDQ $4, DI
	ADDQ R13, R9
	DECQ rows+48(FP)
	JMP  q8rows1

q8done:
	VZEROUPPER
	RET
