package protocol

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// ErrBounds marks a frame refused for its shape (too deep, too many
// elements, a length longer than the frame) before any decoding.
var ErrBounds = errors.New("frame out of bounds")

// Bounds limit the shape of a frame. msgpack/v5 skips unknown keys by
// recursion and sizes slices from declared lengths, so untrusted bytes are
// walked by CheckFrame, which does neither, before msgpack ever sees them.
type Bounds struct {
	// MaxDepth is how deeply arrays and maps may nest; the frame array
	// itself is level 1. At most maxDepthCap.
	MaxDepth int
	// MaxElements counts array elements and map keys and values over the
	// whole frame (a bin or str is one element however long).
	MaxElements int
}

// maxDepthCap sizes CheckFrame's fixed stack, so the walk never allocates.
const maxDepthCap = 64

// DefaultBounds fit every message of this protocol with room to grow: the
// deepest (a welcome's model spec) nests 6 levels; the largest holds a
// few hundred elements (a welcome holds about 13 per layer, so 65,536
// leave room for models of thousands of layers). Refusing more costs
// nothing: a container's declared count is checked when it opens.
var DefaultBounds = Bounds{MaxDepth: 16, MaxElements: 1 << 16}

func (b Bounds) orDefault() Bounds {
	if b.MaxDepth <= 0 {
		b.MaxDepth = DefaultBounds.MaxDepth
	}
	if b.MaxDepth > maxDepthCap {
		b.MaxDepth = maxDepthCap
	}
	if b.MaxElements <= 0 {
		b.MaxElements = DefaultBounds.MaxElements
	}
	return b
}

// CheckFrame walks b as exactly one msgpack value, iteratively and
// without allocating, and refuses it when it nests deeper or holds more
// elements than bd allows, when a declared length (of a str, bin, ext,
// array or map) does not fit in the bytes left, or when bytes follow the
// value. A frame that passes can be decoded with bounded stack and with
// every allocation bounded by len(b).
func CheckFrame(b []byte, bd Bounds) error {
	bd = bd.orDefault()
	var stack [maxDepthCap]int // items left to read at each open level
	depth, pending, elements := 0, 1, 0
	i := 0
	for {
		for pending == 0 {
			if depth == 0 {
				if i != len(b) {
					return fmt.Errorf("%w: %d bytes after the frame", ErrBounds, len(b)-i)
				}
				return nil
			}
			depth--
			pending = stack[depth]
		}
		pending--
		if i >= len(b) {
			return fmt.Errorf("%w: frame ends in the middle of a value (truncated)", ErrBounds)
		}
		c := b[i]
		i++
		var skip, items int // payload bytes to skip; items in a new array or map
		container := false
		switch {
		case c <= 0x7f || c >= 0xe0: // positive and negative fixint
		case c <= 0x8f: // fixmap
			items, container = 2*int(c&0x0f), true
		case c <= 0x9f: // fixarray
			items, container = int(c&0x0f), true
		case c <= 0xbf: // fixstr
			skip = int(c & 0x1f)
		case c == 0xc0, c == 0xc2, c == 0xc3: // nil, false, true
		case c == 0xc1:
			return fmt.Errorf("%w: byte 0xc1 at offset %d is never used in msgpack", ErrBounds, i-1)
		case c == 0xc4 || c == 0xd9: // bin8, str8
			n, ok := readLen(b, i, 1)
			if !ok {
				return truncated(i)
			}
			i, skip = i+1, n
		case c == 0xc5 || c == 0xda: // bin16, str16
			n, ok := readLen(b, i, 2)
			if !ok {
				return truncated(i)
			}
			i, skip = i+2, n
		case c == 0xc6 || c == 0xdb: // bin32, str32
			n, ok := readLen(b, i, 4)
			if !ok {
				return truncated(i)
			}
			i, skip = i+4, n
		case c == 0xc7, c == 0xc8, c == 0xc9: // ext8/16/32: length, type byte, data
			w := 1 << (c - 0xc7)
			n, ok := readLen(b, i, w)
			if !ok {
				return truncated(i)
			}
			i, skip = i+w, n+1
		case c == 0xca, c == 0xce, c == 0xd2: // float32, uint32, int32
			skip = 4
		case c == 0xcb, c == 0xcf, c == 0xd3: // float64, uint64, int64
			skip = 8
		case c == 0xcc, c == 0xd0: // uint8, int8
			skip = 1
		case c == 0xcd, c == 0xd1: // uint16, int16
			skip = 2
		case c >= 0xd4 && c <= 0xd8: // fixext 1, 2, 4, 8, 16 plus the type byte
			skip = 1 + 1<<(c-0xd4)
		case c == 0xdc || c == 0xde: // array16, map16
			n, ok := readLen(b, i, 2)
			if !ok {
				return truncated(i)
			}
			i, items, container = i+2, n, true
		case c == 0xdd || c == 0xdf: // array32, map32
			n, ok := readLen(b, i, 4)
			if !ok {
				return truncated(i)
			}
			i, items, container = i+4, n, true
		}
		if c == 0xde || c == 0xdf {
			items *= 2
		}
		if skip > len(b)-i {
			return fmt.Errorf("%w: a value at offset %d claims %d bytes, the frame has %d left", ErrBounds, i, skip, len(b)-i)
		}
		i += skip
		if !container {
			continue
		}
		// Every element takes at least one byte.
		if items > len(b)-i {
			return fmt.Errorf("%w: a container at offset %d claims %d elements, the frame has %d bytes left", ErrBounds, i, items, len(b)-i)
		}
		if elements += items; elements > bd.MaxElements {
			return fmt.Errorf("%w: more than %d elements in one frame", ErrBounds, bd.MaxElements)
		}
		if depth+1 > bd.MaxDepth {
			return fmt.Errorf("%w: nested deeper than %d levels", ErrBounds, bd.MaxDepth)
		}
		if items == 0 {
			continue
		}
		stack[depth] = pending
		depth++
		pending = items
	}
}

// readLen reads a big-endian length of w bytes at b[i:].
func readLen(b []byte, i, w int) (int, bool) {
	if len(b)-i < w {
		return 0, false
	}
	switch w {
	case 1:
		return int(b[i]), true
	case 2:
		return int(binary.BigEndian.Uint16(b[i:])), true
	default:
		return int(binary.BigEndian.Uint32(b[i:])), true
	}
}

func truncated(i int) error {
	return fmt.Errorf("%w: frame ends inside a length at offset %d (truncated)", ErrBounds, i)
}

// PeekType reads the message type from the start of a frame, so a receiver
// can apply that type's size limit while it reads the rest. prefix may be
// any leading part of the frame; ok is false when it does not start like a
// frame of this protocol or is too short to tell.
func PeekType(prefix []byte) (t Type, ok bool) {
	if len(prefix) < 3 || prefix[0] != 0x93 { // fixarray of 3
		return "", false
	}
	i := 1
	// The version: any msgpack integer.
	switch c := prefix[i]; {
	case c <= 0x7f || c >= 0xe0:
		i++
	case c == 0xcc || c == 0xd0:
		i += 2
	case c == 0xcd || c == 0xd1:
		i += 3
	case c == 0xce || c == 0xd2:
		i += 5
	case c == 0xcf || c == 0xd3:
		i += 9
	default:
		return "", false
	}
	if i >= len(prefix) {
		return "", false
	}
	var n int
	switch c := prefix[i]; {
	case c >= 0xa0 && c <= 0xbf:
		n, i = int(c&0x1f), i+1
	case c == 0xd9 && i+1 < len(prefix):
		n, i = int(prefix[i+1]), i+2
	default:
		return "", false
	}
	if n > len(prefix)-i {
		return "", false
	}
	name := prefix[i : i+n]
	for _, t := range knownTypes {
		if string(name) == string(t) { // no allocation for a known type
			return t, true
		}
	}
	return Type(name), true
}

var knownTypes = [...]Type{TypeResult, TypeWant, TypeAck, TypeLease, TypeHello, TypeWelcome,
	TypeIdle, TypeStart, TypeStarted, TypeRelease, TypeBye, TypeError}
