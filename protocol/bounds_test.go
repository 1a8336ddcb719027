package protocol

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"runtime"
	"testing"

	"github.com/vmihailenco/msgpack/v5"
	"github.com/vmihailenco/msgpack/v5/msgpcode"

	"github.com/crowdtrain/crowdtrain/nn"
)

// deepArray is a value nested n arrays deep: [[[...nil...]]].
func deepArray(n int) []byte {
	b := bytes.Repeat([]byte{0x91}, n)
	return append(b, 0xc0)
}

// withUnknownKey returns m's frame with one more body key "zz" holding v:
// the way a hostile peer hides a bomb where decoding skips it.
func withUnknownKey(t testing.TB, m Message, v []byte) []byte {
	t.Helper()
	b, err := Encode(m)
	if err != nil {
		t.Fatal(err)
	}
	// [0x93, version, type str, body map...]: find the body's map header.
	i := 2 + 1 + len(m.MessageType())
	var out []byte
	switch {
	case b[i]&0xf0 == 0x80 && b[i] != 0x8f: // fixmap of up to 14 keys: one more still fits
		out = append([]byte(nil), b...)
		out[i]++
	case b[i] == 0x8f: // fixmap of 15 keys: 16 need a map16 header
		out = append(append(append([]byte(nil), b[:i]...), 0xde, 0x00, 0x10), b[i+1:]...)
	case b[i] == 0xde:
		out = append([]byte(nil), b...)
		binary.BigEndian.PutUint16(out[i+1:], binary.BigEndian.Uint16(out[i+1:])+1)
	default:
		t.Fatalf("%s body is not a map (0x%02x)", m.MessageType(), b[i])
	}
	out = append(out, 0xa2, 'z', 'z')
	return append(out, v...)
}

// bombValues are values that cost a naive decoder far more than their
// size: nesting that recursion follows, and lengths the bytes do not hold.
func bombValues() map[string][]byte {
	many := append([]byte{0xdd, 0x00, 0x01, 0x11, 0x70}, bytes.Repeat([]byte{0xc0}, 70000)...) // array32 of 70,000 nils
	return map[string][]byte{
		"deep array":         deepArray(1 << 16),
		"deep map":           append(bytes.Repeat([]byte{0x81, 0xc0}, 1<<15), 0xc0),
		"array32 length":     {0xdd, 0xff, 0xff, 0xff, 0xff},
		"map32 length":       {0xdf, 0xff, 0xff, 0xff, 0xff},
		"array16 length":     {0xdc, 0xff, 0xff, 0x01},
		"bin32 length":       {0xc6, 0x7f, 0xff, 0xff, 0xff, 0x00},
		"str32 length":       {0xdb, 0x7f, 0xff, 0xff, 0xff, 'a'},
		"ext32 length":       {0xc9, 0x7f, 0xff, 0xff, 0xff, 0x01},
		"too many elements":  many,
		"never-used byte c1": {0xc1},
	}
}

// Every message type, with every bomb hidden in an unknown key, is
// refused as malformed before msgpack/v5 sees it.
func TestDecodeRefusesBombsInEveryType(t *testing.T) {
	for _, m := range sampleMessages() {
		for name, v := range bombValues() {
			b := withUnknownKey(t, m, v)
			_, err := Decode(b, 1<<20)
			if !errors.Is(err, ErrMalformed) || !errors.Is(err, ErrBounds) {
				t.Errorf("%s with %s in an unknown key: got %v, want a malformed/bounds error", m.MessageType(), name, err)
			}
		}
		// The same frame without a bomb still decodes: the walker is not
		// simply refusing unknown keys.
		if _, err := Decode(withUnknownKey(t, m, []byte{0x92, 0x01, 0xa1, 'x'}), 1<<20); err != nil {
			t.Errorf("%s with a small unknown key: %v", m.MessageType(), err)
		}
	}
}

// The frame that ended the coordinator: an unknown key whose value nests
// millions of arrays deep. Before the walker this overflowed the stack,
// which is fatal (the test binary dies). Now it is refused while
// allocating next to nothing.
func TestDecodeDeepFrameBoundedMemory(t *testing.T) {
	hello := &Hello{Protocol: Version, Kind: KindNative, Backend: "cpu", Threads: 1}
	b := withUnknownKey(t, hello, deepArray(7_500_000))
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, err := Decode(b, len(b))
	runtime.ReadMemStats(&after)
	if !errors.Is(err, ErrBounds) {
		t.Fatalf("deep frame: got %v, want ErrBounds", err)
	}
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 64<<10 {
		t.Fatalf("refusing a %d-byte deep frame allocated %d bytes, want under 64 KiB", len(b), alloc)
	}
}

func TestCheckFrameAcceptsWhatEncodeWrites(t *testing.T) {
	for _, m := range sampleMessages() {
		b, err := Encode(m)
		if err != nil {
			t.Fatal(err)
		}
		if err := CheckFrame(b, DefaultBounds); err != nil {
			t.Errorf("%s: %v", m.MessageType(), err)
		}
		if got, ok := PeekType(b[:min(len(b), 16)]); !ok || got != m.MessageType() {
			t.Errorf("PeekType of a %s frame: %q, %v", m.MessageType(), got, ok)
		}
	}
	// A welcome for a model of 2,000 layers is well within the bounds.
	var spec nn.ModelSpec
	spec.Input = []int{1, 28, 28}
	for range 1000 {
		spec.Layers = append(spec.Layers, nn.LayerSpec{Type: "dense", Units: 8}, nn.LayerSpec{Type: "relu"})
	}
	big, err := Encode(&Welcome{WorkerID: "w", Job: JobInfo{ID: "j", Model: spec, NumParams: 1},
		Limits: Limits{MaxMessageBytes: 1, LeaseTimeoutMs: 1, MaxLeases: 1}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Decode(big, 1<<20); err != nil {
		t.Errorf("welcome for 2,000 layers: %v", err)
	}
	// Both run on every frame a coordinator receives: neither allocates.
	frame, _ := Encode(&Result{LeaseID: 1, JobID: "j", Codec: CodecF32, Update: make(Floats, 1000), Examples: 1})
	if n := testing.AllocsPerRun(10, func() {
		_ = CheckFrame(frame, DefaultBounds)
		_, _ = PeekType(frame[:16])
	}); n != 0 {
		t.Errorf("CheckFrame and PeekType of a result: %v allocations, want 0", n)
	}
	// The limits are exactly the stated ones.
	if err := CheckFrame(deepArray(3), Bounds{MaxDepth: 3, MaxElements: 10}); err != nil {
		t.Errorf("depth 3 with MaxDepth 3: %v", err)
	}
	if err := CheckFrame(deepArray(4), Bounds{MaxDepth: 3, MaxElements: 10}); !errors.Is(err, ErrBounds) {
		t.Errorf("depth 4 with MaxDepth 3: %v", err)
	}
	three := []byte{0x93, 0xc0, 0xc0, 0xc0}
	if err := CheckFrame(three, Bounds{MaxDepth: 3, MaxElements: 3}); err != nil {
		t.Errorf("3 elements with MaxElements 3: %v", err)
	}
	if err := CheckFrame(three, Bounds{MaxDepth: 3, MaxElements: 2}); !errors.Is(err, ErrBounds) {
		t.Errorf("3 elements with MaxElements 2: %v", err)
	}
	if err := CheckFrame(append(three, 0xc0), DefaultBounds); !errors.Is(err, ErrBounds) {
		t.Errorf("trailing byte: %v", err)
	}
}

func TestPeekType(t *testing.T) {
	for _, tc := range []struct {
		b    []byte
		want Type
		ok   bool
	}{
		{[]byte{0x93, 0x01, 0xa5, 'h', 'e', 'l', 'l', 'o'}, TypeHello, true},
		{[]byte{0x93, 0xcd, 0x00, 0x01, 0xa4, 'b', 'y', 'e', '!'}, "bye!", true},
		{[]byte{0x93, 0x01, 0xd9, 0x03, 'a', 'c', 'k'}, TypeAck, true},
		{[]byte{0x93, 0x01, 0xa6, 'r', 'e', 's'}, "", false}, // too short to tell
		{[]byte{0x93, 0x01, 0x05}, "", false},                // type is not a string
		{[]byte{0x92, 0x01, 0xa3, 'a', 'c', 'k'}, "", false}, // not [v, type, body]
		{nil, "", false},
	} {
		got, ok := PeekType(tc.b)
		if got != tc.want || ok != tc.ok {
			t.Errorf("PeekType(% x) = %q, %v; want %q, %v", tc.b, got, ok, tc.want, tc.ok)
		}
	}
}

// shapeOf measures a msgpack value's nesting and element count by
// recursion, as a reference for CheckFrame (only fed small inputs).
func shapeOf(d *msgpack.Decoder) (depth, elements int, err error) {
	c, err := d.PeekCode()
	if err != nil {
		return 0, 0, err
	}
	var n int
	switch {
	case msgpcode.IsFixedMap(c) || c == msgpcode.Map16 || c == msgpcode.Map32:
		if n, err = d.DecodeMapLen(); err != nil {
			return 0, 0, err
		}
		n *= 2
	case msgpcode.IsFixedArray(c) || c == msgpcode.Array16 || c == msgpcode.Array32:
		if n, err = d.DecodeArrayLen(); err != nil {
			return 0, 0, err
		}
	default:
		return 0, 0, d.Skip()
	}
	maxChild := 0
	for range n {
		cd, ce, err := shapeOf(d)
		if err != nil {
			return 0, 0, err
		}
		maxChild, elements = max(maxChild, cd), elements+ce
	}
	return 1 + maxChild, elements + n, nil
}

// CheckFrame agrees with a recursive reference: what it accepts is one
// complete msgpack value within the bounds; what is within the bounds and
// complete, it accepts.
func FuzzCheckFrame(f *testing.F) {
	for _, v := range bombValues() {
		f.Add(v[:min(len(v), 4096)])
	}
	for _, m := range sampleMessages() {
		b, _ := Encode(m)
		f.Add(b)
	}
	f.Add(deepArray(9))
	f.Add([]byte{0xc7, 0x02, 0x01, 0xaa, 0xbb})
	f.Fuzz(func(t *testing.T, b []byte) {
		bd := Bounds{MaxDepth: 8, MaxElements: 64}
		err := CheckFrame(b, bd)
		if len(b) > 1<<14 {
			return
		}
		r := bytes.NewReader(b)
		depth, elements, rerr := shapeOf(msgpack.NewDecoder(r))
		complete := rerr == nil && r.Len() == 0
		within := complete && depth <= bd.MaxDepth && elements <= bd.MaxElements
		if (err == nil) != within {
			t.Fatalf("CheckFrame: %v; reference: depth %d, elements %d, complete %v (%v)", err, depth, elements, complete, rerr)
		}
	})
}

// bombFrames are whole frames of every message type carrying each bomb,
// the seed corpus FuzzDecode starts from.
func bombFrames(t testing.TB) [][]byte {
	var out [][]byte
	for _, m := range sampleMessages() {
		for _, v := range bombValues() {
			out = append(out, withUnknownKey(t, m, v))
		}
	}
	// Bombs in known fields, where decoding reads rather than skips.
	for _, s := range []string{
		"\x93" + string(rune(Version)) + "\xa5hello\x81\xa6codecs\xdd\xff\xff\xff\xff",
		"\x93" + string(rune(Version)) + "\xa7release\x81\xa9lease_ids\xdd\x7f\xff\xff\xff",
		"\x93" + string(rune(Version)) + "\xa6result\x81\xa6update\xdc\x00\x03\xca\x00\x00\x00\x00\xca\x00\x00\x00\x00\xca\x00\x00\x00\x00",
		"\x93" + string(rune(Version)) + "\xa7welcome\x81\xa3job" + string(deepArray(100)),
	} {
		out = append(out, []byte(s))
	}
	return out
}

func TestBombFramesRefused(t *testing.T) {
	for i, b := range bombFrames(t) {
		if _, err := Decode(b, 1<<20); !errors.Is(err, ErrMalformed) {
			t.Errorf("bomb frame %d (% x...): got %v, want malformed", i, b[:min(len(b), 24)], err)
		}
	}
}

func ExampleCheckFrame() {
	err := CheckFrame(deepArray(1000), DefaultBounds)
	fmt.Println(err)
	// Output: frame out of bounds: nested deeper than 16 levels
}
