//go:build !amd64 || purego

package nn

// mathAVX512 is false without the assembly: the GELU runs in Go.
const mathAVX512 = false

func geluFwd16(n int, in, out []float32)       { panic("nn: no GELU kernel in this build") }
func geluBwd16(n int, in, dOut, dIn []float32) { panic("nn: no GELU kernel in this build") }

func setMathAVX512(on bool) {}

func expSub16(n int, x []float32, m float32) { panic("nn: no exp kernel in this build") }
