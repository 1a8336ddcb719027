// Package natsbox runs the NATS server a root coordinator embeds for its
// relays (serve --nats-listen): JetStream on, its data in a directory of
// its own, and two users whose passwords it makes once and keeps there,
// the root's (everything) and the relays' (publish under crowdtrain.up.,
// subscribe under crowdtrain.down. and their inboxes). Volunteers never
// speak NATS; only relays and the root do.
package natsbox

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/crowdtrain/crowdtrain/upstream"
)

// Box is a running embedded NATS server.
type Box struct {
	srv *server.Server
	// URL is its client URL, without credentials.
	URL string
	// Root is the root's credentials; RelayCredsFile holds the relays'.
	Root           Creds
	RelayCredsFile string
}

// Creds is a NATS user and password.
type Creds struct {
	User     string `json:"user"`
	Password string `json:"password"`
}

// String is the creds as a file holds them: "user:password".
func (c Creds) String() string { return c.User + ":" + c.Password }

// ReadCreds reads a file of "user:password" (a relay's --creds).
func ReadCreds(path string) (Creds, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return Creds{}, err
	}
	u, p, ok := strings.Cut(strings.TrimSpace(string(b)), ":")
	if !ok || u == "" || p == "" {
		return Creds{}, fmt.Errorf("%s: want one line user:password (the root writes it as relay.creds beside its database)", path)
	}
	return Creds{User: u, Password: p}, nil
}

// Options configure Start.
type Options struct {
	// Listen is HOST:PORT (port 0: any free one).
	Listen string
	// Dir keeps JetStream's data and the credentials.
	Dir string
	// MaxPayload bounds a message (0: NATS's default, 1 MB); aggregates
	// larger than it are split into parts.
	MaxPayload int32
	// MaxStore bounds JetStream's disk use (0: NATS's default, most of
	// the free disk); the aggregate stream has its own, lower limit.
	MaxStore int64
}

// Start runs the server and waits until it takes connections.
func Start(o Options) (*Box, error) {
	host, portStr, err := net.SplitHostPort(o.Listen)
	if err != nil {
		return nil, fmt.Errorf("--nats-listen %q: %w (want HOST:PORT)", o.Listen, err)
	}
	port, err := strconv.Atoi(portStr)
	if err != nil || port < 0 || port > 65535 {
		return nil, fmt.Errorf("--nats-listen %q: port %q is not a number in 0..65535", o.Listen, portStr)
	}
	if port == 0 {
		port = server.RANDOM_PORT
	}
	if err := os.MkdirAll(o.Dir, 0o700); err != nil {
		return nil, err
	}
	creds, err := loadCreds(filepath.Join(o.Dir, "credentials.json"))
	if err != nil {
		return nil, err
	}
	relayFile := filepath.Join(o.Dir, "relay.creds")
	if err := os.WriteFile(relayFile, []byte(creds.Relay.String()+"\n"), 0o600); err != nil {
		return nil, err
	}
	opts := &server.Options{
		ServerName: "crowdtrain-root",
		Host:       host, Port: port,
		JetStream: true, StoreDir: filepath.Join(o.Dir, "jetstream"),
		MaxPayload: o.MaxPayload, JetStreamMaxStore: o.MaxStore,
		NoSigs: true, NoLog: true,
		Users: []*server.User{
			{Username: creds.Root.User, Password: creds.Root.Password},
			{Username: creds.Relay.User, Password: creds.Relay.Password, Permissions: &server.Permissions{
				Publish:   &server.SubjectPermission{Allow: []string{"crowdtrain.up.>"}},
				Subscribe: &server.SubjectPermission{Allow: []string{"_INBOX.>", "crowdtrain.down.>"}},
			}},
		},
	}
	srv, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("nats server: %w", err)
	}
	srv.Start()
	// JetStream recovers its store first: after a crash, under load,
	// that takes a while.
	if !srv.ReadyForConnections(time.Minute) {
		srv.Shutdown()
		return nil, fmt.Errorf("nats server on %s did not start within a minute (is the port taken?)", o.Listen)
	}
	addr, ok := srv.Addr().(*net.TCPAddr)
	if !ok {
		srv.Shutdown()
		return nil, errors.New("nats server: no TCP address")
	}
	u := url.URL{Scheme: "nats", Host: net.JoinHostPort(addr.IP.String(), strconv.Itoa(addr.Port))}
	return &Box{srv: srv, URL: u.String(), Root: creds.Root, RelayCredsFile: relayFile}, nil
}

// Close shuts the server down and waits for it.
func (b *Box) Close() {
	b.srv.Shutdown()
	b.srv.WaitForShutdown()
}

type credsFile struct {
	Root  Creds `json:"root"`
	Relay Creds `json:"relay"`
}

// loadCreds reads the credentials made at the first start, or makes them:
// relays keep theirs across the root's restarts.
func loadCreds(path string) (credsFile, error) {
	var c credsFile
	b, err := os.ReadFile(path)
	if err == nil {
		if err := json.Unmarshal(b, &c); err != nil || c.Root.Password == "" || c.Relay.Password == "" {
			return c, fmt.Errorf("%s: not the credentials this server wrote (%v); move it away to make new ones", path, err)
		}
		return c, nil
	}
	if !errors.Is(err, os.ErrNotExist) {
		return c, err
	}
	c = credsFile{Root: Creds{upstream.RootUser, secret()}, Relay: Creds{upstream.RelayUser, secret()}}
	b, _ = json.Marshal(c)
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return c, err
	}
	return c, os.Rename(tmp, path)
}

func secret() string {
	b := make([]byte, 24)
	rand.Read(b)
	return hex.EncodeToString(b)
}
