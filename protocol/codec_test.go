package protocol

import (
	"errors"
	"math"
	"reflect"
	"testing"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/crowdtrain/crowdtrain/nn"
)

const testLimit = 1 << 20

func sampleMessages() []Message {
	spec, _ := nn.Preset("mnist-mlp")
	return []Message{
		&Hello{Protocol: Version, Kind: KindNative, Backend: "cpu", Threads: 2, Client: "crowdtrain test", Codecs: []string{CodecF32}},
		&Welcome{WorkerID: "w-1", Job: JobInfo{ID: "job-1", Name: "mnist-mlp", Model: spec, NumParams: 10},
			Limits: Limits{MaxMessageBytes: 1 << 20, LeaseTimeoutMs: 30000, MaxLeases: 2}},
		&Want{N: 2},
		&Lease{ID: 7, JobID: "job-1", ShardID: 3, ShardURL: "/s/3", Start: 64, Count: 64, BaseVersion: 12,
			SnapshotURL: "/snap/12", BatchSize: 64, LocalSteps: 1, DeadlineUnixMs: 1e12,
			Inner: InnerOptimizer{Type: InnerSGD, LR: 0.01}, UpdateKind: UpdateGradient, Snapshot: SnapshotGranted},
		&Lease{ID: 8, JobID: "job-1", ShardID: 3, ShardURL: "/s/3", Start: 0, Count: 1024, BatchSize: 64, LocalSteps: 16,
			DeadlineUnixMs: 1e12, Round: 4, UpdateKind: UpdateDelta, Snapshot: SnapshotLatest, CopyOf: 7,
			Inner: InnerOptimizer{Type: InnerAdamW, LR: 1e-3, WeightDecay: 0.1, Beta1: 0.9, Beta2: 0.999, Epsilon: 1e-8}},
		&Start{LeaseID: 8},
		&Started{LeaseID: 8, BaseVersion: 13, SnapshotURL: "/snap/13", DeadlineUnixMs: 1e12},
		&Result{LeaseID: 7, JobID: "job-1", BaseVersion: 12, Codec: CodecF32, Update: Floats{1, -2.5, 3e-8},
			Examples: 64, LossSum: 12.5, Correct: 60, ComputeMs: 4.2},
		&Ack{LeaseID: 7, Accepted: false, Reason: ReasonStale, Detail: "staleness 5 > 2", Staleness: 5, Version: 17},
		&Idle{Reason: "job paused", RetryMs: 1000},
		&Release{LeaseIDs: []uint64{7, 8}, Reason: "snapshot gone"},
		&Bye{Reason: "shutting down"},
		&Error{Code: "bad_hello", Message: "what went wrong"},
		rolloutLease(), learnLease(), rolloutResult(),
	}
}

func TestRoundTrip(t *testing.T) {
	for _, m := range sampleMessages() {
		b, err := Encode(m)
		if err != nil {
			t.Fatalf("encode %s: %v", m.MessageType(), err)
		}
		got, err := Decode(b, testLimit)
		if err != nil {
			t.Fatalf("decode %s: %v", m.MessageType(), err)
		}
		if !reflect.DeepEqual(got, m) {
			t.Errorf("%s round trip:\n got %+v\nwant %+v", m.MessageType(), got, m)
		}
	}
}

// A float vector must be one bin, not an array of msgpack floats.
func TestFloatsAreBin(t *testing.T) {
	b, err := msgpack.Marshal(Floats{1, 2, 3})
	if err != nil {
		t.Fatal(err)
	}
	if b[0] != 0xc4 || b[1] != 12 || len(b) != 14 { // bin8, 12 bytes
		t.Fatalf("Floats{1,2,3} encoded as % x, want bin8 of 12 bytes", b)
	}
	if got := b[2:6]; !reflect.DeepEqual(got, []byte{0, 0, 0x80, 0x3f}) { // 1.0 little-endian
		t.Fatalf("first float bytes % x, want little-endian 1.0", got)
	}
}

func TestDecodeRejects(t *testing.T) {
	good := func(m Message) []byte {
		b, err := Encode(m)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	raw := func(v ...any) []byte {
		b, err := msgpack.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	result := func(update Floats) *Result {
		return &Result{LeaseID: 1, JobID: "j", Codec: CodecF32, Update: update, Examples: 1}
	}
	var ve *ValidationError
	cases := []struct {
		name  string
		frame []byte
		check func(error) bool
	}{
		{"too big", good(result(make(Floats, testLimit/4))), func(err error) bool { return errors.Is(err, ErrTooBig) }},
		{"version", raw(Version+1, "want", map[string]int{"n": 1}), func(err error) bool { return errors.Is(err, ErrVersion) }},
		{"unknown type", raw(Version, "gimme", map[string]int{}), func(err error) bool { return errors.Is(err, ErrUnknownType) }},
		{"not an array", good(&Want{N: 1})[1:], func(err error) bool { return errors.Is(err, ErrMalformed) }},
		{"trailing bytes", append(good(&Want{N: 1}), 0), func(err error) bool { return errors.Is(err, ErrMalformed) }},
		{"truncated", good(result(Floats{1, 2}))[:20], func(err error) bool { return errors.Is(err, ErrMalformed) }},
		{"want 0", good(&Want{N: 0}), func(err error) bool { return errors.As(err, &ve) && ve.Field == "n" }},
		{"NaN update", good(result(Floats{1, float32(math.NaN())})), func(err error) bool { return errors.As(err, &ve) && ve.Field == "update" }},
		{"Inf update", good(result(Floats{float32(math.Inf(-1))})), func(err error) bool { return errors.As(err, &ve) && ve.Field == "update" }},
		{"empty update", good(result(nil)), func(err error) bool { return errors.As(err, &ve) && ve.Field == "update" }},
		{"hello kind", good(&Hello{Protocol: Version, Kind: "toaster", Backend: "cpu", Threads: 1}), func(err error) bool { return errors.As(err, &ve) && ve.Field == "kind" }},
		{"hello version", good(&Hello{Protocol: 99, Kind: KindNative, Backend: "cpu", Threads: 1}), func(err error) bool { return errors.Is(err, ErrVersion) }},
		{"odd bin", raw(Version, "result", map[string]any{"lease_id": 1, "update": []byte{1, 2, 3}}), func(err error) bool { return errors.Is(err, ErrMalformed) }},
		{"wrong field type", raw(Version, "want", map[string]any{"n": "two"}), func(err error) bool { return errors.Is(err, ErrMalformed) }},
	}
	for _, c := range cases {
		m, err := Decode(c.frame, testLimit)
		if err == nil {
			t.Errorf("%s: decoded %+v, want an error", c.name, m)
			continue
		}
		if !c.check(err) {
			t.Errorf("%s: wrong error %T: %v", c.name, err, err)
		}
		if err.Error() == "" {
			t.Errorf("%s: empty error text", c.name)
		}
	}
}

func TestFloatsHelpers(t *testing.T) {
	in := []float32{0, -1.5, 3.25, math.MaxFloat32}
	out := make([]float32, len(in))
	if err := DecodeFloatsInto(out, EncodeFloats(in)); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(in, out) {
		t.Fatalf("got %v, want %v", out, in)
	}
	if err := DecodeFloatsInto(make([]float32, 3), EncodeFloats(in)); !errors.Is(err, ErrMalformed) {
		t.Errorf("wrong length: err %v, want ErrMalformed", err)
	}
	if err := DecodeFloatsInto(make([]float32, 1), EncodeFloats([]float32{float32(math.NaN())})); !errors.Is(err, ErrMalformed) {
		t.Errorf("NaN snapshot: err %v, want ErrMalformed", err)
	}
}

func FuzzDecode(f *testing.F) {
	for _, m := range sampleMessages() {
		b, err := Encode(m)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte{0x93, Version, 0xa6, 'r', 'e', 's', 'u', 'l', 't', 0x81, 0xa6, 'u', 'p', 'd', 'a', 't', 'e', 0xc6, 0xff, 0xff, 0xff, 0xf0})
	f.Add([]byte{})
	for _, b := range bombFrames(f) {
		f.Add(b)
	}
	warm, _ := Encode(&Result{LeaseID: 1, JobID: "j", Codec: CodecF32, Update: make(Floats, 64), Examples: 1})
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := Decode(b, 1<<16)
		// A Decoder holding a buffer from an earlier frame decodes the same.
		d := &Decoder{MaxBytes: 1 << 16}
		if _, err := d.Decode(warm); err != nil {
			t.Fatal(err)
		}
		m2, err2 := d.Decode(b)
		if (err == nil) != (err2 == nil) || (err == nil && !reflect.DeepEqual(m, m2)) {
			t.Fatalf("Decoder and Decode disagree: %v / %v", err, err2)
		}
		if err != nil {
			return
		}
		// Whatever decodes must validate and survive a round trip unchanged.
		if err := m.Validate(); err != nil {
			t.Fatalf("decoded message fails validation: %v", err)
		}
		b2, err := Encode(m)
		if err != nil {
			t.Fatalf("re-encode: %v", err)
		}
		m3, err := Decode(b2, 1<<17)
		if err != nil {
			t.Fatalf("re-decode: %v", err)
		}
		if !reflect.DeepEqual(m, m3) {
			t.Fatalf("round trip changed the message:\n%+v\n%+v", m, m3)
		}
	})
}

func FuzzDecodeFloats(f *testing.F) {
	f.Add(EncodeFloats([]float32{1, 2, 3}), 3)
	f.Add([]byte{0, 0, 0xc0, 0x7f}, 1)
	f.Add([]byte{1, 2, 3}, 1)
	f.Fuzz(func(t *testing.T, b []byte, n int) {
		if n < 0 || n > 1<<12 {
			return
		}
		dst := make([]float32, n)
		if err := DecodeFloatsInto(dst, b); err != nil {
			return
		}
		if got := EncodeFloats(dst); string(got) != string(b) {
			t.Fatalf("re-encode differs")
		}
	})
}

func BenchmarkEncodeResult(b *testing.B) {
	m := &Result{LeaseID: 1, JobID: "j", Codec: CodecF32, Update: make(Floats, 235146), Examples: 64}
	b.SetBytes(int64(4 * len(m.Update)))
	for b.Loop() {
		if _, err := Encode(m); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkDecodeResult(b *testing.B) {
	frame, err := Encode(&Result{LeaseID: 1, JobID: "j", Codec: CodecF32, Update: make(Floats, 235146), Examples: 64})
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(frame)))
	for b.Loop() {
		if _, err := Decode(frame, 1<<22); err != nil {
			b.Fatal(err)
		}
	}
}

// A Decoder reuses its float buffer: no allocation per result once warm.
func TestDecoderReusesBuffer(t *testing.T) {
	frame := func(v float32) []byte {
		u := make(Floats, 1000)
		for i := range u {
			u[i] = v
		}
		b, err := Encode(&Result{LeaseID: 1, JobID: "j", Codec: CodecF32, Update: u, Examples: 1})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	a, b := frame(1), frame(2)
	d := &Decoder{MaxBytes: 1 << 20}
	m1, err := d.Decode(a)
	if err != nil {
		t.Fatal(err)
	}
	first := &m1.(*Result).Update[0]
	m2, err := d.Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	u := m2.(*Result).Update
	if &u[0] != first || u[999] != 2 || len(u) != 1000 {
		t.Fatalf("second decode did not reuse the buffer or decoded wrongly")
	}
	// A plain Decode never aliases an earlier message.
	m3, _ := Decode(a, 1<<20)
	if &m3.(*Result).Update[0] == first {
		t.Fatal("Decode reused a Decoder's buffer")
	}
	allocs := testing.AllocsPerRun(20, func() { _, _ = d.Decode(b) })
	if allocs > 12 {
		t.Errorf("%v allocations per decode; the float buffer should be reused", allocs)
	}
}

func BenchmarkDecoderResult(b *testing.B) {
	frame, err := Encode(&Result{LeaseID: 1, JobID: "j", Codec: CodecF32, Update: make(Floats, 235146), Examples: 64})
	if err != nil {
		b.Fatal(err)
	}
	d := &Decoder{MaxBytes: 1 << 22}
	b.SetBytes(int64(len(frame)))
	for b.Loop() {
		if _, err := d.Decode(frame); err != nil {
			b.Fatal(err)
		}
	}
}

func TestFirstNonFinite(t *testing.T) {
	specials := []float32{float32(math.NaN()), float32(math.Inf(1)), float32(math.Inf(-1)), math.Float32frombits(0x7fc00001), math.Float32frombits(0xff800001)}
	for _, n := range []int{0, 1, 255, 256, 257, 1000} {
		f := make(Floats, n)
		for i := range f {
			f[i] = float32(i%7-3) * 1e37 // large but finite, and negative ones
		}
		if got := f.FirstNonFinite(); got != -1 {
			t.Fatalf("n=%d: all finite, got %d", n, got)
		}
		for _, at := range []int{0, n / 2, n - 1} {
			for _, s := range specials {
				if n == 0 {
					continue
				}
				g := append(Floats(nil), f...)
				g[at] = s
				if got := g.FirstNonFinite(); got != at {
					t.Fatalf("n=%d, %v at %d: got %d", n, s, at, got)
				}
			}
		}
	}
	if got := (Floats{math.MaxFloat32, -math.MaxFloat32, math.SmallestNonzeroFloat32}).FirstNonFinite(); got != -1 {
		t.Fatalf("extremes flagged at %d", got)
	}
	// The scan reads two values to a word from an 8-byte boundary: a
	// slice that starts between two (an odd offset) and every position
	// within a word, either value of a word, and the tail.
	base := make(Floats, 2100)
	for off := range 3 {
		f := base[off:]
		for _, at := range []int{0, 1, 2, 3, 1022, 1023, 1024, 1025, len(f) - 2, len(f) - 1} {
			for _, s := range specials {
				f[at] = s
				if got := f.FirstNonFinite(); got != at {
					t.Fatalf("offset %d, %v at %d: got %d", off, s, at, got)
				}
				f[at] = 0
			}
		}
		if got := f.FirstNonFinite(); got != -1 {
			t.Fatalf("offset %d: all zero, got %d", off, got)
		}
	}
}

func TestNorm(t *testing.T) {
	f := Floats{3, 4, 0, 0, 12} // 5 elements: the unrolled loop and its tail
	if got := f.Norm(); got != 13 {
		t.Fatalf("Norm = %v, want 13", got)
	}
	big := Floats{math.MaxFloat32, math.MaxFloat32}
	if got := big.Norm(); math.IsInf(got, 0) || math.Abs(got/(math.Sqrt2*math.MaxFloat32)-1) > 1e-12 {
		t.Fatalf("Norm of MaxFloat32s = %v, want finite sqrt(2)*MaxFloat32", got)
	}
}

// BenchmarkFirstNonFinite scans an mnist-mlp-sized update (235,146
// values), as every result, snapshot and published version is scanned.
func BenchmarkFirstNonFinite(b *testing.B) {
	f := make(Floats, 235_146)
	for i := range f {
		f[i] = float32(i%13-6) * 1e-3
	}
	b.SetBytes(int64(4 * len(f)))
	for b.Loop() {
		if f.FirstNonFinite() != -1 {
			b.Fatal("finite values flagged")
		}
	}
}
