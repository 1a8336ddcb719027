//go:build !amd64 || purego

package nn

// Without the assembly the GELU and exp run in Go.
const mathAVX512, mathAVX2 = false, false

func setMathVector(width int) int { return 0 }

func geluFwd16(n int, in, out []float32)       { panic("nn: no GELU kernel in this build") }
func geluBwd16(n int, in, dOut, dIn []float32) { panic("nn: no GELU kernel in this build") }
func expSub16(n int, x []float32, m float32)   { panic("nn: no exp kernel in this build") }
func geluFwd8(n int, in, out []float32)        { panic("nn: no GELU kernel in this build") }
func geluBwd8(n int, in, dOut, dIn []float32)  { panic("nn: no GELU kernel in this build") }
func expSub8(n int, x []float32, m float32)    { panic("nn: no exp kernel in this build") }
