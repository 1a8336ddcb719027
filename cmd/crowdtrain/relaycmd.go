//go:build cgo

package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/crowdtrain/crowdtrain/coordinator"
	"github.com/crowdtrain/crowdtrain/dataset"
	"github.com/crowdtrain/crowdtrain/internal/natsbox"
	"github.com/crowdtrain/crowdtrain/internal/tlsfiles"
	relaymsg "github.com/crowdtrain/crowdtrain/protocol/relay"
)

// relayFlags are serve's flags for relays (docs/RELAYS.md).
type relayFlags struct {
	listen, url, creds string
	dir                string // the embedded server's, beside --db
	streamBytes        int64
	approval           string
	tlsCert, tlsKey    string
}

func (f *relayFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.listen, "nats-listen", "", "`HOST:PORT` of an embedded NATS server with JetStream for relays (its data and the relays' credentials go beside --db)")
	fs.StringVar(&f.url, "nats", "", "`URL` of an external NATS server with JetStream for relays, instead of --nats-listen")
	fs.StringVar(&f.creds, "nats-creds", "", "`FILE` of user:password for --nats (or put them in its URL)")
	fs.StringVar(&f.tlsCert, "nats-tls-cert", "", "PEM certificate `FILE`: the embedded NATS server takes TLS connections only (relays: --upstream tls://HOST:PORT, and --nats-ca for a certificate of your own CA)")
	fs.StringVar(&f.tlsKey, "nats-tls-key", "", "PEM private key `FILE` of --nats-tls-cert")
	fs.StringVar(&f.approval, "relay-approval", "", "`MODE`: auto (a relay is listed to volunteers once it joins with the URL it was registered with) or manual (once an operator approved it on the admin page); default manual with --join token, else auto")
	fs.Int64Var(&f.streamBytes, "relay-stream-bytes", coordinator.DefaultRelayStreamBytes, "`BYTES` the relays' aggregate stream may hold on disk; each relay a quarter of it")
}

func (f *relayFlags) check(db, join string) error {
	f.dir = db + ".nats"
	if f.approval == "" {
		f.approval = coordinator.RelayApprovalAuto
		if join == coordinator.JoinToken {
			f.approval = coordinator.RelayApprovalManual
		}
	}
	switch {
	case f.approval != coordinator.RelayApprovalAuto && f.approval != coordinator.RelayApprovalManual:
		return usagef("--relay-approval %q: want auto or manual", f.approval)
	case f.listen != "" && f.url != "":
		return usagef("--nats-listen runs a NATS server, --nats uses one: give one of them")
	case f.listen != "" && db == "":
		return usagef("--nats-listen keeps JetStream's data beside --db: give a --db")
	case f.creds != "" && f.url == "":
		return usagef("--nats-creds goes with --nats")
	case (f.tlsCert != "" || f.tlsKey != "") && f.listen == "":
		return usagef("--nats-tls-cert and --nats-tls-key are for the embedded server (--nats-listen); an external one has its own TLS")
	case (f.tlsCert == "") != (f.tlsKey == ""):
		return usagef("--nats-tls-cert and --nats-tls-key go together")
	case f.streamBytes < 16<<20:
		return usagef("--relay-stream-bytes %d: at least 16 MiB (16777216), room for a few aggregates", f.streamBytes)
	}
	return nil
}

// serve starts the NATS side; the function it returns stops it (after
// the server is closed: the last checkpoints acknowledge aggregates).
func (f *relayFlags) serve(ctx context.Context, srv *coordinator.Server, base string, public []string, logger *log.Logger) (func(), error) {
	if f.listen == "" && f.url == "" {
		return func() {}, nil
	}
	var box *natsbox.Box
	url, opts := f.url, []nats.Option{nats.Name("crowdtrain root"), nats.MaxReconnects(-1)}
	if f.listen != "" {
		var err error
		// JetStream's own bound, beyond the stream's: room for it twice.
		if box, err = natsbox.Start(natsbox.Options{Listen: f.listen, Dir: f.dir, MaxStore: 2*f.streamBytes + 64<<20,
			TLSCert: f.tlsCert, TLSKey: f.tlsKey}); err != nil {
			return nil, err
		}
		url = box.InProcessURL()
		opts = append(opts, nats.UserInfo(box.Root.User, box.Root.Password), box.InProcess())
	} else if f.creds != "" {
		c, err := natsbox.ReadCreds(f.creds)
		if err != nil {
			return nil, usagef("--nats-creds: %v", err)
		}
		opts = append(opts, nats.UserInfo(c.User, c.Password))
	}
	stop := func() {
		if box != nil {
			box.Close()
		}
	}
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		stop()
		return nil, fmt.Errorf("connecting to NATS at %s: %w", url, err)
	}
	// Aggregates come on a connection of their own: joins and leases
	// never wait behind a flood of parts.
	bulk, err := nats.Connect(url, append(opts, nats.Name("crowdtrain root (aggregates)"))...)
	if err != nil {
		nc.Close()
		stop()
		return nil, fmt.Errorf("connecting to NATS at %s: %w", url, err)
	}
	rootURL := base
	if len(public) > 0 {
		rootURL = public[0]
	}
	o := coordinator.RelayGateOptions{RootURL: rootURL, Bulk: bulk, StreamMaxBytes: f.streamBytes, Approval: f.approval}
	if box != nil {
		o.Credentials = box
	}
	if err := srv.ServeRelays(ctx, nc, o); err != nil {
		bulk.Close()
		nc.Close()
		stop()
		return nil, err
	}
	if box != nil {
		logger.Printf("relays: NATS with JetStream on %s; issue each relay its credential with: crowdtrain relay-credential NAME --url wss://RELAY-HOST/ws --out NAME.creds; it joins with: crowdtrain relay --upstream %s --creds NAME.creds --addr HOST:PORT",
			box.URL, box.URL)
	} else {
		logger.Printf("relays: through NATS at %s", url)
	}
	return func() { bulk.Close(); nc.Close(); stop() }, nil
}

// relayOptions are relay's settings, as its flags set them.
type relayOptions struct {
	up, addr, credsFile, name, publicURL, dataDir, caFile, natsCA string
	tls                                                           tlsFlags  // servetls.go: this relay's own HTTPS and WSS
	log                                                           *logFlags // logflags.go: --log-format, --log-level
}

// newRelayFlags builds relay's flag set, grouped for its help; parsing it
// starts nothing.
func newRelayFlags() (*cliFlags, *relayOptions) {
	o := &relayOptions{}
	fs := newCLIFlags("relay", "relay --upstream nats://HOST:PORT --creds FILE [flags]   (every flag also as CROWDTRAIN_<FLAG> or in --config FILE)")
	fs.StringVar(&o.up, "upstream", "", "the root's NATS `URL` (nats://HOST:PORT), as its serve --nats-listen printed")
	fs.StringVar(&o.credsFile, "creds", "", "`FILE`: this relay's credential, from `crowdtrain relay-credential NAME` (it names the relay)")
	fs.StringVar(&o.name, "name", "", "this relay's `NAME`, for a --creds file that does not name it (an external NATS server's)")
	fs.StringVar(&o.caFile, "ca-file", "", "PEM `FILE` of a private CA (or a self-signed certificate) to trust for the root's https:// URL, where the relay fetches snapshots, beside the system's CAs")
	fs.StringVar(&o.natsCA, "nats-ca", "", "PEM `FILE` of the CA (or the self-signed certificate) of the root's NATS TLS certificate (serve --nats-tls-cert)")
	fs.group("Root")
	fs.StringVar(&o.addr, "addr", "127.0.0.1:8081", "`HOST:PORT` volunteers connect to")
	fs.StringVar(&o.publicURL, "public-url", "", "the websocket `URL` volunteers reach this relay at (default: the URL its credential was issued for, else ws://ADDR/ws)")
	o.tls.register(fs.FlagSet)
	fs.group("Network and TLS")
	fs.StringVar(&o.dataDir, "data", "", "`DIR` of the jobs' data, as the root's serve --data")
	fs.group("Jobs")
	o.log = addLogFlags(fs.FlagSet)
	fs.group("Logging")
	fs.addConfigFlags(func() *cliFlags { f, _ := newRelayFlags(); return f })
	fs.group("Configuration")
	return fs, o
}

// relay runs `crowdtrain relay`.
func relay(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs, o := newRelayFlags()
	set, err := fs.parseLayered(ctx, args, "", stdout, stderr)
	if err != nil {
		return err
	}
	return set.locate(o.run(ctx, stderr))
}

// run checks the settings and runs the relay until ctx ends.
func (o *relayOptions) run(ctx context.Context, stderr io.Writer) error {
	tlsf := &o.tls
	if o.up == "" {
		return usagef("--upstream is required: the root's NATS URL (crowdtrain serve --nats-listen HOST:PORT prints it)")
	}
	if o.credsFile == "" {
		return usagef("--creds is required: the relay's credential, which the root's operator makes with crowdtrain relay-credential NAME --out FILE")
	}
	cred, err := natsbox.ReadRelayCredential(o.credsFile, o.name)
	if err != nil {
		return usagef("--creds: %v", err)
	}
	o.name = cred.Name
	sl, err := o.log.logger(stderr)
	if err != nil {
		return err
	}
	// Every line of this relay names it, as the root's lines about it do.
	sl = sl.With("relay", o.name)
	logger := stdLogger(sl)
	if err := tlsf.load(logger); err != nil {
		return err
	}
	rootHTTP := &http.Client{Timeout: time.Minute}
	if o.caFile != "" {
		cfg, err := tlsfiles.ClientConfig("--ca-file", o.caFile)
		if err != nil {
			return usagef("%v", err)
		}
		t := http.DefaultTransport.(*http.Transport).Clone()
		t.TLSClientConfig = cfg
		rootHTTP.Transport = t
	}
	ln, err := net.Listen("tcp", o.addr)
	if err != nil {
		return fmt.Errorf("cannot listen on %s: %w (choose another --addr)", o.addr, err)
	}
	defer ln.Close()
	if o.publicURL == "" {
		o.publicURL = cred.URL // the one the root registered
	}
	if o.publicURL == "" {
		o.publicURL = tlsf.wsScheme() + "://" + loopbackAddr(ln.Addr()) + "/ws"
	}
	closed := make(chan error, 1)
	var (
		connErrMu   sync.Mutex
		connErrLast string
		connErrAt   time.Time
	)
	cutOff := func(err error) error {
		return fmt.Errorf("relay %s: the root's NATS server closed the connection (%v): if it says authorization, this relay's credential was revoked or replaced; the root's operator issues a new one with crowdtrain relay-credential %s", o.name, err, o.name)
	}
	if o.natsCA != "" {
		cred.Options = append(cred.Options, nats.RootCAs(o.natsCA))
	}
	opts := append([]nats.Option{nats.Name("crowdtrain relay " + o.name), nats.MaxReconnects(-1), nats.ReconnectWait(500 * time.Millisecond),
		nats.RetryOnFailedConnect(true),
		// A revoked credential shows here: "authorization violation".
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil {
				logger.Printf("relay %s: the NATS connection to the root was lost: %v", o.name, err)
			}
		}),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			logger.Printf("relay %s: NATS: %v", o.name, err)
		}),
		// Why connecting fails (a TLS certificate not trusted, a refused
		// credential), when it changes or every half minute.
		nats.ReconnectErrHandler(func(_ *nats.Conn, err error) {
			connErrMu.Lock()
			defer connErrMu.Unlock()
			if msg := fmt.Sprint(err); msg != connErrLast || time.Since(connErrAt) > 30*time.Second {
				connErrLast, connErrAt = msg, time.Now()
				logger.Printf("relay %s: connecting to the root's NATS server: %v (trying again)", o.name, err)
			}
		}),
		// nats.go gives up reconnecting when the server refuses the
		// credential: the relay stops too, saying why.
		nats.ClosedHandler(func(c *nats.Conn) {
			select {
			case closed <- c.LastError():
			default:
			}
		})}, cred.Options...)
	nc, err := nats.Connect(o.up, opts...)
	if err != nil {
		return fmt.Errorf("connecting to %s: %w", o.up, err)
	}
	defer nc.Close()
	srv, err := coordinator.New(coordinator.Config{
		LoadData: func(d dataset.Spec, opts dataset.Options) (*dataset.Set, *dataset.Set, error) {
			opts.MNISTDir = o.dataDir
			if d.ReadsTextFiles() && o.dataDir != "" {
				d.Path = o.dataDir
			}
			return dataset.Load(d, opts)
		},
		Logger: sl, AdminToken: coordinator.NewAdminToken(), Join: coordinator.JoinOpen,
		MaxConnsPerAddress: coordinator.DefaultMaxConnsPerAddress,
	})
	if err != nil {
		return err
	}
	defer srv.Close()
	// The root may not be up yet, or may be restarting: keep asking.
	for wait := 500 * time.Millisecond; ; wait = min(2*wait, 5*time.Second) {
		err = srv.RunRelay(ctx, coordinator.RelayOptions{Name: o.name, URL: o.publicURL, NATS: nc, HTTP: rootHTTP})
		if err == nil {
			break
		}
		if strings.Contains(err.Error(), "refused the join") || strings.Contains(err.Error(), "relay name") {
			return usagef("%v", err)
		}
		logger.Printf("relay %s: %v; trying again in %v", o.name, err, wait)
		select {
		case <-ctx.Done():
			return nil
		case err := <-closed:
			return cutOff(err)
		case <-time.After(wait):
		}
	}
	hs := &http.Server{Handler: srv.Handler(), ConnState: srv.ConnState, ReadHeaderTimeout: 10 * time.Second}
	serveErr := make(chan error, 1)
	tctx, stopTLS := context.WithCancel(ctx)
	defer stopTLS()
	go func(ln net.Listener) { serveErr <- hs.Serve(ln) }(tlsf.wrap(tctx, ln, logger))
	logger.Printf("relay %s listening on %s; workers join with: crowdtrain work --coordinator %s", o.name, ln.Addr(), o.publicURL)
	var stopErr error
	select {
	case <-ctx.Done():
	case err := <-closed:
		stopErr = cutOff(err)
		logger.Print(stopErr)
	case err := <-serveErr:
		if !errors.Is(err, http.ErrServerClosed) {
			return fmt.Errorf("http server: %w", err)
		}
	}
	logger.Printf("relay %s: shutting down", o.name)
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	hs.Shutdown(sctx)
	if err := srv.Close(); err != nil {
		return err
	}
	return stopErr
}

// relayCredential runs `crowdtrain relay-credential NAME [--out FILE]` and
// `crowdtrain relay-credential --revoke NAME`: the root's operator issues
// or revokes a relay's own NATS credential, through the admin API.
func relayCredential(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newCLIFlags("relay-credential", "relay-credential NAME [--out FILE] [--url wss://HOST/ws] | --revoke NAME   [--coordinator URL] [--token T | --token-file FILE]")
	coord, token := apiFlags(fs.FlagSet, "")
	out := fs.String("out", "", "`FILE` to write the credential to, mode 0600 (default: standard output)")
	url := fs.String("url", "", "the websocket `URL` the relay's volunteers connect to (ws:// or wss://); it may advertise that one alone (default: the first it joins with)")
	revoke := fs.Bool("revoke", false, "revoke NAME's credential: it is disconnected at once and its leases are queued again")
	// NAME may come before or after the flags.
	var names []string
	if err := fs.parseMixed(ctx, args, stderr, &names); err != nil {
		return err
	}
	if len(names) != 1 {
		return usagef("relay-credential takes one relay NAME (got %d): crowdtrain relay-credential NAME [--out FILE], or --revoke NAME", len(names))
	}
	if *token == "" {
		return needsToken("issuing or revoking a relay credential")
	}
	c := apiClient{base: apiBase(*coord), token: *token}
	name := names[0]
	if !relaymsg.ValidName(name) {
		return usagef("relay name %q: use letters, digits, - and _ (up to 64)", name)
	}
	if *revoke {
		if *out != "" || *url != "" {
			return usagef("--revoke takes no --out or --url")
		}
		var reply coordinator.RelayRevokeReply
		if err := c.do(ctx, http.MethodDelete, "/api/v1/relays/"+name+"/credential", nil, &reply); err != nil {
			return badRequestIsUsage(err)
		}
		fmt.Fprintf(stdout, "relay %s's credential is revoked: it is disconnected and the %d leases it held are queued again\n", name, reply.LeasesRequeued)
		return nil
	}
	var reply coordinator.RelayCredentialReply
	if err := c.do(ctx, http.MethodPost, "/api/v1/relays/credentials", coordinator.RelayCredentialRequest{Name: name, URL: *url}, &reply); err != nil {
		return badRequestIsUsage(err)
	}
	if *out == "" {
		_, err := io.WriteString(stdout, reply.Credential)
		return err
	}
	f, err := os.OpenFile(*out, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	if _, err := io.WriteString(f, reply.Credential); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	fmt.Fprintf(stderr, "wrote relay %s's credential to %s; the relay runs with: crowdtrain relay --upstream nats://ROOT:PORT --creds %s\n", name, *out, *out)
	return nil
}
