package coordinator

import (
	"io"
	"log/slog"
	"testing"

	relaymsg "github.com/crowdtrain/crowdtrain/protocol/relay"
)

// bookOfRelays is an in-memory RelayCredentials.
type bookOfRelays map[string]bool

func (b bookOfRelays) IssueRelay(name, url string) ([]byte, error) { b[name] = true; return nil, nil }
func (b bookOfRelays) RevokeRelay(name string) (bool, error) {
	ok := b[name]
	delete(b, name)
	return ok, nil
}
func (b bookOfRelays) RelayRegistered(name string) (string, bool, bool) { return "", true, b[name] }
func (b bookOfRelays) SetRelay(name, url string, approved bool) (bool, error) {
	return b[name], nil
}

// What a revoked relay sent before its revocation is handled after it: a
// heartbeat checked just before, an aggregate its job's loop was
// applying, a part refused. None lists the relay again.
func TestRevokedRelayStaysOffTheLists(t *testing.T) {
	book := bookOfRelays{}
	s := &Server{cfg: Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}}
	g := &relayGate{s: s, o: RelayGateOptions{Credentials: book}, relays: map[string]*relayRecord{}, parts: map[string]*partialAggregate{}}
	s.gate.Store(g)

	book.IssueRelay("r1", "")
	g.seen(relaymsg.Status{Relay: "r1", URL: "ws://127.0.0.1:1/ws"}, true)
	if n := len(s.RelaysAdmin()); n != 1 {
		t.Fatalf("a relay with a credential that joined: %d records, want 1", n)
	}
	if _, ok, err := s.RevokeRelayCredential("r1"); !ok || err != nil {
		t.Fatalf("revoke: %v %v", ok, err)
	}
	g.seen(relaymsg.Status{Relay: "r1"}, false)
	g.record("r1", aggApplied, "", 100, 0, 7)
	g.record("r1", aggForged, "a forged sum", 100, 0, 7)
	g.refusePart("r1", relaymsg.SubjectAggregates+".r1", "a late part")
	if got := s.RelaysAdmin(); len(got) != 0 {
		t.Fatalf("after the revocation, messages it sent before listed it again: %+v", got)
	}
	if g.partsRefused != 1 {
		t.Errorf("the refused part was not counted: %d", g.partsRefused)
	}

	// A relay issued a credential again is listed once it is heard from.
	book.IssueRelay("r1", "")
	g.seen(relaymsg.Status{Relay: "r1", URL: "ws://127.0.0.1:1/ws"}, true)
	if n := len(s.RelaysAdmin()); n != 1 {
		t.Fatalf("issued again and joined: %d records, want 1", n)
	}
}
