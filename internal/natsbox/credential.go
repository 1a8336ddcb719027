package natsbox

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"github.com/crowdtrain/crowdtrain/protocol/relay"
)

// FormatRelayCredential is a relay credential file: who it is, the URL it
// was registered with, and its nkey seed in NATS's decorated form.
func FormatRelayCredential(name, url string, seed []byte) []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, "# crowdtrain relay credential for relay %s: keep it secret, it is the relay's identity.\n", name)
	fmt.Fprintf(&b, "# crowdtrain relay --upstream nats://ROOT:4222 --creds THIS-FILE\n")
	fmt.Fprintf(&b, "relay: %s\n", name)
	if url != "" {
		fmt.Fprintf(&b, "url: %s\n", url)
	}
	fmt.Fprintf(&b, "\n-----BEGIN USER NKEY SEED-----\n%s\n------END USER NKEY SEED------\n", seed)
	return b.Bytes()
}

// RelayCredential is a relay's credential file as read.
type RelayCredential struct {
	// Name and URL are the relay's, as the root registered it; Name is
	// empty in a file of another kind (a NATS .creds, user:password).
	Name, URL string
	// Options authenticate a NATS connection with it.
	Options []nats.Option
}

// ReadRelayCredential reads `crowdtrain relay --creds FILE`: a file
// relay-credential wrote (a relay name and an nkey seed), or, for an
// external NATS server, a NATS .creds file (a user JWT and its seed) or
// one line of user:password; name (--name) is needed for those.
func ReadRelayCredential(path, name string) (RelayCredential, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return RelayCredential{}, err
	}
	var c RelayCredential
	sc := bufio.NewScanner(bytes.NewReader(raw))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if v, ok := strings.CutPrefix(line, "relay:"); ok {
			c.Name = strings.TrimSpace(v)
		} else if v, ok := strings.CutPrefix(line, "url:"); ok {
			c.URL = strings.TrimSpace(v)
		}
	}
	switch {
	case c.Name != "" && name != "" && name != c.Name:
		return c, fmt.Errorf("%s is relay %s's credential, not %s's: drop --name or give the right file", path, c.Name, name)
	case c.Name == "":
		c.Name = name
	}
	if !relay.ValidName(c.Name) {
		return c, fmt.Errorf("%s names no relay: a file crowdtrain relay-credential wrote does; with another kind of file give --name", path)
	}
	switch {
	case bytes.Contains(raw, []byte("BEGIN NATS USER JWT")):
		c.Options = []nats.Option{nats.UserCredentials(path)}
	case bytes.Contains(raw, []byte("NKEY SEED")):
		kp, err := nkeys.ParseDecoratedNKey(raw)
		if err != nil {
			return c, fmt.Errorf("%s: its nkey seed: %v", path, err)
		}
		pub, err := kp.PublicKey()
		if err != nil {
			return c, fmt.Errorf("%s: its nkey seed: %v", path, err)
		}
		c.Options = []nats.Option{nats.Nkey(pub, kp.Sign)}
	default:
		u, p, ok := strings.Cut(strings.TrimSpace(string(raw)), ":")
		if !ok || u == "" || p == "" || strings.Contains(p, "\n") {
			return c, fmt.Errorf("%s: not a relay credential (crowdtrain relay-credential NAME --out FILE writes one), a NATS .creds file, or one line of user:password", path)
		}
		c.Options = []nats.Option{nats.UserInfo(u, p)}
	}
	// Replies come under the relay's own inbox prefix: its permissions
	// allow it no other.
	c.Options = append(c.Options, nats.CustomInboxPrefix(relay.InboxPrefix(c.Name)))
	return c, nil
}
