package protocol_test

import (
	"bytes"
	"compress/flate"
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/crowdtrain/crowdtrain/dataset"
	"github.com/crowdtrain/crowdtrain/nn"
	"github.com/crowdtrain/crowdtrain/protocol"
)

var (
	mnistOnce sync.Once
	mnistSet  *dataset.Set
	mnistErr  error
)

// trainVersions returns n+1 versions of mnist-mlp's parameters, as an
// async job with H=1 publishes them: an initialised model after a few
// warm-up steps, then one outer step per version from the gradient of 64
// real MNIST examples. opt is the outer optimizer: Adam at 1e-3 (the
// async default), or plain SGD at 0.05 (one local step's change).
func trainVersions(t testing.TB, n int, opt string) [][]float32 {
	t.Helper()
	mnistOnce.Do(func() { mnistSet, _, mnistErr = dataset.LoadMNIST("") })
	if mnistErr != nil {
		t.Fatalf("MNIST is a declared dependency and must be found: %v", mnistErr)
	}
	spec, err := nn.Preset("mnist-mlp")
	if err != nil {
		t.Fatal(err)
	}
	m, err := nn.NewModel(spec)
	if err != nil {
		t.Fatal(err)
	}
	optSpec := nn.OptimizerSpec{Type: nn.OptAdam, LR: 1e-3}
	if opt == "sgd" {
		optSpec = nn.OptimizerSpec{Type: nn.OptSGD, LR: 0.05}
	}
	o, err := nn.NewOptimizer(optSpec, m.NumParams)
	if err != nil {
		t.Fatal(err)
	}
	const batch = 64
	params := make([]float32, m.NumParams)
	grad := make([]float32, m.NumParams)
	m.Init(params, 1)
	ws := m.NewWorkspace(batch)
	x := make([]float32, batch*m.InputSize)
	labels := make([]int32, batch)
	next := 0
	step := func() {
		mnistSet.Fill(x, labels, next, batch)
		next += batch
		m.Gradient(ws, params, x, labels, grad)
		o.Step(params, grad, 1)
	}
	for range 5 {
		step()
	}
	out := [][]float32{append([]float32(nil), params...)}
	for range n {
		step()
		out = append(out, append([]float32(nil), params...))
	}
	return out
}

func body(codec string, p []float32) []byte {
	if codec == protocol.SnapshotF16 {
		return protocol.EncodeHalves(nil, p)
	}
	return protocol.EncodeFloats(p)
}

func elemSize(codec string) int {
	if codec == protocol.SnapshotF16 {
		return 2
	}
	return 4
}

func TestDeltaAppliesToTheExactBody(t *testing.T) {
	vs := trainVersions(t, 8, "adam")
	for _, codec := range []string{protocol.SnapshotF32, protocol.SnapshotF16} {
		var dec protocol.DeltaDecoder
		var out []byte
		for _, k := range []int{1, 8} {
			from, to := body(codec, vs[0]), body(codec, vs[k])
			if bytes.Equal(from, to) {
				t.Fatalf("%s: versions 0 and %d have equal bodies; the test would prove nothing", codec, k)
			}
			d, err := protocol.EncodeDelta(nil, from, to, elemSize(codec))
			if err != nil {
				t.Fatal(err)
			}
			h, err := protocol.ParseDeltaHeader(d)
			if err != nil {
				t.Fatal(err)
			}
			if h.Kind != protocol.DeltaXOR {
				t.Errorf("%s, %d versions: kind %d, want an xor delta", codec, k, h.Kind)
			}
			out, err = dec.Apply(out, from, d, len(to))
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(out, to) {
				t.Fatalf("%s, %d versions: applied delta differs from the full body", codec, k)
			}
			if len(d) >= len(to) {
				t.Errorf("%s, %d versions: delta of %d bytes is not smaller than the %d-byte body", codec, k, len(d), len(to))
			}
		}
	}
}

func TestDeltaIdenticalAndFull(t *testing.T) {
	vs := trainVersions(t, 1, "adam")
	b := protocol.EncodeFloats(vs[1])
	d, err := protocol.EncodeDelta(nil, b, b, 4)
	if err != nil {
		t.Fatal(err)
	}
	if len(d) > len(b)/100 {
		t.Errorf("delta between equal %d-byte bodies is %d bytes, want under 1%%", len(b), len(d))
	}
	got, err := protocol.ApplyDelta(nil, b, d, len(b))
	if err != nil || !bytes.Equal(got, b) {
		t.Fatalf("identical: err %v, equal %v", err, bytes.Equal(got, b))
	}
	// No body held: the full kind, applied against nothing.
	full, err := protocol.EncodeDelta(nil, nil, b, 4)
	if err != nil {
		t.Fatal(err)
	}
	if h, _ := protocol.ParseDeltaHeader(full); h.Kind != protocol.DeltaFull {
		t.Fatalf("kind %d, want full", h.Kind)
	}
	got, err = protocol.ApplyDelta(nil, nil, full, len(b))
	if err != nil || !bytes.Equal(got, b) {
		t.Fatalf("full: err %v, equal %v", err, bytes.Equal(got, b))
	}
	// Unrelated bodies: the xor is no smaller than the body alone, so the
	// encoder sends the full kind, which applies whatever is held.
	r := rand.New(rand.NewPCG(1, 2))
	noise := make([]byte, 4096)
	for i := range noise {
		noise[i] = byte(r.Uint32())
	}
	zeros := make([]byte, 4096)
	d, err = protocol.EncodeDelta(nil, noise, zeros, 4)
	if err != nil {
		t.Fatal(err)
	}
	if h, _ := protocol.ParseDeltaHeader(d); h.Kind != protocol.DeltaFull {
		t.Fatalf("noise to zeros: kind %d, want full", h.Kind)
	}
	got, err = protocol.ApplyDelta(nil, noise, d, 4096)
	if err != nil || !bytes.Equal(got, zeros) {
		t.Fatalf("noise to zeros: err %v", err)
	}
}

func TestDeltaEncodeRejects(t *testing.T) {
	for name, c := range map[string]struct {
		from, to []byte
		es       int
	}{
		"element size": {make([]byte, 8), make([]byte, 8), 3},
		"ragged":       {make([]byte, 6), make([]byte, 6), 4},
		"lengths":      {make([]byte, 8), make([]byte, 12), 4},
	} {
		if _, err := protocol.EncodeDelta(nil, c.from, c.to, c.es); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

// deltaWith builds a delta with the given header fields and payload.
func deltaWith(magic string, version, kind, es, reserved byte, length uint32, payload []byte) []byte {
	b := append([]byte(magic), version, kind, es, reserved)
	b = binary.LittleEndian.AppendUint32(b, length)
	return append(b, payload...)
}

func deflated(t testing.TB, b []byte) []byte {
	var buf bytes.Buffer
	w, _ := flate.NewWriter(&buf, flate.BestSpeed)
	w.Write(b)
	w.Close()
	return buf.Bytes()
}

func TestApplyDeltaRejectsMalformed(t *testing.T) {
	held := make([]byte, 64)
	ok := deflated(t, make([]byte, 64))
	big := deflated(t, make([]byte, 1<<20)) // a zip bomb for a 64-byte body
	good := deltaWith("CTDL", 1, 1, 4, 0, 64, ok)
	if _, err := protocol.ApplyDelta(nil, held, good, 64); err != nil {
		t.Fatalf("the well-formed delta: %v", err)
	}
	cases := map[string]struct {
		delta   []byte
		maxBody int
	}{
		"empty":             {nil, 64},
		"short header":      {good[:11], 64},
		"magic":             {deltaWith("CTDX", 1, 1, 4, 0, 64, ok), 64},
		"version":           {deltaWith("CTDL", 2, 1, 4, 0, 64, ok), 64},
		"kind 0":            {deltaWith("CTDL", 1, 0, 4, 0, 64, ok), 64},
		"kind 3":            {deltaWith("CTDL", 1, 3, 4, 0, 64, ok), 64},
		"element size":      {deltaWith("CTDL", 1, 1, 8, 0, 64, ok), 64},
		"reserved":          {deltaWith("CTDL", 1, 1, 4, 1, 64, ok), 64},
		"ragged length":     {deltaWith("CTDL", 1, 2, 4, 0, 62, ok), 64},
		"xor length":        {deltaWith("CTDL", 1, 1, 4, 0, 32, deflated(t, make([]byte, 32))), 64},
		"over maxBody":      {deltaWith("CTDL", 1, 2, 4, 0, 128, deflated(t, make([]byte, 128))), 64},
		"huge length":       {deltaWith("CTDL", 1, 2, 4, 0, 1<<32-4, ok), 1 << 30},
		"truncated stream":  {deltaWith("CTDL", 1, 1, 4, 0, 64, ok[:len(ok)-2]), 64},
		"no stream":         {deltaWith("CTDL", 1, 1, 4, 0, 64, nil), 64},
		"inflates too much": {deltaWith("CTDL", 1, 1, 4, 0, 64, big), 64},
		"inflates too few":  {deltaWith("CTDL", 1, 1, 4, 0, 64, deflated(t, make([]byte, 60))), 64},
		"trailing bytes":    {append(append([]byte(nil), good...), 0), 64},
		"garbage stream":    {deltaWith("CTDL", 1, 1, 4, 0, 64, []byte{0xff, 0xff, 0xff, 0xff}), 64},
	}
	for name, c := range cases {
		_, err := protocol.ApplyDelta(nil, held, c.delta, c.maxBody)
		if err == nil {
			t.Errorf("%s: accepted", name)
		} else if !errors.Is(err, protocol.ErrDelta) {
			t.Errorf("%s: error %v does not wrap ErrDelta", name, err)
		}
	}
}

func TestDeltaDecoderWarmReusesBuffers(t *testing.T) {
	vs := trainVersions(t, 1, "adam")
	from, to := protocol.EncodeFloats(vs[0]), protocol.EncodeFloats(vs[1])
	d, err := protocol.EncodeDelta(nil, from, to, 4)
	if err != nil {
		t.Fatal(err)
	}
	var dec protocol.DeltaDecoder
	out, err := dec.Apply(nil, from, d, len(to))
	if err != nil {
		t.Fatal(err)
	}
	// compress/flate allocates small Huffman link tables per dynamic
	// block; what must not recur is a buffer of the body's size.
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for range 5 {
		if out, err = dec.Apply(out, from, d, len(to)); err != nil {
			t.Fatal(err)
		}
	}
	runtime.ReadMemStats(&after)
	if per := (after.TotalAlloc - before.TotalAlloc) / 5; per > uint64(len(to))/10 {
		t.Errorf("a warm DeltaDecoder allocates %d bytes per delta of a %d-byte body", per, len(to))
	}
	if !bytes.Equal(out, to) {
		t.Fatal("warm apply differs")
	}
}

// TestDeltaSizes reports what deltas of mnist-mlp come to, at the level
// used and at two others for comparison (figures in the -v log, no
// timing assert).
func TestDeltaSizes(t *testing.T) {
	for _, opt := range []string{"adam", "sgd"} {
		vs := trainVersions(t, 8, opt)
		for _, codec := range []string{protocol.SnapshotF32, protocol.SnapshotF16} {
			for _, k := range []int{1, 8} {
				from, to := body(codec, vs[0]), body(codec, vs[k])
				for _, level := range []int{flate.BestSpeed, flate.DefaultCompression, flate.BestCompression} {
					start := time.Now()
					d, err := protocol.EncodeDeltaLevel(nil, from, to, elemSize(codec), level)
					if err != nil {
						t.Fatal(err)
					}
					took := time.Since(start)
					got, err := protocol.ApplyDelta(nil, from, d, len(to))
					if err != nil || !bytes.Equal(got, to) {
						t.Fatalf("%s %s level %d: %v", opt, codec, level, err)
					}
					t.Logf("%s, %s body %d B, %d version(s), level %d: delta %d B (%.2fx smaller than the %s body, %.2fx than fp32), encoded in %v",
						opt, codec, len(to), k, level, len(d), float64(len(to))/float64(len(d)), codec, float64(4*len(vs[0]))/float64(len(d)), took.Round(time.Millisecond))
				}
			}
		}
	}
}

func TestHalvesRoundTrip(t *testing.T) {
	p := []float32{0, 1, -2.5, 1e-3, 70000, -70000, 65504}
	b := protocol.EncodeHalves([]byte{9}, p)
	if b[0] != 9 || len(b) != 1+2*len(p) {
		t.Fatalf("EncodeHalves did not append: % x", b)
	}
	got := make([]float32, len(p))
	if err := protocol.DecodeHalvesInto(got, b[1:]); err != nil {
		t.Fatal(err)
	}
	for i, v := range p {
		want := protocol.Float32FromHalf(protocol.HalfFromFloat32(protocol.ClampHalf(v)))
		if got[i] != want {
			t.Errorf("%d: %v came back %v, want %v", i, v, got[i], want)
		}
	}
	if got[4] != protocol.MaxHalf || got[5] != -protocol.MaxHalf {
		t.Errorf("out of range values were not clamped: %v", got)
	}
	if err := protocol.DecodeHalvesInto(got, b[2:]); err == nil {
		t.Error("a short body was accepted")
	}
	for _, bits := range []uint16{0x7c00, 0xfc00, 0x7e00} {
		bad := binary.LittleEndian.AppendUint16(nil, bits)
		if err := protocol.DecodeHalvesInto(make([]float32, 1), bad); err == nil {
			t.Errorf("half %#04x was accepted", bits)
		}
	}
}

func FuzzDecodeHalves(f *testing.F) {
	f.Add([]byte{0, 0x3c, 0, 0x7c})
	f.Add([]byte{1})
	f.Fuzz(func(t *testing.T, b []byte) {
		dst := make([]float32, len(b)/2)
		if err := protocol.DecodeHalvesInto(dst, b); err != nil {
			return
		}
		if !bytes.Equal(protocol.EncodeHalves(nil, dst), b) {
			// -0 and subnormals round-trip; only NaN/Inf are rejected.
			t.Fatalf("% x did not round-trip", b)
		}
	})
}

func FuzzApplyDelta(f *testing.F) {
	held := make([]byte, 64)
	for i := range held {
		held[i] = byte(i * 7)
	}
	to := append([]byte(nil), held...)
	to[5] ^= 1
	to[40] ^= 0x80
	xor, _ := protocol.EncodeDelta(nil, held, to, 4)
	full, _ := protocol.EncodeDelta(nil, nil, to, 4)
	half, _ := protocol.EncodeDelta(nil, held, to, 2)
	f.Add(xor)
	f.Add(full)
	f.Add(half)
	f.Add(deltaWith("CTDL", 1, 1, 4, 0, 64, deflated(f, make([]byte, 1<<16))))
	f.Add(xor[:len(xor)-1])
	f.Add([]byte("CTDL"))
	f.Fuzz(func(t *testing.T, delta []byte) {
		var dec protocol.DeltaDecoder
		out, err := dec.Apply(nil, held, delta, 1024)
		if err != nil {
			return
		}
		h, err := protocol.ParseDeltaHeader(delta)
		if err != nil || len(out) != h.Length || len(out) > 1024 {
			t.Fatalf("applied a delta with header %+v (%v) into %d bytes", h, err, len(out))
		}
		// Whatever it made, encoding from held to it and applying again
		// gives the same bytes.
		again, err := protocol.EncodeDelta(nil, heldOr(held, h), out, h.ElemSize)
		if err != nil {
			t.Fatal(err)
		}
		back, err := protocol.ApplyDelta(nil, heldOr(held, h), again, 1024)
		if err != nil || !bytes.Equal(back, out) {
			t.Fatalf("re-encoded delta: %v", err)
		}
	})
}

func heldOr(held []byte, h protocol.DeltaHeader) []byte {
	if h.Kind == protocol.DeltaXOR {
		return held
	}
	return nil
}

// BenchmarkDelta measures making and applying a one-version delta of
// mnist-mlp (what a coordinator does per lease, and a worker per
// snapshot).
func BenchmarkDelta(b *testing.B) {
	vs := trainVersions(b, 1, "adam")
	for _, codec := range []string{protocol.SnapshotF32, protocol.SnapshotF16} {
		from, to := body(codec, vs[0]), body(codec, vs[1])
		d, err := protocol.EncodeDelta(nil, from, to, elemSize(codec))
		if err != nil {
			b.Fatal(err)
		}
		b.Run("encode-"+codec, func(b *testing.B) {
			b.SetBytes(int64(len(to)))
			for range b.N {
				if _, err := protocol.EncodeDelta(nil, from, to, elemSize(codec)); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run("apply-"+codec, func(b *testing.B) {
			var dec protocol.DeltaDecoder
			var out []byte
			b.SetBytes(int64(len(to)))
			b.ReportAllocs()
			for range b.N {
				if out, err = dec.Apply(out, from, d, len(to)); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
