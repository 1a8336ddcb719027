//go:build !amd64 || purego

package protocol

// useF16C is false where no assembly converts halves: the Go loops do.
const useF16C = false

func f16cEncode([]byte, []float32) bool { panic("protocol: no F16C conversion on this platform") }

func f16cDecode([]float32, []byte) bool { panic("protocol: no F16C conversion on this platform") }
