package protocol_test

import (
	"encoding/hex"
	"os"
	"strings"
	"testing"

	"github.com/crowdtrain/crowdtrain/protocol"
)

// docs/PROTOCOL.md shows worked frames in hex for people writing workers
// in other languages; they must be exactly what this package encodes.
func TestProtocolDocFramesMatchEncode(t *testing.T) {
	doc, err := os.ReadFile("../docs/PROTOCOL.md")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(doc), "# Worker protocol, version 3\n") || protocol.Version != 3 {
		t.Errorf("docs/PROTOCOL.md's title must name protocol version %d", protocol.Version)
	}
	for _, m := range []protocol.Message{
		&protocol.Start{LeaseID: 7},
		&protocol.Result{LeaseID: 7, JobID: "j1", BaseVersion: 3, Codec: protocol.CodecF32, Update: protocol.Floats{1, -0.5},
			Examples: 2, LossSum: 1.5, Correct: 1, ComputeMs: 0.25},
	} {
		b, err := protocol.Encode(m)
		if err != nil {
			t.Fatal(err)
		}
		want := hex.EncodeToString(b)
		if !strings.Contains(string(doc), "\n"+want+"\n") {
			t.Errorf("docs/PROTOCOL.md does not show the %s frame as encoded; it is\n%s", m.MessageType(), want)
		}
		// The frame decodes back to the message it documents.
		if _, err := protocol.Decode(b, 1<<20); err != nil {
			t.Errorf("%s: %v", m.MessageType(), err)
		}
	}
}
