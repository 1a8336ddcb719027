//go:build amd64 && !purego

package protocol

import "golang.org/x/sys/cpu"

// useF16C says whether the CPU converts halves itself (F16C, with AVX2
// for the broadcasts): the codecs' conversions run at memory speed
// instead of a branchy loop a value.
var useF16C = cpu.X86.HasAVX2 && cpu.X86.HasF16C

//go:noescape
func f16cEncode(dst []byte, src []float32) (noNaN bool)

//go:noescape
func f16cDecode(dst []float32, src []byte) (finite bool)
