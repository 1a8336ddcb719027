//go:build !amd64 || purego

package nn

const haveAsmPack = false

func packA8T(kb int, src []float32, lda int, dst []float32, alpha float32) {
	panic("nn: no packing kernel in this build")
}

func packA8N(kb int, src []float32, lda int, dst []float32, alpha float32) {
	panic("nn: no packing kernel in this build")
}

func packB32(kb int, src []float32, ldb int, dst []float32) {
	panic("nn: no packing kernel in this build")
}
