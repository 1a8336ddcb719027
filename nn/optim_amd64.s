//go:build amd64 && !purego

#include "textflag.h"

// func adamStep8(n int, p, grad, m, v *float32, k *adamConsts)
//
// For each of the n values (a multiple of 8), as adam.Step's Go loop,
// operation for operation (no fused multiply-add):
//   gi = g*cs; m = b1*m + a1*gi; v = b2*v + (a2*gi)*gi
//   p = (p - decay*p) - (lr*(m*c1)) / (sqrt(v)*c2 + eps)
TEXT ·adamStep8(SB), NOSPLIT, $0-48
	MOVQ n+0(FP), CX
	MOVQ p+8(FP), DI
	MOVQ grad+16(FP), SI
	MOVQ m+24(FP), R8
	MOVQ v+32(FP), R9
	MOVQ k+40(FP), AX
	VBROADCASTSS 0(AX), Y0  // cs
	VBROADCASTSS 4(AX), Y1  // b1
	VBROADCASTSS 8(AX), Y2  // a1
	VBROADCASTSS 12(AX), Y3 // b2
	VBROADCASTSS 16(AX), Y4 // a2
	VBROADCASTSS 20(AX), Y5 // decay
	VBROADCASTSS 24(AX), Y6 // lr
	VBROADCASTSS 28(AX), Y7 // c1
	VBROADCASTSS 32(AX), Y8 // c2
	VBROADCASTSS 36(AX), Y9 // eps
	SHRQ $3, CX
	JEQ adam_done
adam_loop:
	VMOVUPS (SI), Y10
	VMULPS Y0, Y10, Y10      // gi
	VMOVUPS (R8), Y11
	VMULPS Y1, Y11, Y11      // b1*m
	VMULPS Y2, Y10, Y12      // a1*gi
	VADDPS Y12, Y11, Y11     // m
	VMOVUPS Y11, (R8)
	VMOVUPS (R9), Y12
	VMULPS Y3, Y12, Y12      // b2*v
	VMULPS Y4, Y10, Y13      // a2*gi
	VMULPS Y10, Y13, Y13     // (a2*gi)*gi
	VADDPS Y13, Y12, Y12     // v
	VMOVUPS Y12, (R9)
	VSQRTPS Y12, Y12
	VMULPS Y8, Y12, Y12      // sqrt(v)*c2
	VADDPS Y9, Y12, Y12      // + eps
	VMULPS Y7, Y11, Y11      // m*c1
	VMULPS Y6, Y11, Y11      // lr*(m*c1)
	VDIVPS Y12, Y11, Y11     // / (sqrt(v)*c2 + eps)
	VMOVUPS (DI), Y13
	VMULPS Y5, Y13, Y14      // decay*p
	VSUBPS Y14, Y13, Y13     // p - decay*p
	VSUBPS Y11, Y13, Y13     // - the step
	VMOVUPS Y13, (DI)
	ADDQ $32, DI
	ADDQ $32, SI
	ADDQ $32, R8
	ADDQ $32, R9
	DECQ CX
	JNE adam_loop
adam_done:
	VZEROUPPER
	RET
