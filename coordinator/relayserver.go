package coordinator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/crowdtrain/crowdtrain/jobspec"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/crowdtrain/crowdtrain/protocol"
	relaymsg "github.com/crowdtrain/crowdtrain/protocol/relay"
)

// RelayOptions configure a Server that relays for a root (RunRelay).
type RelayOptions struct {
	// Name is the relay's name: unique among the root's relays.
	Name string
	// URL is its public websocket URL, listed by the root's
	// GET /api/v1/relays.
	URL string
	// NATS is a connection with the relays' permissions.
	NATS *nats.Conn
	// HTTP fetches the root's snapshots (nil: a client with a timeout).
	HTTP *http.Client
}

// relayRuntime is a relay server's link to its root.
type relayRuntime struct {
	o      RelayOptions
	js     jetstream.JetStream
	out    *relayOutbox
	bootID string

	mu      sync.Mutex
	rootURL string
	token   string
	mirrors map[string]*Job
	wakes   map[string]chan struct{} // per job: a version was announced

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// relayOutbox holds aggregates until JetStream has them. It is bounded
// by back-pressure: a relay whose outbox is full leases nothing more.
type relayOutbox struct {
	mu     sync.Mutex
	q      []*relaymsg.Aggregate
	signal chan struct{}
	// Counters for the heartbeat.
	bytes, published atomic.Int64
}

// maxOutbox is the most aggregates waiting for JetStream before a relay
// stops leasing.
const maxOutbox = 32

func (o *relayOutbox) push(a *relaymsg.Aggregate) {
	o.mu.Lock()
	o.q = append(o.q, a)
	o.mu.Unlock()
	select {
	case o.signal <- struct{}{}:
	default:
	}
}

func (o *relayOutbox) full() bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return len(o.q) >= maxOutbox
}

func (o *relayOutbox) peek() *relaymsg.Aggregate {
	o.mu.Lock()
	defer o.mu.Unlock()
	if len(o.q) == 0 {
		return nil
	}
	return o.q[0]
}

func (o *relayOutbox) pop() {
	o.mu.Lock()
	o.q = o.q[1:]
	o.mu.Unlock()
}

// RunRelay makes s a relay of the root behind o.NATS: it joins, copies
// each running job of the root and keeps its copies fed with leased
// blocks. It returns once joined; Close stops it.
func (s *Server) RunRelay(ctx context.Context, o RelayOptions) error {
	if !relaymsg.ValidName(o.Name) {
		return fmt.Errorf("relay name %q: use letters, digits, - and _ (up to 64)", o.Name)
	}
	if o.HTTP == nil {
		o.HTTP = &http.Client{Timeout: time.Minute}
	}
	js, err := jetstream.New(o.NATS)
	if err != nil {
		return err
	}
	rt := &relayRuntime{o: o, js: js, out: &relayOutbox{signal: make(chan struct{}, 1)}, bootID: strconv.FormatUint(rand.Uint64()&0xffffffffff, 36),
		mirrors: map[string]*Job{}, wakes: map[string]chan struct{}{}}
	rt.ctx, rt.cancel = context.WithCancel(context.Background())
	s.relay = rt
	if err := rt.join(ctx, s); err != nil {
		rt.cancel()
		return err
	}
	if _, err := o.NATS.Subscribe(relaymsg.SubjectVersions+".>", func(m *nats.Msg) {
		rt.mu.Lock()
		w := rt.wakes[m.Subject[len(relaymsg.SubjectVersions)+1:]]
		rt.mu.Unlock()
		if w != nil {
			select {
			case w <- struct{}{}:
			default:
			}
		}
	}); err != nil {
		rt.cancel()
		return err
	}
	rt.wg.Add(2)
	go rt.publish(s)
	go rt.heartbeat(s)
	return nil
}

// stop sends what the relay's copies summed so far, gives the outbox a
// few seconds to reach JetStream, and stops.
func (rt *relayRuntime) stop() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	rt.mu.Lock()
	jobs := make([]*Job, 0, len(rt.mirrors))
	for _, j := range rt.mirrors {
		jobs = append(jobs, j)
	}
	rt.mu.Unlock()
	for _, j := range jobs {
		_ = j.exec(ctx, func(st *jobState) {
			if st.state == StateRunning {
				j.mirrorFlush()
			}
		})
	}
	for rt.out.peek() != nil && ctx.Err() == nil {
		time.Sleep(20 * time.Millisecond)
	}
	rt.cancel()
	rt.wg.Wait()
}

// request sends a request upstream and decodes its answer.
func (rt *relayRuntime) request(ctx context.Context, subject string, req, reply any) error {
	b, _ := json.Marshal(req)
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	m, err := rt.o.NATS.RequestWithContext(ctx, subject, b)
	if err != nil {
		return err
	}
	return json.Unmarshal(m.Data, reply)
}

// join asks the root for its jobs and starts a copy of each new one.
func (rt *relayRuntime) join(ctx context.Context, s *Server) error {
	var reply relaymsg.JoinReply
	if err := rt.request(ctx, relaymsg.ControlSubject(rt.o.Name, relaymsg.OpJoin), relaymsg.Join{Relay: rt.o.Name, URL: rt.o.URL}, &reply); err != nil {
		return fmt.Errorf("joining the root: %w (is `crowdtrain serve --nats-listen` running there, and is --creds the credential `crowdtrain relay-credential %s` wrote?)", err, rt.o.Name)
	}
	if reply.Error != "" {
		return fmt.Errorf("the root refused the join: %s", reply.Error)
	}
	rt.mu.Lock()
	rt.rootURL, rt.token = reply.RootURL, reply.Token
	rt.mu.Unlock()
	// The root's contribute page connects its tabs here.
	s.hosts.allowPages(reply.RootURL)
	for _, info := range reply.Jobs {
		rt.mu.Lock()
		_, known := rt.mirrors[info.ID]
		rt.mu.Unlock()
		if known {
			continue
		}
		if err := rt.startMirror(s, info); err != nil {
			s.cfg.Logger.Warn(fmt.Sprintf("relay: job %s of the root: %v; not relayed", info.ID, err), logJob, info.ID)
		}
	}
	return nil
}

// startMirror builds and starts the relay's copy of a root job.
func (rt *relayRuntime) startMirror(s *Server, info relaymsg.JobInfo) error {
	var spec jobspec.Spec
	if err := json.Unmarshal(info.Spec, &spec); err != nil {
		return fmt.Errorf("spec: %w", err)
	}
	if err := spec.Validate(); err != nil {
		return err
	}
	if spec.Kind == jobspec.KindRL {
		// Its rollouts are scored, buffered and turned into learn
		// leases by the root alone: its workers connect there.
		return errors.New("an RL job is not relayed yet: its workers connect to the root")
	}
	train, test, err := s.data.get(spec)
	if err != nil {
		return err
	}
	j, err := newJob(info.ID, spec, train, test, &s.leaseIDs, s.cfg.Logger, &s.shardSets)
	if err != nil {
		return err
	}
	m := j.makeMirror(rt.o.Name, rt.out, rt.bootID)
	m.run = info.Run
	wake := make(chan struct{}, 1)
	rt.mu.Lock()
	rt.mirrors[info.ID], rt.wakes[info.ID] = j, wake
	rt.mu.Unlock()
	s.startJob(j)
	s.cfg.Logger.Info(fmt.Sprintf("relay: relaying job %s (%q) of the root: %d parameters, mode %s", j.ID, spec.Name, j.model.NumParams, spec.Mode), logJob, j.ID)
	rt.wg.Add(1)
	go rt.feed(s, j, wake)
	return nil
}

// feed keeps a relayed job supplied with blocks of tasks and with the
// root's snapshots.
func (rt *relayRuntime) feed(s *Server, j *Job, announced chan struct{}) {
	defer rt.wg.Done()
	m := j.mirror
	failures := 0
	for {
		fresh := false // the root announced a new version
		select {
		case <-rt.ctx.Done():
			return
		case <-m.wake:
		case <-announced:
			fresh = true
		case <-time.After(250 * time.Millisecond):
		}
		var want int
		var version, run, offset int64
		var answered uint64
		var release []uint64
		var refresh bool
		if err := j.exec(rt.ctx, func(st *jobState) {
			if j.mirrorWantsWork() && !rt.out.full() {
				want = j.mirrorWant()
			}
			// In an asynchronous mode the workers here compute from the
			// newest version the relay holds: it takes each new one as
			// the root announces it, as a worker of the root's would,
			// not only with its next block (a lease request for no
			// task). Otherwise their results are the staler by the
			// relay's queue.
			refresh = fresh && want == 0 && !st.spec.Rounds() && st.state == StateRunning
			version, answered, run, offset = st.model.Version, m.answered, m.run, m.offset
			release, m.toRelease = m.toRelease, nil
		}); err != nil {
			return
		}
		if len(release) > 0 {
			rt.release(j.ID, release) // else they expire at the root
		}
		if want == 0 && !refresh {
			continue
		}
		var reply relaymsg.LeaseReply
		err := rt.request(rt.ctx, relaymsg.ControlSubject(rt.o.Name, relaymsg.OpLease), relaymsg.LeaseRequest{Relay: rt.o.Name, Job: j.ID, Want: want, Answered: answered}, &reply)
		if err == nil && reply.Error != "" {
			err = fmt.Errorf("%s", reply.Error)
		}
		var params []float32
		if err == nil && (reply.Run != run || reply.Version+offset != version) && reply.SnapshotPath != "" && reply.State == StateRunning {
			for try, wait := 0, 100*time.Millisecond; try < 5; try, wait = try+1, 2*wait {
				if params, err = rt.fetchSnapshot(reply.SnapshotPath, j.model.NumParams); err == nil || rt.ctx.Err() != nil {
					break
				}
				time.Sleep(wait)
			}
			if err != nil && len(reply.Leases) > 0 {
				ids := make([]uint64, len(reply.Leases))
				for i, l := range reply.Leases {
					ids[i] = l.ID
				}
				rt.release(j.ID, ids)
			}
		}
		if err != nil {
			if failures++; failures == 1 || failures%40 == 0 {
				s.cfg.Logger.Warn(fmt.Sprintf("relay: job %s: leasing from the root: %v (trying again)", j.ID, err), logJob, j.ID)
			}
			continue
		}
		failures = 0
		if reply.State != StateRunning {
			_ = j.exec(rt.ctx, func(st *jobState) {
				if st.state == StateRunning {
					j.finish(reply.State, "the root's job is "+reply.State)
				}
			})
			return
		}
		_ = j.exec(rt.ctx, func(*jobState) { j.mirrorBlock(reply, params, time.Now()) })
	}
}

// release hands leases back to the root undone.
func (rt *relayRuntime) release(job string, ids []uint64) {
	var reply relaymsg.Released
	if err := rt.request(rt.ctx, relaymsg.ControlSubject(rt.o.Name, relaymsg.OpRelease), relaymsg.Release{Relay: rt.o.Name, Job: job, Leases: ids}, &reply); err != nil {
		return // they expire at the root
	}
}

// fetchSnapshot downloads a snapshot of the root's (through any HTTP
// cache in front of it).
func (rt *relayRuntime) fetchSnapshot(path string, n int) ([]float32, error) {
	rt.mu.Lock()
	u, token := rt.rootURL+path, rt.token
	rt.mu.Unlock()
	req, err := http.NewRequestWithContext(rt.ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set(relaymsg.HeaderRelayToken, token)
	resp, err := rt.o.HTTP.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", u, resp.Status)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, int64(4*n)+1))
	if err != nil {
		return nil, err
	}
	params := make([]float32, n)
	if err := protocol.DecodeFloatsInto(params, body); err != nil {
		return nil, fmt.Errorf("GET %s: %w", u, err)
	}
	return params, nil
}

// publish sends the outbox's aggregates to the stream, in order, each
// until JetStream has it (a message id makes a resend harmless).
func (rt *relayRuntime) publish(s *Server) {
	defer rt.wg.Done()
	subject := relaymsg.AggregateSubject(rt.o.Name)
	wait := 100 * time.Millisecond
	for {
		a := rt.out.peek()
		if a == nil {
			select {
			case <-rt.ctx.Done():
				return
			case <-rt.out.signal:
				continue
			}
		}
		body, err := relaymsg.Encode(a)
		if err != nil {
			s.cfg.Logger.Error(fmt.Sprintf("relay: aggregate %s: %v: dropped", a.ID, err))
			rt.out.pop()
			continue
		}
		// Room for the headers: the payload limit counts them.
		parts := relaymsg.Split(body, int(rt.o.NATS.MaxPayload())-4096)
		err = nil
		for i, p := range parts {
			msg := nats.NewMsg(subject)
			msg.Data = p
			msg.Header.Set(relaymsg.HeaderAggregate, a.ID)
			msg.Header.Set(relaymsg.HeaderPart, relaymsg.PartHeader(i, len(parts)))
			msg.Header.Set(relaymsg.HeaderJob, a.Job)
			ctx, cancel := context.WithTimeout(rt.ctx, 10*time.Second)
			_, err = rt.js.PublishMsg(ctx, msg, jetstream.WithMsgID(a.ID+"/"+strconv.Itoa(i)))
			cancel()
			if err != nil {
				break
			}
		}
		if err != nil {
			s.cfg.Logger.Warn(fmt.Sprintf("relay: publishing aggregate %s upstream: %v (retrying in %v)", a.ID, err, wait))
			select {
			case <-rt.ctx.Done():
				return
			case <-time.After(wait):
			}
			wait = min(2*wait, 5*time.Second)
			continue
		}
		wait = 100 * time.Millisecond
		rt.out.pop()
		rt.out.bytes.Add(int64(len(body)))
		rt.out.published.Add(1)
	}
}

// heartbeat tells the root about the relay every few seconds, and joins
// again now and then to relay jobs the root started since.
func (rt *relayRuntime) heartbeat(s *Server) {
	defer rt.wg.Done()
	t := time.NewTicker(2 * time.Second)
	defer t.Stop()
	for n := 0; ; n++ {
		st := relaymsg.Status{Relay: rt.o.Name, URL: rt.o.URL, Workers: s.connectedWorkers(),
			UpstreamBytes: rt.out.bytes.Load(), Aggregates: rt.out.published.Load()}
		b, _ := json.Marshal(st)
		rt.o.NATS.Publish(relaymsg.ControlSubject(rt.o.Name, relaymsg.OpStatus), b)
		if n%5 == 4 {
			if err := rt.join(rt.ctx, s); err != nil && rt.ctx.Err() == nil {
				s.cfg.Logf("relay: %v", err)
			}
		}
		select {
		case <-rt.ctx.Done():
			return
		case <-t.C:
		}
	}
}

// connectedWorkers counts the worker connections that said hello.
func (s *Server) connectedWorkers() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.workers)
}
