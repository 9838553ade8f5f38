#include "textflag.h"

// Register use, both kernels:
//   DI dst, SI packed words, R8 scales, R9 biases, R10 x, R11 gsum,
//   CX rows left, DX groups per row, R12/R14 1x/3x word row stride,
//   R13/R15 1x/3x scale row stride, BX x (then gsum) cursor, AX loop count.
//   Y0-Y3 row totals, Y4-Y7 per-group sums Σq·x, Y8-Y11 scratch.
// Rows go 4 at a time so each x vector is loaded once for 4 rows; a group's
// Σq·x starts from zero, so groups form independent FMA chains and only one
// FMA per group (the scale) depends on the previous group.

DATA nibmask<>+0(SB)/4, $0x0f
DATA nibmask<>+4(SB)/4, $0xf0
GLOBL nibmask<>(SB), RODATA|NOPTR, $8

// acc += q·x for 16 elements (8 bytes at src): low nibbles against the even
// x in Y10, high nibbles kept in place (16q) against the odd x/16 in Y11.
#define Q4CHUNK(src, acc) \
	VPMOVZXBD src, Y8; \
	VPAND     Y8, Y15, Y9; \
	VPAND     Y8, Y14, Y8; \
	VCVTDQ2PS Y8, Y8; \
	VCVTDQ2PS Y9, Y9; \
	VFMADD231PS Y8, Y10, acc; \
	VFMADD231PS Y9, Y11, acc

#define Q4STEP4(woff, xoff) \
	VMOVUPS xoff(BX), Y10; \
	VMOVUPS xoff+32(BX), Y11; \
	Q4CHUNK(woff(SI), Y4); \
	Q4CHUNK(woff(SI)(R12*1), Y5); \
	Q4CHUNK(woff(SI)(R12*2), Y6); \
	Q4CHUNK(woff(SI)(R14*1), Y7)

#define Q4STEP1(woff, xoff) \
	VMOVUPS xoff(BX), Y10; \
	VMOVUPS xoff+32(BX), Y11; \
	Q4CHUNK(woff(SI), Y4)

// acc += q·x for 8 elements of an 8-bit row.
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

// total += scale(bf16 at src) * acc; bf16 -> f32 is a 16-bit left shift.
#define FOLD(src, acc, total) \
	VPBROADCASTW src, Y8; \
	VPSLLD $16, Y8, Y8; \
	VFMADD231PS Y8, acc, total

// total += 8 biases (bf16 at src) * 8 group sums at (BX).
#define BIAS8(src, total) \
	VPMOVZXWD src, Y8; \
	VPSLLD $16, Y8, Y8; \
	VFMADD231PS (BX), Y8, total

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

// Bias term for rows 0-3 (R9 is advanced, then rewound).
#define BIAS4(label, done) \
	MOVQ DX, AX; \
	SHRQ $3, AX; \
	JZ   done; \
	MOVQ R11, BX; \
label: \
	BIAS8((R9), Y0); \
	BIAS8((R9)(R13*1), Y1); \
	BIAS8((R9)(R13*2), Y2); \
	BIAS8((R9)(R15*1), Y3); \
	ADDQ $16, R9; \
	ADDQ $32, BX; \
	DECQ AX; \
	JNZ  label; \
	MOVQ DX, AX; \
	SHRQ $3, AX; \
	SHLQ $4, AX; \
	SUBQ AX, R9; \
done:

#define BIAS1(label, done) \
	MOVQ DX, AX; \
	SHRQ $3, AX; \
	JZ   done; \
	MOVQ R11, BX; \
	MOVQ R9, R12; \
label: \
	BIAS8((R12), Y0); \
	ADDQ $16, R12; \
	ADDQ $32, BX; \
	DECQ AX; \
	JNZ  label; \
done:

// Horizontal sums of Y0-Y3 -> dst[0:4].
#define STORE4 \
	VHADDPS Y1, Y0, Y0; \
	VHADDPS Y3, Y2, Y2; \
	VHADDPS Y2, Y0, Y0; \
	VEXTRACTF128 $1, Y0, X1; \
	VADDPS X1, X0, X0; \
	VMOVUPS X0, (DI)

#define STORE1 \
	VEXTRACTF128 $1, Y0, X1; \
	VADDPS X1, X0, X0; \
	VHADDPS X0, X0, X0; \
	VHADDPS X0, X0, X0; \
	VMOVSS X0, (DI)

// func q4MulAsm(dst *float32, w *uint32, s, b *uint16, xp, gsum *float32, rows, groups int)
TEXT ·q4MulAsm(SB), NOSPLIT, $0-64
	PROLOGUE(5) // 32 bytes of words per group
	VPBROADCASTD nibmask<>+0(SB), Y14
	VPBROADCASTD nibmask<>+4(SB), Y15

q4rows4:
	CMPQ rows+48(FP), $4
	JLT  q4rows1
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	MOVQ   R10, BX
	MOVQ   DX, AX

q4g4:
	VXORPS Y4, Y4, Y4
	VXORPS Y5, Y5, Y5
	VXORPS Y6, Y6, Y6
	VXORPS Y7, Y7, Y7
	LEAQ (SI)(R12*4), CX
	PREFETCHT0 (CX)
	PREFETCHT0 (CX)(R12*1)
	PREFETCHT0 (CX)(R12*2)
	PREFETCHT0 (CX)(R14*1)
	Q4STEP4(0, 0)
	Q4STEP4(8, 64)
	Q4STEP4(16, 128)
	Q4STEP4(24, 192)
	FOLD((R8), Y4, Y0)
	FOLD((R8)(R13*1), Y5, Y1)
	FOLD((R8)(R13*2), Y6, Y2)
	FOLD((R8)(R15*1), Y7, Y3)
	ADDQ $32, SI
	ADDQ $2, R8
	ADDQ $256, BX
	DECQ AX
	JNZ  q4g4

	BIAS4(q4b4, q4b4done)
	STORE4
	ADDQ $16, DI
	ADDQ R14, SI           // SI, R8 moved one row during the group loop
	ADDQ R15, R8
	LEAQ (R9)(R13*4), R9
	SUBQ $4, rows+48(FP)
	JMP  q4rows4

q4rows1:
	CMPQ rows+48(FP), $0
	JEQ  q4done
	VXORPS Y0, Y0, Y0
	MOVQ   R10, BX
	MOVQ   DX, AX

q4g1:
	VXORPS Y4, Y4, Y4
	Q4STEP1(0, 0)
	Q4STEP1(8, 64)
	Q4STEP1(16, 128)
	Q4STEP1(24, 192)
	FOLD((R8), Y4, Y0)
	ADDQ $32, SI
	ADDQ $2, R8
	ADDQ $256, BX
	DECQ AX
	JNZ  q4g1

	BIAS1(q4b1, q4b1done)
	STORE1
	ADDQ $4, DI
	ADDQ R13, R9
	DECQ rows+48(FP)
	JMP  q4rows1

q4done:
	VZEROUPPER
	RET

// func q8MulAsm(dst *float32, w *uint32, s, b *uint16, x, gsum *float32, rows, groups int)
TEXT ·q8MulAsm(SB), NOSPLIT, $0-64
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

q8g4:
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
	FOLD((R8), Y4, Y0)
	FOLD((R8)(R13*1), Y5, Y1)
	FOLD((R8)(R13*2), Y6, Y2)
	FOLD((R8)(R15*1), Y7, Y3)
	ADDQ $64, SI
	ADDQ $2, R8
	ADDQ $256, BX
	DECQ AX
	JNZ  q8g4

	BIAS4(q8b4, q8b4done)
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

q8g1:
	VXORPS Y4, Y4, Y4
	Q8STEP1(0, 0)
	Q8STEP1(8, 32)
	Q8STEP1(16, 64)
	Q8STEP1(24, 96)
	Q8STEP1(32, 128)
	Q8STEP1(40, 160)
	Q8STEP1(48, 192)
	Q8STEP1(56, 224)
	FOLD((R8), Y4, Y0)
	ADDQ $64, SI
	ADDQ $2, R8
	ADDQ $256, BX
	DECQ AX
	JNZ  q8g1

	BIAS1(q8b1, q8b1done)
	STORE1
	ADDQ $4, DI
	ADDQ R13, R9
	DECQ rows+48(FP)
	JMP  q8rows1

q8done:
	VZEROUPPER
	RET
