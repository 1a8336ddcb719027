//go:build amd64 && !purego

#include "textflag.h"

// func f16cEncode(dst []byte, src []float32) (noNaN bool)
// Writes the halves of src's first len(src)&^7 values, each clamped to
// ±65504 and rounded to nearest even (VCVTPS2PH imm 0), into dst; false
// when any of them is NaN (the caller converts those in Go).
TEXT ·f16cEncode(SB), NOSPLIT, $0-49
	MOVQ dst_base+0(FP), DI
	MOVQ src_base+24(FP), SI
	MOVQ src_len+32(FP), CX
	SHRQ $3, CX
	MOVL $0x477fe000, AX // 65504
	VMOVD AX, X1
	VBROADCASTSS X1, Y1
	VXORPS Y2, Y2, Y2
	VSUBPS Y1, Y2, Y2    // -65504
	VXORPS Y3, Y3, Y3    // lanes that held a NaN

encode:
	TESTQ CX, CX
	JZ encoded
	VMOVUPS (SI), Y0
	VCMPPS $3, Y0, Y0, Y4 // unordered with itself: NaN
	VORPS Y4, Y3, Y3
	VMINPS Y1, Y0, Y0
	VMAXPS Y2, Y0, Y0
	VCVTPS2PH $0, Y0, (DI)
	ADDQ $32, SI
	ADDQ $16, DI
	DECQ CX
	JMP encode

encoded:
	VPTEST Y3, Y3
	SETEQ noNaN+48(FP)
	VZEROUPPER
	RET

// func f16cDecode(dst []float32, src []byte) (finite bool)
// Converts the first len(dst)&^7 halves of src into dst; false when any
// of them is Inf or NaN (the caller finds which in Go).
TEXT ·f16cDecode(SB), NOSPLIT, $0-49
	MOVQ dst_base+0(FP), DI
	MOVQ dst_len+8(FP), CX
	MOVQ src_base+24(FP), SI
	SHRQ $3, CX
	MOVL $0x7c007c00, AX // a half's exponent bits, twice
	VMOVD AX, X1
	VPBROADCASTD X1, X1
	VPXOR X3, X3, X3     // words whose exponent is all ones

decode:
	TESTQ CX, CX
	JZ decoded
	VMOVDQU (SI), X0
	VPAND X1, X0, X2
	VPCMPEQW X1, X2, X2
	VPOR X2, X3, X3
	VCVTPH2PS X0, Y0
	VMOVUPS Y0, (DI)
	ADDQ $16, SI
	ADDQ $32, DI
	DECQ CX
	JMP decode

decoded:
	VPTEST X3, X3
	SETEQ finite+48(FP)
	VZEROUPPER
	RET
