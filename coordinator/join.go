package coordinator

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/crowdtrain/crowdtrain/protocol"
	"github.com/crowdtrain/crowdtrain/store"
)

// Join modes (Config.Join, serve --join).
const (
	// JoinOpen takes anyone; a volunteer is known by its key or address.
	JoinOpen = "open"
	// JoinToken takes only volunteers with a join token the operator
	// issued (POST /api/v1/tokens), each token a named volunteer.
	JoinToken = "token"
)

// Error codes of the refusals of a hello (protocol.Error.Code).
const (
	errCodeJoinToken = "join_token"
	errCodeBanned    = "banned"
)

// maxTokenName bounds a token's name, as a display name is bounded.
const maxTokenName = protocol.MaxVolunteerName

// joinToken is an issued join token. The secret is kept only as its
// SHA-256: a 256-bit random secret needs no slow hash, and a leaked
// database gives no one a token.
type joinToken struct {
	ID        string
	Name      string
	Sum       [32]byte
	CreatedAt time.Time
	RevokedAt time.Time
}

// TokenView is a join token as the admin API lists it: never its secret.
type TokenView struct {
	ID        string    `json:"id"`
	Name      string    `json:"name"`
	CreatedAt time.Time `json:"created_at"`
	Revoked   bool      `json:"revoked"`
}

// IssuedToken is a new token, its secret shown this once.
type IssuedToken struct {
	ID    string `json:"id"`
	Name  string `json:"name"`
	Token string `json:"token"`
}

// ErrNoToken: no join token with that id.
var ErrNoToken = errors.New("no such join token")

// errBadTokenName: a token's name fails protocol.CheckVolunteerName.
var errBadTokenName = errors.New("name")

// IssueToken makes a join token for the named volunteer. With a store the
// token is written before it is returned.
func (s *Server) IssueToken(ctx context.Context, name string) (IssuedToken, error) {
	if err := protocol.CheckVolunteerName(name); err != nil {
		return IssuedToken{}, fmt.Errorf("%w: %v", errBadTokenName, err)
	}
	if strings.TrimSpace(name) == "" {
		return IssuedToken{}, fmt.Errorf("%w: empty: name the volunteer the token is for, such as \"alice\"", errBadTokenName)
	}
	var idb [6]byte
	var secret [32]byte
	_, _ = rand.Read(idb[:])
	_, _ = rand.Read(secret[:])
	sec := base64.RawURLEncoding.EncodeToString(secret[:])
	t := &joinToken{ID: hex.EncodeToString(idb[:]), Name: name, Sum: sha256.Sum256([]byte(sec)), CreatedAt: time.Now().UTC()}
	if db := s.cfg.Store; db != nil {
		if err := db.CreateJoinToken(ctx, store.JoinToken{ID: t.ID, Name: t.Name, SecretHash: t.Sum[:], CreatedAt: t.CreatedAt}); err != nil {
			return IssuedToken{}, err
		}
	}
	b := s.volunteers
	b.mu.Lock()
	b.tokens[t.ID] = t
	b.mu.Unlock()
	s.cfg.Logf("join token %s issued for %q", t.ID, name)
	return IssuedToken{ID: t.ID, Name: name, Token: t.ID + "." + sec}, nil
}

// localTokenID is the id of LocalToken's token.
const localTokenID = "local"

// LocalToken returns a join token for the operator's own workers (serve
// --local-workers) in token mode, and "" in open mode. It lives in memory
// only, a new secret each start, and is not listed with the issued ones.
func (s *Server) LocalToken() string {
	if s.cfg.Join != JoinToken {
		return ""
	}
	var secret [32]byte
	_, _ = rand.Read(secret[:])
	sec := base64.RawURLEncoding.EncodeToString(secret[:])
	b := s.volunteers
	b.mu.Lock()
	defer b.mu.Unlock()
	b.tokens[localTokenID] = &joinToken{ID: localTokenID, Name: "local workers", Sum: sha256.Sum256([]byte(sec)), CreatedAt: time.Now().UTC()}
	return localTokenID + "." + sec
}

// RevokeToken revokes a join token: later hellos with it are refused. The
// volunteer's connections stay (ban it to end them); its standing stays.
func (s *Server) RevokeToken(ctx context.Context, id string) error {
	b := s.volunteers
	b.mu.Lock()
	t := b.tokens[id]
	b.mu.Unlock()
	if t == nil || id == localTokenID {
		return fmt.Errorf("%w %q; GET /api/v1/tokens lists them", ErrNoToken, id)
	}
	now := time.Now().UTC()
	if db := s.cfg.Store; db != nil {
		if err := db.RevokeJoinToken(ctx, id, now); err != nil {
			return err
		}
	}
	b.mu.Lock()
	if t.RevokedAt.IsZero() {
		t.RevokedAt = now
	}
	b.mu.Unlock()
	s.cfg.Logf("join token %s (%q) revoked", id, t.Name)
	return nil
}

// Tokens lists the join tokens, oldest first.
func (s *Server) Tokens() []TokenView {
	b := s.volunteers
	b.mu.Lock()
	out := make([]TokenView, 0, len(b.tokens))
	for _, t := range b.tokens {
		if t.ID == localTokenID {
			continue
		}
		out = append(out, TokenView{ID: t.ID, Name: t.Name, CreatedAt: t.CreatedAt, Revoked: !t.RevokedAt.IsZero()})
	}
	b.mu.Unlock()
	slices.SortFunc(out, func(a, b TokenView) int {
		if c := a.CreatedAt.Compare(b.CreatedAt); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
	return out
}

// admission is what the coordinator makes of a hello: whose it is, or
// why it is refused (code and a message that says what to do).
type admission struct {
	volunteer, tokenID string
	code, message      string
}

// admit decides whether a hello from the client at key may join: the
// join token (required in token mode, checked if given in open mode), then
// bans of the volunteer and of the address. Failed tokens count toward the
// address's failed-token limit, as failed admin tokens do, so join tokens
// cannot be guessed.
func (s *Server) admit(h *protocol.Hello, key string, now time.Time) admission {
	var a admission
	switch {
	case h.Token != "":
		t, msg := s.checkJoinToken(h.Token, key, now)
		if t == nil {
			return admission{code: errCodeJoinToken, message: msg}
		}
		a.volunteer, a.tokenID = "t-"+t.ID, t.ID
	case s.cfg.Join == JoinToken:
		return admission{code: errCodeJoinToken, message: "this coordinator takes only volunteers with a join token: ask its operator " +
			"for one, then run `crowdtrain work --join-token TOKEN` or open the contribute page's link with the token"}
	default:
		a.volunteer = volunteerID(h, key)
	}
	if why := s.volunteers.refusal(a.volunteer, key); why != "" {
		return admission{volunteer: a.volunteer, code: errCodeBanned, message: why}
	}
	return a
}

// checkJoinToken returns the token given, or why it is refused.
func (s *Server) checkJoinToken(given, key string, now time.Time) (*joinToken, string) {
	fails := s.auth.fails
	// Charged before the check and refunded on success, as for the admin
	// token: parallel guesses cannot slip past the limit.
	if ok, wait := fails.take(key, 1, now); !ok {
		return nil, fmt.Sprintf("too many wrong join tokens from this address; try again in %d s with the token the operator gave you",
			retryAfterSeconds(wait))
	}
	const ask = "check that you copied the whole token, or ask the coordinator's operator for a new one"
	id, secret, ok := strings.Cut(given, ".")
	b := s.volunteers
	b.mu.Lock()
	t := b.tokens[id]
	var revoked bool
	if t != nil {
		revoked = !t.RevokedAt.IsZero()
	}
	b.mu.Unlock()
	// An unknown id still costs a hash compare: the answer's timing says
	// nothing of which ids exist.
	want := [32]byte{}
	if t != nil {
		want = t.Sum
	}
	sum := sha256.Sum256([]byte(secret))
	if !ok || t == nil || subtle.ConstantTimeCompare(sum[:], want[:]) != 1 {
		return nil, "the join token is not one this coordinator issued: " + ask
	}
	if revoked {
		return nil, "this join token was revoked by the coordinator's operator: ask them for a new one"
	}
	fails.refund(key, 1, now)
	return t, ""
}
