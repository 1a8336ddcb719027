//go:build linux || windows

package driver

import "unsafe"

func unsafeAdd(p *byte, n int) unsafe.Pointer { return unsafe.Add(unsafe.Pointer(p), n) }

func unsafeSlice(p *byte, n int) []byte { return unsafe.Slice(p, n) }

// cStrings returns NUL-terminated copies of ss and a pointer array to
// them, kept alive (and pinned) by the caller's pinner.
func cStrings(pin interface{ Pin(any) }, ss []string) []*byte {
	if len(ss) == 0 {
		return nil
	}
	ptrs := make([]*byte, len(ss))
	for i, s := range ss {
		b := append([]byte(s), 0)
		pin.Pin(&b[0])
		ptrs[i] = &b[0]
	}
	return ptrs
}
