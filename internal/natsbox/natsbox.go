// Package natsbox runs the NATS server a root coordinator embeds for its
// relays (serve --nats-listen): JetStream on, its data in a directory of
// its own, the root's user (everything; a password it makes once and
// keeps there), and one nkey user per relay, issued and revoked at run
// time (IssueRelay, RevokeRelay), whose permissions bind it to its own
// subjects and inbox (relay.RelayPublish, RelaySubscribe). Volunteers
// never speak NATS; only relays and the root do.
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
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"github.com/crowdtrain/crowdtrain/protocol/relay"
)

// Box is a running embedded NATS server.
type Box struct {
	srv *server.Server
	// URL is its client URL, without credentials.
	URL string
	// Root is the root's credentials.
	Root Creds

	mu     sync.Mutex
	opts   server.Options // as started; reloaded with the relays' keys
	path   string         // relays.json
	relays map[string]relayKey
}

// relayKey is an issued relay credential as the server keeps it: the
// public key only, and the URL it was registered with.
type relayKey struct {
	PublicKey string    `json:"public_key"`
	URL       string    `json:"url,omitempty"`
	Issued    time.Time `json:"issued"`
	// Approved: the operator vouches for URL (the root lists the relay).
	Approved bool `json:"approved,omitempty"`
}

// Creds is a NATS user and password.
type Creds struct {
	User     string `json:"user"`
	Password string `json:"password"`
}

// String is the creds as a file holds them: "user:password".
func (c Creds) String() string { return c.User + ":" + c.Password }

// ReadCreds reads a file of "user:password" (the root's --nats-creds).
func ReadCreds(path string) (Creds, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return Creds{}, err
	}
	u, p, ok := strings.Cut(strings.TrimSpace(string(b)), ":")
	if !ok || u == "" || p == "" {
		return Creds{}, fmt.Errorf("%s: want one line user:password", path)
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
	// TLSCert and TLSKey, PEM files, make the server take TLS connections
	// only (the root's own connects in process, InProcess).
	TLSCert, TLSKey string
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
	// The shared relay credential of earlier versions is no more.
	os.Remove(filepath.Join(o.Dir, "relay.creds"))
	b := &Box{Root: creds.Root, path: filepath.Join(o.Dir, "relays.json"), relays: map[string]relayKey{}}
	if raw, err := os.ReadFile(b.path); err == nil {
		if err := json.Unmarshal(raw, &b.relays); err != nil {
			return nil, fmt.Errorf("%s: %v (move it away: every relay then needs a new credential)", b.path, err)
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	opts := &server.Options{
		ServerName: "crowdtrain-root",
		Host:       host, Port: port,
		JetStream: true, StoreDir: filepath.Join(o.Dir, "jetstream"),
		MaxPayload: o.MaxPayload, JetStreamMaxStore: o.MaxStore,
		NoSigs: true, NoLog: true,
		Users: []*server.User{{Username: creds.Root.User, Password: creds.Root.Password}},
	}
	if o.TLSCert != "" || o.TLSKey != "" {
		if o.TLSCert == "" || o.TLSKey == "" {
			return nil, errors.New("--nats-tls-cert and --nats-tls-key go together")
		}
		tc, err := server.GenTLSConfig(&server.TLSConfigOpts{CertFile: o.TLSCert, KeyFile: o.TLSKey})
		if err != nil {
			return nil, fmt.Errorf("NATS TLS: %w", err)
		}
		opts.TLS, opts.TLSConfig, opts.TLSTimeout = true, tc, 5
	}
	b.opts = *opts
	opts.Nkeys = b.nkeys()
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
	scheme := "nats"
	if o.TLSCert != "" {
		scheme = "tls"
	}
	u := url.URL{Scheme: scheme, Host: net.JoinHostPort(addr.IP.String(), strconv.Itoa(addr.Port))}
	b.srv, b.URL = srv, u.String()
	b.opts.Port = addr.Port // a reload keeps the port it has
	return b, nil
}

// nkeys are the relays' users (b.mu held, or before the start).
func (b *Box) nkeys() []*server.NkeyUser {
	var out []*server.NkeyUser
	for name, k := range b.relays {
		out = append(out, &server.NkeyUser{Nkey: k.PublicKey, Permissions: &server.Permissions{
			Publish:   &server.SubjectPermission{Allow: relay.RelayPublish(name)},
			Subscribe: &server.SubjectPermission{Allow: relay.RelaySubscribe(name)},
		}})
	}
	return out
}

// apply saves the relays' keys and reloads the server with them: a relay
// whose key is gone is disconnected at once (b.mu held).
func (b *Box) apply() error {
	raw, _ := json.MarshalIndent(b.relays, "", "  ")
	tmp := b.path + ".tmp"
	if err := os.WriteFile(tmp, raw, 0o600); err != nil {
		return err
	}
	if err := os.Rename(tmp, b.path); err != nil {
		return err
	}
	o := b.opts
	o.Nkeys = b.nkeys()
	if err := b.srv.ReloadOptions(&o); err != nil {
		return fmt.Errorf("nats server: reloading the relays' keys: %w", err)
	}
	return nil
}

// IssueRelay makes relay name a new credential (a new nkey; one issued
// before stops working at once) registered with url, its volunteers'
// websocket URL ("" to take the one it first joins with), and returns the
// credential file's text.
func (b *Box) IssueRelay(name, url string) ([]byte, error) {
	if !relay.ValidName(name) {
		return nil, fmt.Errorf("relay name %q: use letters, digits, - and _ (up to 64)", name)
	}
	kp, err := nkeys.CreateUser()
	if err != nil {
		return nil, err
	}
	seed, _ := kp.Seed()
	pub, _ := kp.PublicKey()
	b.mu.Lock()
	defer b.mu.Unlock()
	old, had := b.relays[name]
	b.relays[name] = relayKey{PublicKey: pub, URL: url, Issued: time.Now().UTC()}
	if err := b.apply(); err != nil {
		if had {
			b.relays[name] = old
		} else {
			delete(b.relays, name)
		}
		return nil, err
	}
	return FormatRelayCredential(name, url, seed), nil
}

// RevokeRelay removes relay name's credential: its connections are closed
// at once and it cannot connect again. It reports whether there was one.
func (b *Box) RevokeRelay(name string) (bool, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	old, ok := b.relays[name]
	if !ok {
		return false, nil
	}
	delete(b.relays, name)
	if err := b.apply(); err != nil {
		b.relays[name] = old
		return false, err
	}
	return true, nil
}

// RelayRegistered reports whether relay name holds a credential, the URL
// it was registered with ("" for none yet), and whether the operator
// approved it.
func (b *Box) RelayRegistered(name string) (url string, approved, ok bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	k, ok := b.relays[name]
	return k.URL, k.Approved, ok
}

// SetRelay records relay name's URL and approval, kept across restarts;
// false if it holds no credential.
func (b *Box) SetRelay(name, url string, approved bool) (bool, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	k, ok := b.relays[name]
	if !ok {
		return false, nil
	}
	if k.URL == url && k.Approved == approved {
		return true, nil
	}
	old := k
	k.URL, k.Approved = url, approved
	b.relays[name] = k
	raw, _ := json.MarshalIndent(b.relays, "", "  ")
	tmp := b.path + ".tmp"
	err := os.WriteFile(tmp, raw, 0o600)
	if err == nil {
		err = os.Rename(tmp, b.path)
	}
	if err != nil {
		b.relays[name] = old
		return false, err
	}
	return true, nil
}

// InProcess connects a client to the server within the process, with no
// socket and no TLS: the root's own connections. Give it InProcessURL.
func (b *Box) InProcess() nats.Option { return nats.InProcessServer(b.srv) }

// InProcessURL is the URL to connect with InProcess (a tls:// URL would
// ask for TLS the in-process connection does without).
func (b *Box) InProcessURL() string {
	return "nats://" + strings.TrimPrefix(strings.TrimPrefix(b.URL, "tls://"), "nats://")
}

// Close shuts the server down and waits for it.
func (b *Box) Close() {
	b.srv.Shutdown()
	b.srv.WaitForShutdown()
}

type credsFile struct {
	Root Creds `json:"root"`
}

// loadCreds reads the credentials made at the first start, or makes them:
// relays keep theirs across the root's restarts.
func loadCreds(path string) (credsFile, error) {
	var c credsFile
	b, err := os.ReadFile(path)
	if err == nil {
		if err := json.Unmarshal(b, &c); err != nil || c.Root.Password == "" {
			return c, fmt.Errorf("%s: not the credentials this server wrote (%v); move it away to make new ones", path, err)
		}
		return c, nil
	}
	if !errors.Is(err, os.ErrNotExist) {
		return c, err
	}
	c = credsFile{Root: Creds{relay.RootUser, secret()}}
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
