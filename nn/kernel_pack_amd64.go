//go:build amd64 && !purego

package nn

// AVX packing of 8-row strips of A (kernel_pack_amd64.s, written by
// scripts/gen_pack_kernels.py), for the avx512 kernel's mr = 8.

//go:noescape
func packA8Tasm(kb int, src []float32, lda int, dst []float32, alpha float32)

//go:noescape
func packA8Nasm(kb int, src []float32, lda int, dst []float32, alpha float32)

const haveAsmPack = true

// packA8T writes dst[p*8+i] = alpha*src[p*lda+i] for p < kb, i < 8.
func packA8T(kb int, src []float32, lda int, dst []float32, alpha float32) {
	if kb <= 0 {
		return
	}
	_, _ = src[:(kb-1)*lda+8], dst[:8*kb]
	packA8Tasm(kb, src, lda, dst, alpha)
}

// packA8N writes dst[p*8+i] = alpha*src[i*lda+p] for p < kb, i < 8.
func packA8N(kb int, src []float32, lda int, dst []float32, alpha float32) {
	if kb <= 0 {
		return
	}
	_, _ = src[:7*lda+kb], dst[:8*kb]
	k8 := kb &^ 7
	packA8Nasm(k8, src, lda, dst, alpha)
	for p := k8; p < kb; p++ {
		d := dst[p*8 : p*8+8 : p*8+8]
		for i := range d {
			d[i] = alpha * src[i*lda+p]
		}
	}
}

//go:noescape
func packB32asm(kb int, src []float32, ldb int, dst []float32)

// packB32 writes dst[p*32+j] = src[p*ldb+j] for p < kb, j < 32 (only where
// AVX-512 is: the avx512 kernel's strips).
func packB32(kb int, src []float32, ldb int, dst []float32) {
	if kb <= 0 {
		return
	}
	_, _ = src[:(kb-1)*ldb+32], dst[:32*kb]
	packB32asm(kb, src, ldb, dst)
}
