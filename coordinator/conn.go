package coordinator

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"

	"github.com/crowdtrain/crowdtrain/engine"
	"github.com/crowdtrain/crowdtrain/jobspec"
	"github.com/crowdtrain/crowdtrain/protocol"
	"github.com/crowdtrain/crowdtrain/store"
)

// sendQueue bounds what may wait for one worker's socket; a worker that
// falls this far behind is disconnected rather than waited on.
const sendQueue = 32

// maxBadMessages is how many invalid (but well-framed) messages a
// connection may send before it is closed as untrustworthy.
const maxBadMessages = 16

// workerConn is one connected worker. Its read loop runs in the HTTP
// handler's goroutine; writeLoop drains send.
type workerConn struct {
	id        string
	volunteer string // volunteers.go: whose connection this is
	hello     protocol.Hello
	// backend is the backend a result named since the hello (a kernel
	// chosen by timing the job's model), nil while the hello's holds.
	backend     atomic.Pointer[string]
	backendSeen atomic.Bool // a change has been logged for this connection
	remote      string
	clientKey   string // for per-address limits (clientaddr.go)
	ws          *websocket.Conn
	out         outbox
	connectedAt time.Time
	// closedBy says why the coordinator ended the connection from outside
	// the read loop (missed pings), for the log line when it leaves.
	closedBy atomic.Pointer[string]

	// route.go: the job it computes for now (its latest assign's; nil
	// while none), the jobs it was given this session, and the largest
	// result frame any of them allows. routeMu orders its placements.
	cur         atomic.Pointer[Job]
	curSince    atomic.Int64 // unix nanoseconds: when cur was chosen for it; 0: a fall-through (placement.Worker.Since)
	jobsMu      sync.Mutex
	jobs        map[string]*Job
	resultLimit atomic.Int64
	readLimit   int64 // the limit set on ws, by the reader only
	routeMu     sync.Mutex

	lastSeen      atomic.Int64 // unix nanoseconds
	examples      atomic.Int64
	accepted      atomic.Int64
	rejected      atomic.Int64
	rollouts      atomic.Int64
	lastStaleness atomic.Int64

	wire workerWire // wire.go: bytes each way, link, H, comm share

	rateMu       sync.Mutex // guards the smoothed rate below
	rateAt       time.Time
	rateExamples int64
	rate         float64
}

// WorkerView is a worker as the API shows it.
type WorkerView struct {
	ID       string `json:"id"`
	Kind     string `json:"kind"`
	Backend  string `json:"backend"`
	Threads  int    `json:"threads"`
	Client   string `json:"client"`
	Job      string `json:"job"`
	Remote   string `json:"remote"`
	Examples int64  `json:"examples"`
	Accepted int64  `json:"accepted"`
	Rejected int64  `json:"rejected"`
	// Rollouts is how many of the accepted results were an RL job's
	// rollouts (the rest are gradients: a text job's or an RL learn
	// lease's).
	Rollouts      int64     `json:"rollouts"`
	LastStaleness int64     `json:"last_staleness"`
	ConnectedAt   time.Time `json:"connected_at"`
	LastSeen      time.Time `json:"last_seen"`
	// ExamplesPerSec is accepted examples per second, smoothed over a few
	// seconds of the views asked for.
	ExamplesPerSec float64  `json:"examples_per_sec"`
	Leases         []uint64 `json:"leases"` // held now

	// What went over the wire (wire.go): bytes read from its websocket,
	// and bytes written to it plus the snapshots, deltas and shards it
	// fetched; its own estimate of its link (clamped); the H of its last
	// lease; and the smoothed share of its time spent communicating,
	// comm_ms/(comm_ms+compute_ms) of its results.
	BytesIn      int64    `json:"bytes_in"`
	BytesOut     int64    `json:"bytes_out"`
	Link         LinkView `json:"link"`
	LocalSteps   int      `json:"local_steps"`
	CommFraction float64  `json:"comm_fraction"`
	// Utilisation is the smoothed share of its wall time spent computing:
	// its results' compute_ms over the time between their arrivals.
	Utilisation float64 `json:"utilisation"`
}

// backendName is the worker's backend: the last a result named, else the
// hello's.
func (w *workerConn) backendName() string {
	if b := w.backend.Load(); b != nil {
		return *b
	}
	return w.hello.Backend
}

func (w *workerConn) view() WorkerView {
	v := WorkerView{
		ID: w.id, Kind: w.hello.Kind, Backend: w.backendName(), Threads: w.hello.Threads,
		Client: w.hello.Client, Remote: w.remote,
		Examples: w.examples.Load(), Accepted: w.accepted.Load(), Rejected: w.rejected.Load(),
		Rollouts:      w.rollouts.Load(),
		LastStaleness: w.lastStaleness.Load(),
		ConnectedAt:   w.connectedAt, LastSeen: time.Unix(0, w.lastSeen.Load()),
		Leases: []uint64{},
	}
	if j := w.cur.Load(); j != nil {
		v.Job = j.ID
	}
	w.wire.view(&v)
	now := time.Now()
	w.rateMu.Lock()
	if w.rateAt.IsZero() {
		w.rateAt, w.rateExamples = w.connectedAt, 0
	}
	if dt := now.Sub(w.rateAt).Seconds(); dt >= 1 {
		inst := float64(v.Examples-w.rateExamples) / dt
		if w.rate == 0 {
			w.rate = inst
		} else {
			w.rate = 0.5*w.rate + 0.5*inst
		}
		w.rateAt, w.rateExamples = now, v.Examples
	}
	v.ExamplesPerSec = w.rate
	w.rateMu.Unlock()
	return v
}

// maxMessageBytes is the read limit for a job's connections: one full
// update plus room for the other fields.
func (j *Job) maxMessageBytes() int64 {
	return int64(4*j.model.NumParams) + 64<<10
}

// serveWorker handles /ws: hello, welcome, then wants, results, releases
// and a bye. Nothing a worker sends can touch the model without passing
// protocol.Decode and the job's own checks.
func (s *Server) serveWorker(w http.ResponseWriter, r *http.Request) {
	// Each connection costs memory whether or not it ever says hello (a
	// frame buffer while a message arrives, up to a result's size): one
	// address may hold only so many, counted until the connection ends.
	key := s.clientKey(r)
	if !s.takeConnSlot(key) {
		w.Header().Set("Retry-After", "10")
		writeError(w, http.StatusTooManyRequests, "too many connections from this address (at most %d)", s.cfg.MaxConnsPerAddress)
		return
	}
	// checkAccess has vetted Host and Origin (scheme included, which the
	// library's own check ignores); a second check would only refuse the
	// --public-url origins it does not know.
	ws, err := websocket.Accept(w, r, &websocket.AcceptOptions{InsecureSkipVerify: true})
	if err != nil {
		s.releaseConnSlot(key)
		return // Accept has answered the request already
	}
	handedOff := false // to the session goroutine, which closes it
	defer func() {
		if !handedOff {
			ws.CloseNow()
			s.releaseConnSlot(key)
		}
	}()
	s.mu.Lock()
	closed := s.closed
	if !closed {
		s.conns.Add(1)
	}
	s.mu.Unlock()
	if closed {
		ws.Close(websocket.StatusGoingAway, "coordinator shutting down")
		return
	}
	defer func() {
		if !handedOff {
			s.conns.Done()
		}
	}()
	// Before the welcome only a hello may come: the control limit. After
	// it, readFrame applies each type's own limit; the library's limit is
	// the backstop at the largest (a result's).
	ws.SetReadLimit(s.cfg.MaxControlBytes)

	hctx, cancel := context.WithTimeout(s.ctx, s.cfg.HelloTimeout)
	hello, helloBytes, err := s.readHello(hctx, ws)
	cancel()
	if err != nil {
		// Quoted: the error may carry what the client sent.
		s.cfg.Logger.Log(context.Background(), s.helloRefusalLevel(key, "bad_hello"),
			fmt.Sprintf("worker %s: refused: %q", r.RemoteAddr, err.Error()), "remote", r.RemoteAddr)
		code := websocket.StatusPolicyViolation
		var tooBig *frameTooBigError
		switch {
		case errors.Is(err, protocol.ErrVersion):
			code = websocket.StatusUnsupportedData
		case errors.As(err, &tooBig):
			code = websocket.StatusMessageTooBig
		}
		s.refuse(ws, code, "bad_hello", err.Error())
		return
	}
	// limits.go: an address's hello rate, before any token is checked.
	if ok, retry := s.takeHello(key); !ok {
		s.refuse(ws, websocket.StatusTryAgainLater, protocol.ReasonRateLimited,
			fmt.Sprintf("too many hellos from this address (%g a second after %d); retry after %d s", s.cfg.HelloRate, s.cfg.HelloBurst, retryAfterSeconds(retry)))
		return
	}
	adm := s.admit(hello, key, time.Now())
	if adm.code != "" {
		// Quoted: a ban's reason may carry what a worker sent.
		s.cfg.Logger.Log(context.Background(), s.helloRefusalLevel(key, adm.code),
			fmt.Sprintf("worker %s: refused (%s): %q", r.RemoteAddr, adm.code, adm.message),
			"remote", r.RemoteAddr, logVolunteer, adm.volunteer, "reason", adm.code)
		s.refuse(ws, websocket.StatusPolicyViolation, adm.code, adm.message)
		return
	}
	// hostages.go: a dropped volunteer's cool-off.
	if left := s.coolOff.left(adm.volunteer); left > 0 {
		s.cfg.Logger.Log(context.Background(), s.helloRefusalLevel(key, "cool_off"),
			fmt.Sprintf("worker %s: refused: volunteer %s is cooling off for %v", r.RemoteAddr, adm.volunteer, left.Round(time.Second)),
			"remote", r.RemoteAddr, logVolunteer, adm.volunteer)
		s.refuse(ws, websocket.StatusTryAgainLater, protocol.ReasonRateLimited,
			fmt.Sprintf("this volunteer let %d leases expire in a row with no result and is refused for a while; retry after %d s", s.cfg.MaxExpiriesInARow, retryAfterSeconds(left)))
		return
	}
	s.volunteers.seen(adm.volunteer, hello.Name, adm.tokenID, key)

	wc := &workerConn{
		id:          fmt.Sprintf("w%d-%04x", s.workerN.Add(1), s.bootID),
		volunteer:   adm.volunteer,
		hello:       *hello,
		jobs:        map[string]*Job{},
		remote:      r.RemoteAddr,
		clientKey:   key,
		ws:          ws,
		connectedAt: time.Now(),
	}
	wc.out.idle.L = &wc.out.mu
	wc.wire.bytesIn.Store(int64(helloBytes))
	wc.lastSeen.Store(time.Now().UnixNano())
	// The websocket has taken the connection over from the HTTP server,
	// so the session can outlive this handler: a goroutine of its own
	// waits for an idle worker's next message with a small stack, instead
	// of the HTTP server's goroutine with its deeper stack, the request
	// and its headers.
	handedOff = true
	go func() {
		defer s.conns.Done()
		defer s.releaseConnSlot(key)
		defer ws.CloseNow()
		s.session(wc)
	}()
}

// takeConnSlot counts a new connection from key, unless key already holds
// Config.MaxConnsPerAddress.
func (s *Server) takeConnSlot(key string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.connsFrom[key] >= s.cfg.MaxConnsPerAddress {
		return false
	}
	s.connsFrom[key]++
	return true
}

func (s *Server) releaseConnSlot(key string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.connsFrom[key]--; s.connsFrom[key] <= 0 {
		delete(s.connsFrom, key)
	}
}

// session runs an admitted worker's connection: welcome, messages until
// it leaves, then its leases back to the queue and the close.
func (s *Server) session(wc *workerConn) {
	ws, hello := wc.ws, &wc.hello
	stopPings := s.startPings(wc)
	defer stopPings()
	// Cancelling a Read's context would drop the TCP connection without a
	// close frame; on shutdown, close with "going away" instead, which
	// also ends the read loop. AfterFunc spends no goroutine until then.
	stopWatch := context.AfterFunc(s.ctx, func() {
		ws.Close(websocket.StatusGoingAway, "coordinator shutting down")
	})
	defer stopWatch()

	s.mu.Lock()
	s.workers[wc.id] = wc
	s.mu.Unlock()
	if s.volunteers.banned(wc.volunteer, wc.clientKey) {
		// Banned between the hello and now: the ban's closing pass may
		// have missed this connection.
		wc.ws.Close(websocket.StatusPolicyViolation, "banned")
	}
	// The welcome names the job the worker is placed on first, if any
	// fits (route.go); later moves come as assigns.
	welcome := s.welcome(wc)
	first := "no job yet"
	attrs := []any{logWorker, wc.id, logVolunteer, wc.volunteer, "name", hello.Name, "client", hello.Client, "remote", wc.remote}
	if j := wc.cur.Load(); j != nil {
		first = "job " + j.ID
		attrs = append(attrs, logJob, j.ID)
	}
	// Every string a worker chooses is quoted: a newline or an escape
	// sequence in it must not forge or garble log lines. (The handlers
	// quote the attributes; %q quotes them in the message.)
	s.cfg.Logger.Info(fmt.Sprintf("worker %s joined (%s): %s/%q, %d threads, client %q, volunteer %s %q, from %s",
		wc.id, first, hello.Kind, hello.Backend, hello.Threads, hello.Client, wc.volunteer, hello.Name, wc.remote), attrs...)
	s.saveWorker(wc)

	code, reason := websocket.StatusInternalError, "could not send the welcome"
	if s.enqueue(wc, welcome) {
		code, reason = s.readLoop(wc)
	}

	// The worker is gone or going: its leases return to the queue now,
	// before the close handshake, which may wait on an unresponsive peer;
	// and before it leaves the list, so no one sees it gone with its
	// leases still out (its reader has stopped: nothing grants it more).
	var n int
	for _, job := range wc.jobList() {
		_ = job.exec(context.Background(), func(*jobState) { n += job.releaseWorker(wc.id) })
	}
	s.mu.Lock()
	delete(s.workers, wc.id)
	s.mu.Unlock()
	s.saveWorker(wc)
	why := reason
	if p := wc.closedBy.Load(); p != nil {
		why = *p
	}
	if why == "" {
		why = "connection closed"
	}
	// Quoted: a decoding error may quote what the worker sent.
	s.cfg.Logger.Info(fmt.Sprintf("worker %s left (%q; %d leases queued again): %d accepted, %d rejected",
		wc.id, why, n, wc.accepted.Load(), wc.rejected.Load()),
		logWorker, wc.id, logVolunteer, wc.volunteer, "why", why)
	// A last error message goes out before the close frame.
	wc.out.flush()
	ws.Close(code, reason)
}

// readHello reads the first message, which must be a hello, and its
// frame's size (counted in the worker's bytes_in).
func (s *Server) readHello(ctx context.Context, ws *websocket.Conn) (*protocol.Hello, int, error) {
	buf, err := s.readFrame(ctx, ws, 0)
	if err != nil {
		if errors.Is(err, errTextFrame) {
			return nil, 0, errors.New("hello must be a binary msgpack frame")
		}
		var tooBig *frameTooBigError
		if errors.As(err, &tooBig) {
			return nil, 0, err
		}
		return nil, 0, fmt.Errorf("no hello: %w", err)
	}
	defer s.decodeBufs.put(buf)
	buf.dec.MaxBytes, buf.dec.Bounds = int(s.cfg.MaxControlBytes), s.cfg.FrameBounds
	m, err := buf.dec.Decode(buf.frame)
	if err != nil {
		return nil, 0, err
	}
	h, ok := m.(*protocol.Hello)
	if !ok {
		return nil, 0, fmt.Errorf("first message must be hello, got %s", m.MessageType())
	}
	return h, len(buf.frame), nil
}

// refuse sends an error message and closes the connection.
func (s *Server) refuse(ws *websocket.Conn, code websocket.StatusCode, errCode, msg string) {
	if b, err := protocol.Encode(&protocol.Error{Code: errCode, Message: msg}); err == nil {
		ctx, cancel := context.WithTimeout(s.ctx, s.cfg.WriteTimeout)
		_ = ws.Write(ctx, websocket.MessageBinary, b)
		cancel()
	}
	ws.Close(code, truncateReason(msg))
}

// truncateReason fits a close reason in a control frame (123 bytes).
func truncateReason(s string) string {
	if len(s) > 120 {
		return s[:120]
	}
	return s
}

// enqueue queues m for the writer. It reports false, and closes the
// connection, when the worker is too far behind.
func (s *Server) enqueue(wc *workerConn, m protocol.Message) bool {
	b, err := protocol.Encode(m)
	if err != nil {
		s.cfg.Logger.Error(fmt.Sprintf("worker %s: encode %s: %v", wc.id, m.MessageType(), err), logWorker, wc.id)
		return false
	}
	ok, full := s.push(wc, b)
	if ok {
		wc.wire.bytesOut.Add(int64(len(b)))
	}
	if ok || !full {
		return ok // not queued when a write failed: the connection is going
	}
	s.cfg.Logger.Warn(fmt.Sprintf("worker %s: %d messages unsent; disconnecting", wc.id, sendQueue), logWorker, wc.id, logVolunteer, wc.volunteer)
	wc.ws.Close(websocket.StatusPolicyViolation, "too slow to read its messages")
	return false
}

// readLoop handles messages until the worker leaves, breaks the protocol
// or the server shuts down; it returns how to close the connection.
func (s *Server) readLoop(wc *workerConn) (websocket.StatusCode, string) {
	bad := 0
	for {
		code, reason, done := s.readMessage(wc, &bad)
		if done {
			return code, reason
		}
	}
}

// readMessage reads and handles one message with a buffer from the shared
// pool, returned before the next read: each result is applied (or
// rejected) before this returns, so nothing refers to the buffer after.
func (s *Server) readMessage(wc *workerConn, bad *int) (websocket.StatusCode, string, bool) {
	ctx := s.ctx
	limit := wc.resultLimit.Load()
	if limit != wc.readLimit {
		// The library's limit is the backstop at the largest result a
		// job of this connection takes; readFrame applies each type's.
		wc.ws.SetReadLimit(max(limit, s.cfg.MaxControlBytes))
		wc.readLimit = limit
	}
	buf, err := s.readFrame(context.Background(), wc.ws, limit)
	if buf != nil {
		defer s.decodeBufs.put(buf)
	}
	var tooBig *frameTooBigError
	switch {
	case err == nil:
	case s.ctx.Err() != nil:
		return websocket.StatusGoingAway, "coordinator shutting down", true
	case errors.Is(err, errTextFrame):
		s.enqueue(wc, &protocol.Error{Code: "malformed", Message: err.Error()})
		return websocket.StatusUnsupportedData, err.Error(), true
	case errors.As(err, &tooBig):
		s.enqueue(wc, &protocol.Error{Code: "too_big", Message: err.Error()})
		return websocket.StatusMessageTooBig, truncateReason(err.Error()), true
	default:
		// The connection closed or broke; over the library's own read
		// limit it has already closed with 1009 (message too big).
		return websocket.StatusNormalClosure, "", true
	}
	wc.lastSeen.Store(time.Now().UnixNano())
	wc.wire.bytesIn.Add(int64(len(buf.frame)))
	buf.dec.MaxBytes, buf.dec.Bounds = int(max(limit, s.cfg.MaxControlBytes)), s.cfg.FrameBounds
	m, err := buf.dec.Decode(buf.frame)
	var job *Job // a result's: the job it names, one this connection was given
	if res, ok := m.(*protocol.Result); ok {
		if job = wc.jobOf(res.JobID); job == nil {
			s.unknownJob(wc, res.LeaseID, res.JobID)
			return 0, "", false
		}
		if len(res.Rollouts) > 0 && job.Spec.Kind == jobspec.KindRL {
			job.wire.rollout(len(buf.frame))
		} else {
			job.wire.result(len(buf.frame), job.model.NumParams)
		}
		if err == nil {
			s.observeResult(wc, res) // wire.go: its backend, link and comm share
		}
	}
	var ve *protocol.ValidationError
	switch {
	case err == nil:
	case errors.As(err, &ve) && m != nil:
		// Well framed but invalid. An invalid result is rejected
		// like any other (a diverged model makes honest workers send
		// NaNs); other messages get an error, and the connection
		// closes if this keeps happening.
		if res, ok := m.(*protocol.Result); ok {
			nonFinite := res.Update.FirstNonFinite() >= 0 || math.IsNaN(res.LossSum) || math.IsInf(res.LossSum, 0)
			s.submit(ctx, wc, job, submission{worker: wc.id, volunteer: wc.volunteer, res: res, reason: protocol.ReasonInvalid, detail: err.Error(),
				nonFinite: nonFinite, recv: buf.recv})
			return 0, "", false
		}
		if *bad++; *bad > maxBadMessages {
			return websocket.StatusPolicyViolation, "too many invalid messages", true
		}
		s.enqueue(wc, &protocol.Error{Code: "invalid", Message: err.Error()})
		return 0, "", false
	default:
		// Framing we cannot parse: the stream cannot be trusted. The
		// peer may already be gone (coder/websocket hands over what
		// arrived of a message whose connection dropped as if it were
		// whole); then the error and the close frame simply fail.
		s.enqueue(wc, &protocol.Error{Code: "malformed", Message: err.Error()})
		return websocket.StatusUnsupportedData, truncateReason(err.Error()), true
	}
	switch m := m.(type) {
	case *protocol.Want:
		s.route(ctx, wc, m.N) // route.go
	case *protocol.Result:
		if detail := job.unpackUpdate(m, buf); detail != "" { // updatecodec.go
			s.submit(ctx, wc, job, submission{worker: wc.id, volunteer: wc.volunteer, res: m, reason: protocol.ReasonInvalid, detail: detail, recv: buf.recv})
			return 0, "", false
		}
		norm := m.Update.Norm()
		sub := submission{worker: wc.id, volunteer: wc.volunteer, res: m, norm: norm, hash: engine.UpdateHashNorm(m.Update, norm), recv: buf.recv,
			finite: m.Codec == "" || m.Codec == protocol.CodecF32}
		pause, over := s.resultBytes(wc, len(buf.frame)) // limits.go
		if over {
			sub.reason, sub.detail = protocol.ReasonRateLimited, s.rateLimitedResult(pause)
		}
		s.submit(ctx, wc, job, sub)
		s.pauseReading(pause)
	case *protocol.Start:
		s.start(ctx, wc, m.JobID, m.LeaseID)
	case *protocol.Release:
		for _, job := range wc.jobsNamed(m.JobID) {
			_ = job.exec(ctx, func(*jobState) { job.releaseLeases(wc.id, m.LeaseIDs, m.Reason) })
		}
	case *protocol.Bye:
		return websocket.StatusNormalClosure, "bye", true
	default:
		if *bad++; *bad > maxBadMessages {
			return websocket.StatusPolicyViolation, "too many invalid messages", true
		}
		s.enqueue(wc, &protocol.Error{Code: "unexpected", Message: fmt.Sprintf("a worker does not send %s messages", m.MessageType())})
	}
	return 0, "", false
}

// start answers a worker that begins computing a "latest" lease with the
// base version the coordinator fixes now; a lease it does not hold, or one
// of a job that stopped, gets a rejecting ack (docs/PROTOCOL.md).
func (s *Server) start(ctx context.Context, wc *workerConn, jobID string, leaseID uint64) {
	var started *protocol.Started
	serr := fmt.Errorf("no job %q was given to this worker", jobID)
	for _, job := range wc.jobsNamed(jobID) {
		if err := job.exec(ctx, func(*jobState) { started, serr = job.start(wc.id, leaseID, "") }); err != nil {
			return
		}
		if !errors.Is(serr, engine.ErrNotHeld) {
			break
		}
	}
	if serr != nil {
		code := protocol.ReasonNotRunning
		if errors.Is(serr, engine.ErrNotHeld) {
			code = protocol.ReasonUnknownLease
		}
		// A rejecting ack for the lease (docs/PROTOCOL.md): the worker
		// drops it, sends no result and asks for another.
		wc.rejected.Add(1)
		s.enqueue(wc, &protocol.Ack{LeaseID: leaseID, Reason: code, Detail: fmt.Sprintf("cannot start lease %d: %v", leaseID, serr)})
		return
	}
	s.enqueue(wc, started)
}

func (s *Server) submit(ctx context.Context, wc *workerConn, job *Job, sub submission) {
	// Counted on the loop, with the credit apply gave: a view read once
	// the job has stopped sees both or neither.
	examples := int64(sub.res.Examples)
	count := func(ack protocol.Ack) {
		if ack.Accepted {
			wc.accepted.Add(1)
			wc.examples.Add(examples)
			if len(sub.res.Rollouts) > 0 {
				wc.rollouts.Add(1)
			}
		} else {
			wc.rejected.Add(1)
		}
	}
	later := make(chan protocol.Ack, 1)
	sub.decided = func(ack protocol.Ack) { count(ack); later <- ack }
	var ack protocol.Ack
	if err := job.exec(ctx, func(*jobState) {
		if ack = job.apply(sub); ack.Reason != ackLater {
			count(ack)
		}
	}); err != nil {
		return
	}
	if ack.Reason == ackLater {
		// The coordinator recomputes the result (recheck.go): this
		// connection's next messages wait for its ack, the job does not.
		select {
		case ack = <-later:
		case <-ctx.Done():
			return
		}
	}
	wc.lastStaleness.Store(ack.Staleness)
	// The frame's upload time, for the worker's link estimate.
	ack.RecvMs = float64(sub.recv.Microseconds()) / 1000
	s.enqueue(wc, &ack)
}

// saveWorker queues the worker's record for the store, if there is one.
// It never waits for the store: joining and leaving must not stall on a
// slow or frozen disk.
func (s *Server) saveWorker(wc *workerConn) {
	if s.workerRecords == nil {
		return
	}
	v := wc.view()
	s.workerRecords.record(store.WorkerRecord{
		ID: v.ID, JobID: v.Job, Kind: v.Kind, Backend: v.Backend, Client: v.Client, Remote: v.Remote,
		Threads: v.Threads, FirstSeen: v.ConnectedAt, LastSeen: v.LastSeen,
		Examples: v.Examples, Accepted: v.Accepted, Rejected: v.Rejected,
	})
}
