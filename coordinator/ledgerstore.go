package coordinator

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/crowdtrain/crowdtrain/store"
)

// ledgerFlushEvery is the least time between two writes of the ledger:
// credit changes with every accepted result, and one transaction a second
// (one fsync) carries all of them. A coordinator killed outright (SIGKILL,
// power) loses at most the last second of credit; Close writes the rest.
const ledgerFlushEvery = time.Second

// ledgerWriter writes the volunteer book behind: the book marks what
// changed (under its own lock, never waiting), and one goroutine writes
// the changed volunteers' rows and the address bans and lifts in one
// transaction, at most once per ledgerFlushEvery.
type ledgerWriter struct {
	db  *store.Store
	log *slog.Logger
	// Guarded by the book's mu.
	dirty map[string]bool
	lifts []string
	bans  []store.AddressBan

	wake     chan struct{}
	stop     chan struct{}
	stopOnce sync.Once
	done     chan struct{}
	failed   atomic.Int64 // failed batch writes (retried)
}

// load fills the book from db and starts writing to it behind.
func (b *volunteerBook) load(ctx context.Context, db *store.Store, log *slog.Logger) error {
	vols, err := db.Volunteers(ctx)
	if err != nil {
		return err
	}
	bans, err := db.AddressBans(ctx)
	if err != nil {
		return err
	}
	toks, err := db.JoinTokens(ctx)
	if err != nil {
		return err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, v := range vols {
		b.byID[v.ID] = &volunteerStanding{
			Name: v.Name, TokenID: v.TokenID, Examples: v.Examples, FLOPs: v.FLOPs,
			RefutedExamples: v.RefutedExamples, RefutedFLOPs: v.RefutedFLOPs, Strikes: v.Strikes,
			Banned: v.Banned, BanReason: v.BanReason, FirstSeen: v.FirstSeen, LastSeen: v.LastSeen, Addresses: v.Addresses,
		}
	}
	for _, ban := range bans {
		b.addrBans[ban.Address] = ban
	}
	for _, t := range toks {
		jt := &joinToken{ID: t.ID, Name: t.Name, CreatedAt: t.CreatedAt, RevokedAt: t.RevokedAt}
		copy(jt.Sum[:], t.SecretHash)
		b.tokens[t.ID] = jt
	}
	b.w = newLedgerWriter(db, log)
	go b.w.run(b)
	return nil
}

func newLedgerWriter(db *store.Store, log *slog.Logger) *ledgerWriter {
	return &ledgerWriter{db: db, log: log, dirty: map[string]bool{},
		wake: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
}

// dirty marks v's row for the next write; mu is held.
func (b *volunteerBook) dirty(v string) {
	if b.w == nil {
		return
	}
	b.w.dirty[v] = true
	b.w.poke()
}

// queueBan and queueLift queue address bans and lifts; mu is held. A lift
// drops the queued bans it lifts, because a batch applies its lifts first.
func (b *volunteerBook) queueBan(ban store.AddressBan) {
	if b.w != nil {
		b.w.bans = append(b.w.bans, ban)
	}
}

func (b *volunteerBook) queueLift(v string) {
	if b.w == nil {
		return
	}
	b.w.bans = slices.DeleteFunc(b.w.bans, func(ban store.AddressBan) bool { return ban.Volunteer == v })
	b.w.lifts = append(b.w.lifts, v)
}

func (w *ledgerWriter) poke() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

func (w *ledgerWriter) run(b *volunteerBook) {
	defer close(w.done)
	pause := time.NewTimer(0)
	defer pause.Stop()
	for {
		select {
		case <-w.wake:
		case <-w.stop:
			w.flush(b)
			return
		}
		w.flush(b)
		// Whatever changes meanwhile waits for the next write.
		pause.Reset(ledgerFlushEvery)
		select {
		case <-pause.C:
		case <-w.stop:
			w.flush(b)
			return
		}
	}
}

// flush writes what changed since the last write. A failed write is put
// back to be retried with the next.
func (w *ledgerWriter) flush(b *volunteerBook) {
	b.mu.Lock()
	batch := store.VolunteerBatch{LiftBansOf: w.lifts, Bans: w.bans}
	ids := slices.Sorted(maps.Keys(w.dirty))
	for _, id := range ids {
		if s := b.byID[id]; s != nil {
			batch.Volunteers = append(batch.Volunteers, s.record(id))
		}
	}
	clear(w.dirty)
	w.lifts, w.bans = nil, nil
	b.mu.Unlock()
	if len(batch.Volunteers) == 0 && len(batch.LiftBansOf) == 0 && len(batch.Bans) == 0 {
		return
	}
	if err := w.db.SaveVolunteers(context.Background(), batch); err != nil {
		if w.failed.Add(1)%100 == 1 {
			w.log.Error(fmt.Sprintf("volunteer ledger: %d volunteers not written (retried with the next write): %v", len(batch.Volunteers), err))
		}
		b.mu.Lock()
		for _, id := range ids {
			w.dirty[id] = true
		}
		// The failed batch's lifts and bans come before the newer ones;
		// a newer lift drops the failed bans it covers.
		bans := batch.Bans
		for _, v := range w.lifts {
			bans = slices.DeleteFunc(bans, func(ban store.AddressBan) bool { return ban.Volunteer == v })
		}
		w.lifts = append(batch.LiftBansOf, w.lifts...)
		w.bans = append(bans, w.bans...)
		b.mu.Unlock()
		w.poke()
	}
}

// close writes what is left and stops, waiting no later than deadline.
// Later calls only wait.
func (b *volunteerBook) close(deadline time.Time) error {
	if b.w == nil {
		return nil
	}
	b.w.stopOnce.Do(func() { close(b.w.stop) })
	t := time.NewTimer(time.Until(deadline))
	defer t.Stop()
	select {
	case <-b.w.done:
		return nil
	case <-t.C:
		return fmt.Errorf("volunteer ledger: the store (%s) did not take the last credit before the shutdown deadline; "+
			"up to the last second of credit is lost", b.w.db.Path())
	}
}

// record is s as the store keeps it.
func (s *volunteerStanding) record(id string) store.VolunteerRecord {
	return store.VolunteerRecord{
		ID: id, Name: s.Name, TokenID: s.TokenID, Examples: s.Examples, FLOPs: s.FLOPs,
		RefutedExamples: s.RefutedExamples, RefutedFLOPs: s.RefutedFLOPs, Strikes: s.Strikes,
		Banned: s.Banned, BanReason: s.BanReason, FirstSeen: s.FirstSeen, LastSeen: s.LastSeen,
		Addresses: slices.Clone(s.Addresses),
	}
}
