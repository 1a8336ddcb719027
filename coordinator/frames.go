package coordinator

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/coder/websocket"

	"github.com/crowdtrain/crowdtrain/protocol"
)

// decodeBuf is what reading and decoding one frame needs: the frame's
// bytes and, for a result, its update. Buffers are reused across
// connections through a decodePool, so a result costs no allocation once
// the pool is warm, and a connection holds none between messages.
type decodeBuf struct {
	frame  []byte
	dec    protocol.Decoder
	update []float32 // a packed update, decoded (updatecodec.go)
	// recv is how long the frame took to arrive: from its first bytes
	// (ws.Reader returning) to its last. For a result it is the worker's
	// upload time, which its ack reports back as recv_ms.
	recv time.Duration
}

// decodePool keeps at most cap(free) buffers between uses. A get when
// none is free allocates rather than waits, so a slow upload never holds
// up another connection; a put when the pool is full drops the buffer.
type decodePool struct {
	free chan *decodeBuf
}

func newDecodePool(n int) *decodePool {
	return &decodePool{free: make(chan *decodeBuf, n)}
}

func (p *decodePool) get() *decodeBuf {
	select {
	case b := <-p.free:
		return b
	default:
		return new(decodeBuf)
	}
}

func (p *decodePool) put(b *decodeBuf) {
	b.frame, b.recv = b.frame[:0], 0
	select {
	case p.free <- b:
	default:
	}
}

// peekBytes is how much of a frame is read before its type is known: the
// longest type name fits with room to spare.
const peekBytes = 32

// frameTooBigError is a frame over its type's size limit.
type frameTooBigError struct {
	typ   protocol.Type
	limit int64
}

func (e *frameTooBigError) Error() string {
	what := "a " + string(e.typ) + " message"
	if e.typ == "" {
		what = "a message of unknown type"
	}
	return fmt.Sprintf("%s is limited to %d bytes: send smaller messages", what, e.limit)
}

// errTextFrame is a text frame: this protocol is binary msgpack only.
var errTextFrame = errors.New("messages are binary msgpack frames, not text")

// frameLimit is the size limit for a frame of type t on a connection to
// job (nil before the welcome): only a result may carry a full update.
func (s *Server) frameLimit(resultLimit int64, t protocol.Type) int64 {
	if t == protocol.TypeResult && resultLimit > 0 {
		return resultLimit
	}
	return s.cfg.MaxControlBytes
}

// readFrame waits for the next message and reads it, if it is binary, into
// a buffer from the pool, which the caller puts back. The buffer is taken
// only once a message has begun: a connection waiting for its next
// message holds none. The type is peeked from the first bytes so that its
// own size limit applies while the rest arrives: a hello or want can never
// make the coordinator buffer an update's worth of bytes. Errors:
// errTextFrame, *frameTooBigError, or the connection's own (it closed or
// broke).
func (s *Server) readFrame(ctx context.Context, ws *websocket.Conn, resultLimit int64) (*decodeBuf, error) {
	typ, r, err := ws.Reader(ctx)
	if err != nil {
		return nil, err
	}
	first := time.Now() // the frame's header and first bytes are in
	if typ != websocket.MessageBinary {
		return nil, errTextFrame
	}
	buf := s.decodeBufs.get()
	if err := s.readInto(r, resultLimit, buf); err != nil {
		s.decodeBufs.put(buf)
		return nil, err
	}
	buf.recv = time.Since(first)
	return buf, nil
}

func (s *Server) readInto(r io.Reader, resultLimit int64, buf *decodeBuf) error {
	var head [peekBytes]byte
	n, err := io.ReadFull(r, head[:])
	switch {
	case err == io.EOF || err == io.ErrUnexpectedEOF:
		buf.frame = append(buf.frame[:0], head[:n]...)
		return nil // the whole message was shorter than the peek
	case err != nil:
		return err
	}
	t, _ := protocol.PeekType(head[:])
	limit := s.frameLimit(resultLimit, t)
	buf.frame = append(buf.frame[:0], head[:]...)
	for {
		if len(buf.frame) == cap(buf.frame) {
			buf.frame = append(buf.frame, 0)[:len(buf.frame)] // grow
		}
		room := min(cap(buf.frame), int(limit)+1)
		n, err := r.Read(buf.frame[len(buf.frame):room])
		buf.frame = buf.frame[:len(buf.frame)+n]
		if int64(len(buf.frame)) > limit {
			return &frameTooBigError{typ: t, limit: limit}
		}
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
	}
}
