package onnx

import (
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
)

// A protobuf reader for the tests, independent of proto.go's writer: a
// message is its fields in order, each a varint or a length-delimited
// payload.
type wireField struct {
	num   protowire.Number
	val   uint64
	bytes []byte
}

type wireMessage []wireField

func decode(t *testing.T, b []byte) wireMessage {
	t.Helper()
	var m wireMessage
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			t.Fatalf("bad tag: %v", protowire.ParseError(n))
		}
		b = b[n:]
		f := wireField{num: num}
		switch typ {
		case protowire.VarintType:
			f.val, n = protowire.ConsumeVarint(b)
		case protowire.Fixed32Type:
			var v uint32
			v, n = protowire.ConsumeFixed32(b)
			f.val = uint64(v)
		case protowire.BytesType:
			f.bytes, n = protowire.ConsumeBytes(b)
		default:
			t.Fatalf("field %d: unexpected wire type %d", num, typ)
		}
		if n < 0 {
			t.Fatalf("field %d: %v", num, protowire.ParseError(n))
		}
		b = b[n:]
		m = append(m, f)
	}
	return m
}

// field is the first field numbered num (a zero field if there is none).
func (m wireMessage) field(num protowire.Number) wireField {
	for _, f := range m {
		if f.num == num {
			return f
		}
	}
	return wireField{}
}

func (m wireMessage) all(num protowire.Number) []wireField {
	var fs []wireField
	for _, f := range m {
		if f.num == num {
			fs = append(fs, f)
		}
	}
	return fs
}

func (f wireField) varint() uint64 { return f.val }
func (f wireField) str() string    { return string(f.bytes) }
func (f wireField) msg(t *testing.T) wireMessage {
	t.Helper()
	if f.num == 0 {
		t.Fatal("no such field")
	}
	return decode(t, f.bytes)
}
