package coordinator

import (
	"bytes"
	"errors"
	"io"
	"testing"

	"github.com/crowdtrain/crowdtrain/protocol"
)

// twoChunks hands b over in two reads split at i, the way a frame arrives
// in pieces from the network.
type twoChunks struct {
	b []byte
	i int
}

func (r *twoChunks) Read(p []byte) (int, error) {
	if len(r.b) == 0 {
		return 0, io.EOF
	}
	n := len(r.b)
	if r.i > 0 && r.i < n {
		n = r.i
	}
	n = copy(p, r.b[:n])
	r.b, r.i = r.b[n:], r.i-n
	return n, nil
}

// readInto returns exactly the frame, however it is split, when it fits
// its type's limit, and a too-big error naming the type otherwise; a
// reused buffer changes nothing.
func FuzzReadInto(f *testing.F) {
	for _, m := range []protocol.Message{&protocol.Want{N: 1}, &protocol.Bye{Reason: string(bytes.Repeat([]byte{'x'}, 300))},
		&protocol.Result{LeaseID: 1, JobID: "j", Update: make(protocol.Floats, 100), Examples: 1}} {
		b, _ := protocol.Encode(m)
		f.Add(b, 0)
		f.Add(b, 5)
		f.Add(b, 40)
	}
	f.Add([]byte{}, 0)
	s := &Server{cfg: Config{MaxControlBytes: 256}}
	reused := &decodeBuf{frame: make([]byte, 0, 1024)}
	f.Fuzz(func(t *testing.T, b []byte, split int) {
		for _, buf := range []*decodeBuf{new(decodeBuf), reused} {
			err := s.readInto(&twoChunks{b: b, i: split}, 0, buf)
			var tooBig *frameTooBigError
			switch {
			case len(b) > 256:
				if !errors.As(err, &tooBig) || tooBig.limit != 256 {
					t.Fatalf("%d-byte frame over the 256-byte limit: %v", len(b), err)
				}
				if typ, _ := protocol.PeekType(b[:peekBytes]); tooBig.typ != typ {
					t.Fatalf("too-big error names type %q, the frame is %q", tooBig.typ, typ)
				}
			case err != nil:
				t.Fatalf("%d-byte frame: %v", len(b), err)
			case !bytes.Equal(buf.frame, b):
				t.Fatalf("read % x, want % x", buf.frame, b)
			}
		}
	})
}
