package coordinator

import (
	"context"
	"net"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// fakePeer answers pings while answering is set; otherwise a ping waits
// for its context, as a real one does for a pong that never comes.
type fakePeer struct {
	answering atomic.Bool
	pings     atomic.Int32
	closed    atomic.Bool
}

func (p *fakePeer) Ping(ctx context.Context) error {
	p.pings.Add(1)
	if p.closed.Load() {
		return net.ErrClosed
	}
	if p.answering.Load() {
		return nil
	}
	<-ctx.Done()
	return ctx.Err()
}

func (p *fakePeer) CloseNow() error { p.closed.Store(true); return nil }

// The liveness rule on a fake clock: a peer that answers is never
// dropped; one that stops is dropped when its misses-th ping in a row
// times out, (misses+1) intervals after it stopped answering at the
// latest; a single miss followed by an answer starts the count again.
func TestLivenessDropsAPeerAfterItsMissedPings(t *testing.T) {
	const interval, misses = 10 * time.Second, 3
	synctest.Test(t, func(t *testing.T) {
		p := &fakePeer{}
		p.answering.Store(true)
		var goneAt time.Time
		var why string
		start := time.Now()
		stop := watchLiveness(p, interval, misses, func(w string) { goneAt, why = time.Now(), w })
		defer stop()

		time.Sleep(time.Hour)
		synctest.Wait()
		if p.closed.Load() || p.pings.Load() != 360 {
			t.Fatalf("an answering peer after an hour: closed %v, %d pings; want open and 360 pings", p.closed.Load(), p.pings.Load())
		}

		// One missed ping, then answers again: the count starts over.
		p.answering.Store(false)
		time.Sleep(interval + interval/2) // the next ping is out and unanswered
		p.answering.Store(true)
		time.Sleep(10 * interval)
		synctest.Wait()
		if p.closed.Load() {
			t.Fatal("a peer that missed one ping and answered the next was dropped")
		}

		p.answering.Store(false)
		stoppedAt := time.Now()
		time.Sleep(time.Duration(misses+2) * interval)
		synctest.Wait()
		if !p.closed.Load() {
			t.Fatalf("a silent peer is still open %v after it stopped answering", time.Since(stoppedAt))
		}
		// Pings go out on the interval's grid from start; the silent
		// peer's first unanswered ping is the next one, and each waits
		// one interval.
		firstMissed := start.Add(stoppedAt.Sub(start).Truncate(interval) + interval)
		if want := firstMissed.Add(misses * interval); !goneAt.Equal(want) {
			t.Errorf("dropped at %v, want %v (%d missed pings, %v apart)", goneAt.Sub(start), want.Sub(start), misses, interval)
		}
		if why != "no answer to 3 pings in a row, 10s apart" {
			t.Errorf("reason %q", why)
		}
	})
}

func TestLivenessOffWithoutAnInterval(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := &fakePeer{}
		stop := watchLiveness(p, 0, 3, func(string) { t.Error("dropped with pings off") })
		defer stop()
		time.Sleep(time.Hour)
		synctest.Wait()
		if p.pings.Load() != 0 {
			t.Fatalf("%d pings with the interval off", p.pings.Load())
		}
	})
}
