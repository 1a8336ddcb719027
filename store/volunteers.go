package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/mattn/go-sqlite3"
)

// VolunteerRecord is one volunteer's standing: the credit of its accepted
// results, what was refuted of it, its strikes and its ban. Times come
// back in UTC.
//
// The credit fields (Examples, FLOPs, RefutedExamples, RefutedFLOPs) are
// read back but never written by SaveVolunteers: credit changes only with
// the checkpoints that hold the work it pays for (Checkpoint.Credits).
type VolunteerRecord struct {
	ID      string // "k-", "a-" or "t-" and a hash or token id (coordinator/volunteers.go)
	Name    string // display name, already checked by protocol.CheckVolunteerName
	TokenID string // the join token it came with, "" for none

	Examples        int64
	FLOPs           float64
	RefutedExamples int64
	RefutedFLOPs    float64
	Strikes         int
	Banned          bool
	BanReason       string

	FirstSeen, LastSeen time.Time
	// Addresses are the client addresses it was seen from, most recent
	// last; the caller bounds how many (SaveVolunteers stores them as
	// given, replacing the ones stored before).
	Addresses []VolunteerAddress
}

// VolunteerAddress is an address a volunteer was seen from, and when last.
type VolunteerAddress struct {
	Address  string
	LastSeen time.Time
}

// AddressBan bars an address because of a volunteer's ban.
type AddressBan struct {
	Address, Volunteer, Reason string
	BannedAt                   time.Time
}

// VolunteerBatch is what one SaveVolunteers writes, in one transaction:
// the volunteers' rows (whole), the address bans to add, and the
// volunteers whose address bans are lifted (pardoned). Lifts apply
// before adds, so a pardon and a new ban in one batch leave the ban.
type VolunteerBatch struct {
	Volunteers []VolunteerRecord
	LiftBansOf []string
	Bans       []AddressBan
}

// VolunteerCredit is credit one volunteer earned in a job since its last
// checkpoint, added to the volunteer's row: examples and FLOPs of accepted
// results (a refutation takes them off again and adds them to the refuted
// counts, so any field may be negative).
type VolunteerCredit struct {
	Volunteer       string
	Examples        int64
	FLOPs           float64
	RefutedExamples int64
	RefutedFLOPs    float64
}

// addCredits adds credits to the volunteers' rows in tx, making a row for
// a volunteer not written yet (its name and standing follow with the
// next SaveVolunteers). at is first and last seen for such a row.
func addCredits(ctx context.Context, tx *sql.Tx, credits []VolunteerCredit, at int64) error {
	for _, c := range credits {
		if c.Volunteer == "" {
			return errors.New("store: a credit without a volunteer ID: set VolunteerCredit.Volunteer")
		}
		_, err := tx.ExecContext(ctx, `INSERT INTO volunteers
			(id, name, token_id, examples, flops, refuted_examples, refuted_flops, strikes, banned, ban_reason, first_seen, last_seen)
			VALUES (?, '', '', ?, ?, ?, ?, 0, 0, '', ?, ?)
			ON CONFLICT (id) DO UPDATE SET examples = examples + excluded.examples, flops = flops + excluded.flops,
				refuted_examples = refuted_examples + excluded.refuted_examples,
				refuted_flops = refuted_flops + excluded.refuted_flops`,
			c.Volunteer, c.Examples, c.FLOPs, c.RefutedExamples, c.RefutedFLOPs, at, at)
		if err != nil {
			return err
		}
	}
	return nil
}

// SaveVolunteers writes b in one transaction (one fsync). It leaves the
// rows' credit as it is (a new row starts with none): credit is written
// by SaveCheckpoint, with the model (Checkpoint.Credits).
func (s *Store) SaveVolunteers(ctx context.Context, b VolunteerBatch) error {
	if len(b.Volunteers) == 0 && len(b.LiftBansOf) == 0 && len(b.Bans) == 0 {
		return nil
	}
	doing := fmt.Sprintf("saving %d volunteers and %d address bans", len(b.Volunteers), len(b.Bans))
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return s.wrap(doing, err)
	}
	defer tx.Rollback()
	for _, v := range b.Volunteers {
		if v.ID == "" {
			return errors.New("store: SaveVolunteers: empty volunteer ID: set VolunteerRecord.ID")
		}
		v.LastSeen = orNow(v.LastSeen)
		if v.FirstSeen.IsZero() {
			v.FirstSeen = v.LastSeen
		}
		first, err := nanos(v.FirstSeen, "volunteer "+v.ID+" first_seen")
		if err != nil {
			return err
		}
		last, err := nanos(v.LastSeen, "volunteer "+v.ID+" last_seen")
		if err != nil {
			return err
		}
		_, err = tx.ExecContext(ctx, `INSERT INTO volunteers
			(id, name, token_id, examples, flops, refuted_examples, refuted_flops, strikes, banned, ban_reason, first_seen, last_seen)
			VALUES (?, ?, ?, 0, 0, 0, 0, ?, ?, ?, ?, ?)
			ON CONFLICT (id) DO UPDATE SET name = excluded.name, token_id = excluded.token_id,
				strikes = excluded.strikes, banned = excluded.banned, ban_reason = excluded.ban_reason,
				first_seen = min(first_seen, excluded.first_seen), last_seen = excluded.last_seen`,
			v.ID, v.Name, v.TokenID, v.Strikes, v.Banned, v.BanReason, first, last)
		if err != nil {
			return s.wrap(doing, err)
		}
		if _, err := tx.ExecContext(ctx, `DELETE FROM volunteer_addresses WHERE volunteer_id = ?`, v.ID); err != nil {
			return s.wrap(doing, err)
		}
		for _, a := range v.Addresses {
			at, err := nanos(orNow(a.LastSeen), "volunteer "+v.ID+" address last_seen")
			if err != nil {
				return err
			}
			if _, err := tx.ExecContext(ctx, `INSERT INTO volunteer_addresses (volunteer_id, address, last_seen) VALUES (?, ?, ?)
				ON CONFLICT (volunteer_id, address) DO UPDATE SET last_seen = excluded.last_seen`, v.ID, a.Address, at); err != nil {
				return s.wrap(doing, err)
			}
		}
	}
	for _, id := range b.LiftBansOf {
		if _, err := tx.ExecContext(ctx, `DELETE FROM address_bans WHERE volunteer_id = ?`, id); err != nil {
			return s.wrap(doing, err)
		}
	}
	for _, ban := range b.Bans {
		at, err := nanos(orNow(ban.BannedAt), "ban of "+ban.Address)
		if err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO address_bans (address, volunteer_id, reason, banned_at) VALUES (?, ?, ?, ?)
			ON CONFLICT (address) DO UPDATE SET volunteer_id = excluded.volunteer_id, reason = excluded.reason,
				banned_at = excluded.banned_at`, ban.Address, ban.Volunteer, ban.Reason, at); err != nil {
			return s.wrap(doing, err)
		}
	}
	return s.wrap(doing, tx.Commit())
}

// Volunteers returns every volunteer with its addresses, in the order
// first seen.
func (s *Store) Volunteers(ctx context.Context) ([]VolunteerRecord, error) {
	const doing = "listing volunteers"
	rows, err := s.r.QueryContext(ctx, `SELECT id, name, token_id, examples, flops, refuted_examples, refuted_flops,
		strikes, banned, ban_reason, first_seen, last_seen FROM volunteers ORDER BY first_seen, id`)
	if err != nil {
		return nil, s.wrap(doing, err)
	}
	list := []VolunteerRecord{}
	index := map[string]int{}
	for rows.Next() {
		var v VolunteerRecord
		var first, last int64
		if err := rows.Scan(&v.ID, &v.Name, &v.TokenID, &v.Examples, &v.FLOPs, &v.RefutedExamples, &v.RefutedFLOPs,
			&v.Strikes, &v.Banned, &v.BanReason, &first, &last); err != nil {
			rows.Close()
			return nil, s.wrap(doing, err)
		}
		v.FirstSeen, v.LastSeen = fromNanos(first), fromNanos(last)
		index[v.ID] = len(list)
		list = append(list, v)
	}
	if err := errors.Join(rows.Err(), rows.Close()); err != nil {
		return nil, s.wrap(doing, err)
	}
	rows, err = s.r.QueryContext(ctx, `SELECT volunteer_id, address, last_seen FROM volunteer_addresses ORDER BY volunteer_id, last_seen, address`)
	if err != nil {
		return nil, s.wrap(doing, err)
	}
	defer rows.Close()
	for rows.Next() {
		var id string
		var a VolunteerAddress
		var at int64
		if err := rows.Scan(&id, &a.Address, &at); err != nil {
			return nil, s.wrap(doing, err)
		}
		a.LastSeen = fromNanos(at)
		if i, ok := index[id]; ok {
			list[i].Addresses = append(list[i].Addresses, a)
		}
	}
	return list, s.wrap(doing, rows.Err())
}

// AddressBans returns every address ban.
func (s *Store) AddressBans(ctx context.Context) ([]AddressBan, error) {
	const doing = "listing address bans"
	rows, err := s.r.QueryContext(ctx, `SELECT address, volunteer_id, reason, banned_at FROM address_bans ORDER BY banned_at, address`)
	if err != nil {
		return nil, s.wrap(doing, err)
	}
	defer rows.Close()
	list := []AddressBan{}
	for rows.Next() {
		var b AddressBan
		var at int64
		if err := rows.Scan(&b.Address, &b.Volunteer, &b.Reason, &at); err != nil {
			return nil, s.wrap(doing, err)
		}
		b.BannedAt = fromNanos(at)
		list = append(list, b)
	}
	return list, s.wrap(doing, rows.Err())
}

// JoinToken is a join token as stored: its secret only as a hash.
type JoinToken struct {
	ID         string
	Name       string
	SecretHash []byte // SHA-256 of the secret
	CreatedAt  time.Time
	RevokedAt  time.Time // zero while the token is valid
}

// CreateJoinToken stores a new token; an ID already taken is ErrExists.
func (s *Store) CreateJoinToken(ctx context.Context, t JoinToken) error {
	if t.ID == "" || len(t.SecretHash) == 0 {
		return errors.New("store: CreateJoinToken: a token needs an ID and a secret hash")
	}
	created, err := nanos(orNow(t.CreatedAt), "join token "+t.ID+" created_at")
	if err != nil {
		return err
	}
	revoked, err := nullNanos(t.RevokedAt, "join token "+t.ID+" revoked_at")
	if err != nil {
		return err
	}
	_, err = s.w.ExecContext(ctx, `INSERT INTO join_tokens (id, name, secret_hash, created_at, revoked_at) VALUES (?, ?, ?, ?, ?)`,
		t.ID, t.Name, t.SecretHash, created, revoked)
	if constraint(err, sqlite3.ErrConstraintPrimaryKey) {
		return fmt.Errorf("store: join token %s: %w", t.ID, ErrExists)
	}
	return s.wrap("creating join token "+t.ID, err)
}

// RevokeJoinToken marks the token revoked at at; an unknown id is
// ErrNotFound. Revoking a revoked token keeps its first revocation time.
func (s *Store) RevokeJoinToken(ctx context.Context, id string, at time.Time) error {
	n, err := nanos(orNow(at), "join token "+id+" revoked_at")
	if err != nil {
		return err
	}
	res, err := s.w.ExecContext(ctx, `UPDATE join_tokens SET revoked_at = coalesce(revoked_at, ?) WHERE id = ?`, n, id)
	if err != nil {
		return s.wrap("revoking join token "+id, err)
	}
	if k, _ := res.RowsAffected(); k == 0 {
		return fmt.Errorf("store: join token %s: %w", id, ErrNotFound)
	}
	return nil
}

// JoinTokens returns every token, oldest first.
func (s *Store) JoinTokens(ctx context.Context) ([]JoinToken, error) {
	const doing = "listing join tokens"
	rows, err := s.r.QueryContext(ctx, `SELECT id, name, secret_hash, created_at, revoked_at FROM join_tokens ORDER BY created_at, id`)
	if err != nil {
		return nil, s.wrap(doing, err)
	}
	defer rows.Close()
	list := []JoinToken{}
	for rows.Next() {
		var t JoinToken
		var created int64
		var revoked sql.NullInt64
		if err := rows.Scan(&t.ID, &t.Name, &t.SecretHash, &created, &revoked); err != nil {
			return nil, s.wrap(doing, err)
		}
		t.CreatedAt, t.RevokedAt = fromNanos(created), fromNullNanos(revoked)
		list = append(list, t)
	}
	return list, s.wrap(doing, rows.Err())
}
