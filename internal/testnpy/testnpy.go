package testnpy

import (
	"fmt"
	"strings"
)

// Encode is a .npy file (format 1.0) of the array of dtype descr ("<f4",
// "<i8", "|u1", ...) and shape whose raw bytes are data, as numpy.save
// writes it: the header padded with spaces to a multiple of 64 bytes,
// ending in a newline. data is not checked against descr and shape, so
// tests can write files that are wrong on purpose.
func Encode(descr string, shape []int, data []byte) []byte {
	dims := make([]string, len(shape))
	for i, d := range shape {
		dims[i] = fmt.Sprint(d)
	}
	tuple := strings.Join(dims, ", ")
	if len(shape) == 1 {
		tuple += ","
	}
	h := fmt.Sprintf("{'descr': '%s', 'fortran_order': False, 'shape': (%s), }", descr, tuple)
	// magic (6) + version (2) + length (2) + header + '\n', a multiple of 64.
	h += strings.Repeat(" ", (64-(10+len(h)+1)%64)%64) + "\n"
	b := append([]byte("\x93NUMPY\x01\x00"), byte(len(h)), byte(len(h)>>8))
	b = append(b, h...)
	return append(b, data...)
}
