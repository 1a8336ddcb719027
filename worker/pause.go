package worker

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/crowdtrain/crowdtrain/protocol"
)

// IdleDetector says whether the machine is otherwise idle: nobody at it,
// nothing else wanting its CPUs. why says what was measured, for the log
// and the progress line ("others use 80% of 4 CPUs"). A detector is
// called from one goroutine, every Config.PollEvery.
type IdleDetector interface {
	Idle() (idle bool, why string)
}

// DefaultPollEvery is how often a worker with Config.Idle or Config.Hours
// asks them: twice a second, so that it stops within a second of the
// user coming back.
const DefaultPollEvery = 500 * time.Millisecond

// pauseState is whether the worker may compute now. Changes close
// changed, so that a session waiting on it wakes.
type pauseState struct {
	mu      sync.Mutex
	paused  bool
	why     string
	changed chan struct{}
}

// Pause stops the worker leasing: it asks for no more work, and hands back
// (protocol release) every lease it holds that it has not begun to
// compute. The task being computed finishes and its result is sent. why
// says what made it pause; it goes into the release and Stats.
func (w *Worker) Pause(why string) { w.setPaused(true, why) }

// Resume undoes Pause: the worker asks for work again.
func (w *Worker) Resume() { w.setPaused(false, "") }

func (w *Worker) setPaused(paused bool, why string) {
	p := &w.pause
	p.mu.Lock()
	changed := p.paused != paused
	p.paused, p.why = paused, why
	if changed && p.changed != nil {
		close(p.changed)
		p.changed = nil
	}
	p.mu.Unlock()
	w.update(func(s *Stats) { s.Paused, s.PauseReason = paused, why })
	if changed && paused {
		w.cfg.Logf("pausing: %s", why)
	} else if changed {
		w.cfg.Logf("resuming")
	}
}

// paused reports whether the worker is paused, why, and a channel closed
// at the next change.
func (w *Worker) paused() (bool, string, <-chan struct{}) {
	p := &w.pause
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.changed == nil {
		p.changed = make(chan struct{})
	}
	return p.paused, p.why, p.changed
}

func (w *Worker) isPaused() bool {
	paused, _, _ := w.paused()
	return paused
}

// govern pauses and resumes the worker by Config.Idle and Config.Hours
// until ctx ends. It pauses as soon as either says no, and resumes once
// both have said yes for Config.ResumeAfter.
func (w *Worker) govern(ctx context.Context) {
	cfg := &w.cfg
	var idleSince time.Time // when both last turned yes; zero while no
	tick := time.NewTicker(cfg.PollEvery)
	defer tick.Stop()
	for {
		ok, why := true, ""
		now := cfg.Now()
		if cfg.Hours.Set() && !cfg.Hours.Contains(now) {
			ok, why = false, fmt.Sprintf("outside the hours %s (local time %s)", cfg.Hours, now.Format("15:04"))
		} else if cfg.Idle != nil {
			var idle bool
			idle, why = cfg.Idle.Idle()
			if !idle {
				ok, why = false, "the machine is busy: "+why
			}
		}
		switch {
		case !ok:
			idleSince = time.Time{}
			w.Pause(why)
		case idleSince.IsZero():
			idleSince = now
			fallthrough
		default:
			if now.Sub(idleSince) >= cfg.ResumeAfter {
				w.Resume()
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// handBack gives lease l back unstarted because the worker is paused.
func (s *session) handBack(ctx context.Context, l protocol.Lease) error {
	s.held.Add(-1)
	s.counts.Delete(l.ID)
	s.starved.Store(true)
	_, why, _ := s.w.paused()
	return s.send(ctx, &protocol.Release{LeaseIDs: []uint64{l.ID}, Reason: truncate("worker paused: "+why, 1000), JobID: l.JobID})
}

// want asks for n more leases, unless the worker is paused: then it notes
// that the pipeline is short, and the resume asks.
func (s *session) want(ctx context.Context, n int) error {
	if s.w.isPaused() {
		s.starved.Store(true)
		return nil
	}
	return s.send(ctx, &protocol.Want{N: n})
}

// resumed refills the pipeline after a pause: as many leases as it lacks.
func (s *session) resumed(ctx context.Context) error {
	if !s.starved.Swap(false) {
		return nil
	}
	return s.send(ctx, &protocol.Want{N: max(1, s.w.cfg.Prefetch-int(s.held.Load()))})
}

// Hours is a daily window of local time in which the worker computes;
// the zero value is the whole day. A window may wrap midnight (22-07).
type Hours struct {
	from, to time.Duration // since midnight; from == to only when unset
}

// ParseHours reads a window as FROM-TO, each H or H:MM on a 24-hour
// clock (TO may be 24): "22-07" is ten at night to seven in the morning,
// "9:30-17" half past nine to five.
func ParseHours(s string) (Hours, error) {
	a, b, ok := strings.Cut(strings.TrimSpace(s), "-")
	if !ok {
		return Hours{}, fmt.Errorf("%q is not a window FROM-TO of hours, such as 22-07 or 9:30-17", s)
	}
	from, err := parseClock(a)
	if err != nil {
		return Hours{}, fmt.Errorf("%q: %v", s, err)
	}
	to, err := parseClock(b)
	if err != nil {
		return Hours{}, fmt.Errorf("%q: %v", s, err)
	}
	if from == 24*time.Hour {
		from = 0
	}
	if to == 24*time.Hour {
		to = 0
	}
	if from == to {
		return Hours{}, fmt.Errorf("%q starts where it ends; to compute at any hour, leave the window out", s)
	}
	return Hours{from: from, to: to}, nil
}

func parseClock(s string) (time.Duration, error) {
	hs, ms, hasMin := strings.Cut(strings.TrimSpace(s), ":")
	h, err := strconv.Atoi(hs)
	if err != nil || h < 0 || h > 24 || len(hs) > 2 {
		return 0, fmt.Errorf("hour %q is not 0..24", hs)
	}
	m := 0
	if hasMin {
		if m, err = strconv.Atoi(ms); err != nil || m < 0 || m > 59 || len(ms) != 2 {
			return 0, fmt.Errorf("minutes %q are not 00..59", ms)
		}
	}
	if h == 24 && m != 0 {
		return 0, fmt.Errorf("%q is past the end of the day", s)
	}
	return time.Duration(h)*time.Hour + time.Duration(m)*time.Minute, nil
}

// Set reports whether h is a window rather than the whole day.
func (h Hours) Set() bool { return h.from != h.to }

// Contains reports whether t's local wall-clock time falls in the window:
// from its start, up to but not including its end.
func (h Hours) Contains(t time.Time) bool {
	if !h.Set() {
		return true
	}
	c := time.Duration(t.Hour())*time.Hour + time.Duration(t.Minute())*time.Minute +
		time.Duration(t.Second())*time.Second + time.Duration(t.Nanosecond())
	if h.from < h.to {
		return h.from <= c && c < h.to
	}
	return c >= h.from || c < h.to // wraps midnight
}

func (h Hours) String() string {
	if !h.Set() {
		return "0-24"
	}
	f := func(d time.Duration) string {
		hh, mm := int(d/time.Hour), int(d%time.Hour/time.Minute)
		if mm == 0 {
			return fmt.Sprintf("%02d", hh)
		}
		return fmt.Sprintf("%02d:%02d", hh, mm)
	}
	return f(h.from) + "-" + f(h.to)
}
