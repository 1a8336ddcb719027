package attack

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"time"

	"github.com/coder/websocket"

	"github.com/crowdtrain/crowdtrain/dataset"
	"github.com/crowdtrain/crowdtrain/nn"
	"github.com/crowdtrain/crowdtrain/protocol"
	"github.com/crowdtrain/crowdtrain/worker"
)

// mimicEvery is how many leases one mimic reference serves.
const mimicEvery = 20

// attacker is one hostile volunteer; it keeps its state across
// reconnects.
type attacker struct {
	id      int
	sh      *shared
	backend worker.Backend
	rng     *rand.Rand

	ratchet   float64   // ratchet's current multiplier
	noiseNorm float64   // noise: the norm of its one honest update
	reference []float32 // mimic: the copied update; replay: the last accepted one
	refShard  int
	refUses   int
	replayed  bool // replay: the next lease is answered with the last accepted update
}

// conn is one session's connection and what it has fetched.
type conn struct {
	a       *attacker
	ws      *websocket.Conn
	http    *http.Client
	base    *url.URL
	welcome *protocol.Welcome
	model   *nn.Model
	msgs    chan protocol.Message
	errc    chan error
	shards  map[string]*dataset.Set
	snapURL string
	snap    []float32
	// sent maps a lease id → the variants sent for it, in order, until
	// their acks arrive.
	sent map[uint64][]string
	// lastResult is the last result sent, by lease id, for replay.
	lastResult map[uint64]*protocol.Result
	held       int
}

func (a *attacker) dialer() *net.Dialer {
	d := &net.Dialer{Timeout: 30 * time.Second}
	b := a.sh.cfg.Bind
	if bs := a.sh.cfg.Binds; len(bs) > 0 {
		b = bs[a.id%len(bs)]
	}
	if b != "" {
		d.LocalAddr = &net.TCPAddr{IP: net.ParseIP(b)}
	}
	return d
}

// session is one connection, from dial to drop.
func (a *attacker) session(ctx context.Context) error {
	cfg := a.sh.cfg
	if a.rng == nil {
		a.rng = rand.New(rand.NewPCG(uint64(a.id)+1, 0x61747461636b))
		a.ratchet = 1
	}
	if cfg.computes() && a.backend == nil {
		b, err := cfg.NewBackend()
		if err != nil {
			return fmt.Errorf("backend: %w", err)
		}
		a.backend = b
	}
	hc := &http.Client{Transport: &http.Transport{DialContext: a.dialer().DialContext}, Timeout: time.Minute}
	dctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	ws, resp, err := websocket.Dial(dctx, cfg.Coordinator, &websocket.DialOptions{HTTPClient: hc})
	cancel()
	if err != nil {
		if resp != nil && resp.Body != nil {
			body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
			resp.Body.Close()
			return fmt.Errorf("dial %s: %w: %s", cfg.Coordinator, err, body)
		}
		return fmt.Errorf("dial %s: %w", cfg.Coordinator, err)
	}
	defer ws.CloseNow()
	ws.SetReadLimit(1 << 20)
	base, _ := url.Parse(cfg.Coordinator)
	base.Scheme = map[string]string{"ws": "http", "wss": "https"}[base.Scheme]
	base.Path, base.RawQuery = "", ""
	c := &conn{a: a, ws: ws, http: hc, base: base, msgs: make(chan protocol.Message, 64), errc: make(chan error, 1),
		shards: map[string]*dataset.Set{}, sent: map[uint64][]string{}, lastResult: map[uint64]*protocol.Result{}}
	defer func() { a.sh.report.leaseDone(c.held) }()
	return c.run(ctx)
}

func (c *conn) send(ctx context.Context, m protocol.Message) error {
	b, err := protocol.Encode(m)
	if err != nil {
		return err
	}
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := c.ws.Write(wctx, websocket.MessageBinary, b); err != nil {
		return fmt.Errorf("send %s: %w", m.MessageType(), err)
	}
	return nil
}

func (c *conn) read(ctx context.Context) (protocol.Message, error) {
	_, b, err := c.ws.Read(ctx)
	if err != nil {
		return nil, err
	}
	return protocol.Decode(b, 1<<20)
}

func (c *conn) run(ctx context.Context) error {
	a, cfg := c.a, c.a.sh.cfg
	hello := &protocol.Hello{Protocol: protocol.Version, Kind: protocol.KindNative,
		Backend: "attack-" + string(cfg.Kind), Threads: 1, Client: cfg.Client, Codecs: []string{protocol.CodecF32}, Token: cfg.JoinToken}
	if cfg.Kind.rl() {
		hello.Caps = &protocol.Caps{RL: true}
	}
	if ks := a.sh.keys; len(ks) > 0 {
		hello.VolunteerKey = ks[a.id%len(ks)]
	}
	if err := c.send(ctx, hello); err != nil {
		return err
	}
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	m, err := c.read(rctx)
	cancel()
	if err != nil {
		return fmt.Errorf("no welcome: %w", err)
	}
	w, ok := m.(*protocol.Welcome)
	if !ok {
		if e, ok := m.(*protocol.Error); ok {
			switch e.Code {
			case "bad_hello":
				return fmt.Errorf("%w: %s", ErrRefused, e.Message)
			case "join_token":
				// Retrying cannot help, and wrong tokens count against the address.
				return fmt.Errorf("%w: %s (an attack on a grid run with --join token needs --join-token)", ErrRefused, e.Message)
			}
			return fmt.Errorf("coordinator: %s: %s", e.Code, e.Message)
		}
		return fmt.Errorf("expected welcome, got %s", m.MessageType())
	}
	if cfg.JobID != "" && w.Job.ID != cfg.JobID {
		return fmt.Errorf("%w: the coordinator assigned job %q, the attack is for job %q", ErrRefused, w.Job.ID, cfg.JobID)
	}
	c.welcome = w
	if cfg.Kind.computes() || cfg.Kind == NaN || cfg.Kind == Sybil || cfg.Kind == Zero || cfg.Kind.rl() {
		model, err := nn.NewModel(w.Job.Model)
		if err != nil {
			return fmt.Errorf("job %s: %w", w.Job.ID, err)
		}
		c.model = model
	}
	if cfg.Kind == Scale {
		if err := c.readGate(ctx); err != nil {
			return err
		}
	}
	a.sh.report.connected(w.WorkerID)
	cfg.Logf("attacker %d (%s) connected as %q to job %q", a.id, cfg.Kind, w.WorkerID, w.Job.ID)

	go func() {
		for {
			m, err := c.read(context.Background())
			if err != nil {
				var ve *protocol.ValidationError
				if errors.As(err, &ve) || errors.Is(err, protocol.ErrMalformed) {
					continue
				}
				c.errc <- err
				return
			}
			c.msgs <- m
		}
	}()
	want := 1
	holding := cfg.Kind == Hostage || cfg.Kind == Sybil || cfg.Kind == Zero
	if holding {
		want = min(w.Limits.MaxLeases, protocol.MaxWant)
	}
	if err := c.send(ctx, &protocol.Want{N: want}); err != nil {
		return err
	}
	again := make(chan struct{}, 1)
	var tick <-chan time.Time
	if cfg.Kind == Hostage {
		t := time.NewTicker(time.Duration(max(w.Limits.LeaseTimeoutMs, 100)) * time.Millisecond)
		defer t.Stop()
		tick = t.C
	}
	for {
		select {
		case <-ctx.Done():
			bctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			if c.send(bctx, &protocol.Bye{Reason: "attack over"}) == nil {
				c.ws.Close(websocket.StatusNormalClosure, "attack over")
			}
			cancel()
			return nil
		case err := <-c.errc:
			return fmt.Errorf("connection: %w", err)
		case <-again:
			if err := c.send(ctx, &protocol.Want{N: want}); err != nil {
				return err
			}
		case <-tick:
			if err := c.send(ctx, &protocol.Want{N: want}); err != nil {
				return err
			}
		case m := <-c.msgs:
			switch m := m.(type) {
			case *protocol.Lease:
				c.held++
				a.sh.report.leaseGranted()
				if err := c.lease(ctx, m); err != nil {
					return err
				}
			case *protocol.Ack:
				c.ack(m)
			case *protocol.Idle:
				retry := time.Duration(max(m.RetryMs, 50)) * time.Millisecond
				time.AfterFunc(retry, func() {
					select {
					case again <- struct{}{}:
					default:
					}
				})
			case *protocol.Error:
				cfg.Logf("attacker %d: coordinator says %q: %q", a.id, m.Code, m.Message)
			}
		}
	}
}

// readGate reads the job's max_update_norm_ratio from its public spec.
func (c *conn) readGate(ctx context.Context) error {
	sh := c.a.sh
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if sh.gateRead {
		return nil
	}
	u := c.base.JoinPath("/api/v1/jobs", c.welcome.Job.ID)
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	resp, err := c.http.Do(req)
	if err != nil {
		return fmt.Errorf("read the job's spec: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("read the job's spec: GET %s: %s", u, resp.Status)
	}
	var v struct {
		Spec struct {
			Ratio float64 `json:"max_update_norm_ratio"`
		} `json:"spec"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&v); err != nil {
		return fmt.Errorf("read the job's spec: %w", err)
	}
	sh.gateRatio, sh.gateRead = v.Spec.Ratio, true
	sh.report.mu.Lock()
	sh.report.GateRatio = v.Spec.Ratio
	if sh.cfg.Scale != 0 {
		sh.report.Scale = sh.cfg.Scale
	} else if v.Spec.Ratio > 0 {
		sh.report.Scale = 0.95 * v.Spec.Ratio
	} else {
		sh.report.Scale = 19
	}
	sh.report.mu.Unlock()
	return nil
}

// waitStarted reads until the started for lease id, handling acks and
// queueing leases that arrive meanwhile. ok is false when the coordinator
// refused to start it.
func (c *conn) waitStarted(ctx context.Context, id uint64, later *[]*protocol.Lease) (*protocol.Started, bool, error) {
	timeout := time.After(30 * time.Second)
	for {
		select {
		case <-ctx.Done():
			return nil, false, ctx.Err()
		case err := <-c.errc:
			return nil, false, fmt.Errorf("connection: %w", err)
		case <-timeout:
			return nil, false, fmt.Errorf("no started for lease %d within 30s", id)
		case m := <-c.msgs:
			switch m := m.(type) {
			case *protocol.Started:
				if m.LeaseID == id {
					return m, true, nil
				}
			case *protocol.Ack:
				if m.LeaseID == id && len(c.sent[id]) == 0 {
					c.held--
					c.a.sh.report.leaseDone(1)
					return nil, false, nil
				}
				c.ack(m)
			case *protocol.Lease:
				c.held++
				c.a.sh.report.leaseGranted()
				*later = append(*later, m)
			}
		}
	}
}

// lease answers l (and any leases that arrive while it starts) the way
// the attack's kind does.
func (c *conn) lease(ctx context.Context, l *protocol.Lease) error {
	queue := []*protocol.Lease{l}
	for len(queue) > 0 {
		l := queue[0]
		queue = queue[1:]
		if l.Snapshot == protocol.SnapshotLatest {
			if err := c.send(ctx, &protocol.Start{LeaseID: l.ID}); err != nil {
				return err
			}
			st, ok, err := c.waitStarted(ctx, l.ID, &queue)
			if err != nil {
				return err
			}
			if !ok {
				continue
			}
			l.BaseVersion, l.SnapshotURL = st.BaseVersion, st.SnapshotURL
		}
		if c.a.sh.cfg.Kind == Hostage {
			continue // held, never answered
		}
		res, variant, err := c.forge(ctx, l)
		c.held--
		c.a.sh.report.leaseDone(1)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			// A snapshot gone by the time it was fetched (the lease went
			// stale) or a bad download: give the lease back, as a worker
			// does, and go on.
			c.a.sh.report.released(fmt.Errorf("lease %d: %w", l.ID, err))
			if err := c.send(ctx, &protocol.Release{LeaseIDs: []uint64{l.ID}, Reason: "attack: " + truncate(err.Error(), 900)}); err != nil {
				return err
			}
		} else if err := c.result(ctx, res, variant); err != nil {
			return err
		}
		if err := c.send(ctx, &protocol.Want{N: 1}); err != nil {
			return err
		}
	}
	return nil
}

func (c *conn) result(ctx context.Context, res *protocol.Result, variant string) error {
	if err := c.send(ctx, res); err != nil {
		return err
	}
	c.sent[res.LeaseID] = append(c.sent[res.LeaseID], variant)
	c.lastResult[res.LeaseID] = res
	c.a.sh.report.sent(variant)
	return nil
}

// ack counts an ack against the variant sent for its lease; replay sends
// an accepted result again.
func (c *conn) ack(m *protocol.Ack) {
	vs := c.sent[m.LeaseID]
	if len(vs) == 0 {
		return // a refused start, or a lease never answered
	}
	v := vs[0]
	if len(vs) == 1 {
		delete(c.sent, m.LeaseID)
	} else {
		c.sent[m.LeaseID] = vs[1:]
	}
	c.a.sh.report.acked(v, m.Accepted, m.Reason, m.Detail)
	a := c.a
	switch a.sh.cfg.Kind {
	case Ratchet:
		if m.Accepted {
			a.ratchet *= 1 + a.sh.cfg.Scale
		} else {
			a.ratchet = math.Max(a.ratchet/2, 1)
		}
	case Replay:
		res := c.lastResult[m.LeaseID]
		delete(c.lastResult, m.LeaseID)
		if m.Accepted && v != "replay-same-lease" && res != nil {
			a.reference = append(a.reference[:0], res.Update...)
			a.replayed = true
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			if c.result(ctx, res, "replay-same-lease") != nil {
				a.sh.cfg.Logf("attacker %d: replay of lease %d not sent", a.id, m.LeaseID)
			}
			cancel()
		}
	}
	if len(c.lastResult) > 64 {
		clear(c.lastResult)
	}
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}
