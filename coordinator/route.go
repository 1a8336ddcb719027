package coordinator

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/crowdtrain/crowdtrain/compute"
	"github.com/crowdtrain/crowdtrain/engine/placement"
	"github.com/crowdtrain/crowdtrain/jobspec"
	"github.com/crowdtrain/crowdtrain/protocol"
)

// The grid's scheduler across jobs (docs/SCHEDULING.md). A connection is
// bound to no job: each want is routed to the job placement.Pool ranks
// first for the worker among the running jobs it can run, falling
// through to the next while a job has no task free. Each job's loop
// still owns its leases; routing only chooses whose loop to ask.

// placeInfo is what placement knows of j, rebuilt when its spec changes.
func (j *Job) placeInfo(spec jobspec.Spec) *placement.Job {
	p := &placement.Job{
		ID: j.ID, Priority: spec.Priority, Weight: spec.EffectiveWeight(),
		Needs: placement.Needs{Kinds: spec.Requires.Kind, MinMemoryMB: spec.Requires.MinMemoryMB,
			RL: spec.Kind == jobspec.KindRL, RLLocalSteps: spec.Kind == jobspec.KindRL && spec.Mode == jobspec.ModeDiLoCo},
		NumParams: j.model.NumParams,
		Parent:    j.parent,
	}
	whole, micro := compute.MemoryNeed(j.model, spec.BatchSize)
	p.NeedMB, p.MicroNeedMB = toMB(whole), toMB(micro)
	if j.shardSet != nil {
		p.Data = j.shardSet.key
	}
	for _, l := range j.model.Plan() {
		if !slices.Contains(p.Layers, l.Type) {
			p.Layers = append(p.Layers, l.Type)
		}
	}
	return p
}

// toMB rounds bytes up to whole MB.
func toMB(bytes int64) int { return int((bytes + 1<<20 - 1) >> 20) }

// placeWorker is what placement knows of a connection.
func (wc *workerConn) placeWorker() *placement.Worker {
	w := &placement.Worker{Kind: wc.hello.Kind, Pin: wc.hello.Job}
	if c := wc.hello.Caps; c != nil {
		w.MemoryMB, w.MaxParams, w.Layers, w.Data = c.MemoryMB, c.MaxParams, c.Layers, c.Data
		w.MicroBatches, w.RL, w.RLLocalSteps = c.MicroBatches, c.RL, c.RLLocalSteps
	}
	if j := wc.cur.Load(); j != nil {
		w.Current = j.ID
		if since := wc.curSince.Load(); since != 0 {
			w.Since = time.Unix(0, since)
		}
		// It has the shards of the job it computes for.
		if j.shardSet != nil && !slices.Contains(w.Data, j.shardSet.key) {
			w.Data = append(slices.Clip(w.Data), j.shardSet.key)
		}
	}
	return w
}

// jobList is the server's jobs, oldest first.
func (s *Server) jobList() []*Job {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.jobs)
}

// placeable are the running jobs, with what placement knows of each.
func (s *Server) placeable() ([]*Job, []*placement.Job) {
	var jobs []*Job
	var infos []*placement.Job
	for _, j := range s.jobList() {
		if !j.active.Load() {
			continue
		}
		if p := j.place.Load(); p != nil {
			jobs, infos = append(jobs, j), append(infos, p)
		}
	}
	return jobs, infos
}

// order is the jobs wc may compute for, best first.
func (s *Server) order(wc *workerConn) []*Job {
	jobs, infos := s.placeable()
	w := wc.placeWorker()
	s.poolMu.Lock()
	ranked := s.pool.Order(w, infos, time.Now())
	s.poolMu.Unlock()
	byID := make(map[string]*Job, len(jobs))
	for _, j := range jobs {
		byID[j.ID] = j
	}
	out := make([]*Job, len(ranked))
	for i, p := range ranked {
		out[i] = byID[p.ID]
	}
	return out
}

// route answers a want of n leases: from the first job in wc's order that
// has tasks free, with an assign first when that is not the job wc
// computes for; an idle when none has.
func (s *Server) route(ctx context.Context, wc *workerConn, n int) {
	wc.routeMu.Lock()
	defer wc.routeMu.Unlock()
	if s.volunteers.banned(wc.volunteer, wc.clientKey) {
		return // its connection is closing
	}
	order := s.order(wc)
	held := heldCounter{ctx: ctx, wc: wc}
	var limited string
	for rank, job := range order {
		var leases []protocol.Lease
		var why string
		elsewhere := held.except(job) // every job's leases count against MaxLeases
		joined := wc.given(job)
		err := job.exec(ctx, func(st *jobState) {
			if !joined {
				// A member first: its volunteer, address and snapshot
				// codec shape the grant (limits, spot checks, URLs).
				job.join(wc.id, wc.member(job))
			}
			free := s.cfg.MaxLeases - elsewhere - job.heldBy(wc.id)
			if share, lim := job.leaseShare(wc.id); share < free { // limits.go
				free, why = share, lim
			}
			if free > 0 {
				why = ""
				leases = job.grant(wc.id, min(n, free), "")
				if len(leases) == 0 {
					leases = job.backup(wc.id, "") // stragglers.go
				}
				if len(leases) == 0 {
					job.noteStarved(wc.id) // volunteershare.go
				}
			}
		})
		if err != nil {
			continue
		}
		if len(leases) == 0 {
			if why != "" && limited == "" {
				limited = why
			}
			continue
		}
		if wc.cur.Load() != job && !s.assign(wc, job, rank == 0) {
			// Not told of the job: the leases go back.
			_ = job.exec(context.Background(), func(*jobState) {
				ids := make([]uint64, len(leases))
				for i := range leases {
					ids[i] = leases[i].ID
				}
				job.releaseLeases(wc.id, ids, "the worker could not be told of the job")
			})
			return
		}
		var examples int
		for i := range leases {
			examples += leases[i].Count
		}
		s.poolMu.Lock()
		s.pool.Charge(job.ID, float64(examples)*job.flopsPerExample, time.Now())
		s.poolMu.Unlock()
		for i := range leases {
			wc.wire.localSteps.Store(int64(leases[i].LocalSteps))
			if !s.enqueue(wc, &leases[i]) {
				return
			}
		}
		return
	}
	if held.except(nil) > 0 && limited == "" {
		return // it has work; it asks again after each result
	}
	idle := &protocol.Idle{Reason: "no task free right now", RetryMs: s.cfg.IdleRetry.Milliseconds()}
	switch {
	case limited != "":
		idle.Reason, idle.RetryMs = limited, max(1000, idle.RetryMs)
	case len(order) == 0:
		idle.Reason, idle.RetryMs = s.noJobReason(wc), max(1000, idle.RetryMs)
	}
	s.enqueue(wc, idle)
}

// heldCounter counts the leases a connection holds in the jobs it was
// given, asking each job's loop at most once per want; a connection on
// one job asks none but the one it is granted from.
type heldCounter struct {
	ctx context.Context
	wc  *workerConn
	by  map[*Job]int
}

// except is the leases held in every job but skip.
func (h *heldCounter) except(skip *Job) int {
	if h.by == nil {
		h.by = map[*Job]int{}
	}
	n := 0
	for _, j := range h.wc.jobList() {
		if j == skip {
			continue
		}
		c, ok := h.by[j]
		if !ok {
			_ = j.exec(h.ctx, func(*jobState) { c = j.heldBy(h.wc.id) })
			h.by[j] = c
		}
		n += c
	}
	return n
}

// assign makes job the one wc computes for (route made it a member of
// the job before its grant) and tells wc of it. chosen is false when wc
// lands on job only because the jobs ranked before it had nothing for it
// (an epoch's tail, a round with all its leases out): it gets no stay
// there and goes back as soon as they have work; a stay would hand the
// job it fell to a share that fairness never takes back. It reports
// false when the message could not be queued (the connection is going).
func (s *Server) assign(wc *workerConn, job *Job, chosen bool) bool {
	if l := job.maxMessageBytes(); l > wc.resultLimit.Load() {
		wc.resultLimit.Store(l)
	}
	var since int64
	if chosen {
		since = time.Now().UnixNano()
	}
	wc.curSince.Store(since)
	prev := wc.cur.Swap(job)
	info, limits := s.jobInfo(wc, job)
	if prev != nil {
		s.cfg.Logger.Info(fmt.Sprintf("worker %s moves from job %s to job %s", wc.id, prev.ID, job.ID), logWorker, wc.id, logVolunteer, wc.volunteer, logJob, job.ID, "from", prev.ID)
	}
	return s.enqueue(wc, &protocol.Assign{Job: info, Limits: limits})
}

// given records that job was given to wc (it is, or is about to be, a
// member of the job: its leases there are released when it leaves), and
// reports whether it was already.
func (wc *workerConn) given(job *Job) bool {
	wc.jobsMu.Lock()
	defer wc.jobsMu.Unlock()
	_, known := wc.jobs[job.ID]
	wc.jobs[job.ID] = job
	return known
}

// welcome is wc's welcome: it names the job wc is placed on first, when
// one fits.
func (s *Server) welcome(wc *workerConn) *protocol.Welcome {
	w := &protocol.Welcome{WorkerID: wc.id}
	wc.routeMu.Lock()
	defer wc.routeMu.Unlock()
	order := s.order(wc)
	if len(order) == 0 {
		return w
	}
	job := order[0]
	if !wc.given(job) {
		_ = job.exec(context.Background(), func(*jobState) { job.join(wc.id, wc.member(job)) })
	}
	wc.curSince.Store(time.Now().UnixNano())
	wc.cur.Store(job)
	wc.resultLimit.Store(job.maxMessageBytes())
	w.Job, w.Limits = s.jobInfo(wc, job)
	return w
}

// member is wc as a member of job.
func (wc *workerConn) member(job *Job) member {
	h := &wc.hello
	return member{volunteer: wc.volunteer, address: wc.clientKey, kind: h.Kind, backend: h.Backend, snapCodec: job.snapshotCodec(h),
		rebase: h.SnapshotRebase}
}

// jobInfo is what a worker is told of job, and its limits.
func (s *Server) jobInfo(wc *workerConn, job *Job) (protocol.JobInfo, protocol.Limits) {
	info := protocol.JobInfo{ID: job.ID, Name: job.Spec.Name, Model: job.Spec.Model, NumParams: job.model.NumParams}
	job.welcomeCodec(&info, wc.hello.Codecs)          // updatecodec.go
	info.SnapshotCodec = job.snapshotCodec(&wc.hello) // deltas.go
	return info, protocol.Limits{
		MaxMessageBytes: job.maxMessageBytes(),
		LeaseTimeoutMs:  job.Spec.LeaseTimeout.Milliseconds(),
		MaxLeases:       s.cfg.MaxLeases,
	}
}

// jobList is the jobs wc was given this session.
func (wc *workerConn) jobList() []*Job {
	wc.jobsMu.Lock()
	defer wc.jobsMu.Unlock()
	out := make([]*Job, 0, len(wc.jobs))
	for _, j := range wc.jobs {
		out = append(out, j)
	}
	return out
}

// jobOf is the job a message names, which must be one wc was given; an
// empty id is the job it computes for now.
func (wc *workerConn) jobOf(id string) *Job {
	if id == "" {
		return wc.cur.Load()
	}
	wc.jobsMu.Lock()
	defer wc.jobsMu.Unlock()
	return wc.jobs[id]
}

// noJobReason says why no job is given to wc, for its idle message.
func (s *Server) noJobReason(wc *workerConn) string {
	jobs, infos := s.placeable()
	if len(jobs) == 0 {
		return "no job is running on this coordinator; waiting for one"
	}
	w := wc.placeWorker()
	var whys []string
	for _, p := range infos {
		whys = append(whys, p.ID+": "+placement.Fit(w, p))
	}
	sort.Strings(whys)
	return truncateText("no running job fits this worker ("+strings.Join(whys, "; ")+")", 1000)
}

// truncateText cuts s to at most n bytes, for messages that quote
// what a worker or an operator chose.
func truncateText(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}

// handOff moves job's workers elsewhere at once when it stops handing out
// work (paused, done, failed, stopped): each is told its leases of the
// job are void and asks again, and its want is placed on another job.
func (s *Server) handOff(job *Job, state string) {
	s.mu.Lock()
	var ws []*workerConn
	for _, w := range s.workers {
		if w.cur.Load() == job {
			ws = append(ws, w)
		}
	}
	s.mu.Unlock()
	for _, w := range ws {
		w.cur.CompareAndSwap(job, nil)
		s.enqueue(w, &protocol.Revoke{JobID: job.ID, Reason: fmt.Sprintf("job %s is %s", job.ID, state)})
	}
	if ended(state) {
		s.poolMu.Lock()
		s.pool.Forget(job.ID)
		s.poolMu.Unlock()
	}
}

// placementWarning says why a running job has no worker although some are
// connected ("" when one can run it): the job waits for one.
func (s *Server) placementWarning(j *Job) string {
	p := j.place.Load()
	if p == nil || !j.active.Load() {
		return ""
	}
	s.mu.Lock()
	var ws []*placement.Worker
	for _, w := range s.workers {
		ws = append(ws, w.placeWorker())
	}
	s.mu.Unlock()
	if len(ws) == 0 {
		return ""
	}
	counts := map[string]int{}
	for _, w := range ws {
		why := placement.Fit(w, p)
		if why == "" {
			return ""
		}
		counts[why]++
	}
	var parts []string
	for why, n := range counts {
		parts = append(parts, fmt.Sprintf("%d with %s", n, why))
	}
	sort.Strings(parts)
	return "no connected worker can run this job, so it waits: " + strings.Join(parts, "; ")
}

// jobsNamed are the jobs a start or release may be for: the one it names,
// or, from a worker that names none, each job it was given, its current
// one first.
func (wc *workerConn) jobsNamed(id string) []*Job {
	if id != "" {
		if j := wc.jobOf(id); j != nil {
			return []*Job{j}
		}
		return nil
	}
	all := wc.jobList()
	if cur := wc.cur.Load(); cur != nil {
		if i := slices.Index(all, cur); i > 0 {
			all[0], all[i] = all[i], all[0]
		}
	}
	return all
}

// unknownJob rejects a result for a job this connection was never given:
// nothing of it reaches any job.
func (s *Server) unknownJob(wc *workerConn, lease uint64, jobID string) {
	wc.rejected.Add(1)
	s.enqueue(wc, &protocol.Ack{LeaseID: lease, Reason: protocol.ReasonUnknownLease,
		Detail: fmt.Sprintf("lease %d names job %q, which this coordinator did not give this worker", lease, truncateText(jobID, 200))})
}
