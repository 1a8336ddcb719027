package coordinator

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"
)

// The admin token guards every route that changes a job or shows what an
// operator would consider private (workers' addresses, checkpoints). It is
// given as "Authorization: Bearer TOKEN", or once at POST /admin/login,
// which sets an HttpOnly, SameSite=Strict session cookie.

const (
	sessionCookie = "crowdtrain_session"
	sessionTTL    = 12 * time.Hour
)

// NewAdminToken returns a random token for an operator who set none.
func NewAdminToken() string {
	b := make([]byte, 24)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

type auth struct {
	tokenSum [32]byte // SHA-256 of the token: compared in constant time whatever its length
	enabled  bool

	// fails limits failed token checks per client address, on every
	// route that checks a token (sign-in, Bearer, /metrics): a burst,
	// then one per interval. A 32-byte token is not guessable anyway;
	// this keeps a weak operator-chosen one from being brute-forced.
	fails *rateLimiter

	mu       sync.Mutex
	sessions map[string]time.Time // session id → expiry
}

func newAuth(token string, fails *rateLimiter) *auth {
	return &auth{
		tokenSum: sha256.Sum256([]byte(token)), enabled: token != "",
		sessions: map[string]time.Time{}, fails: fails,
	}
}

// sameSecret compares in constant time whatever the lengths.
func sameSecret(given string, wantSum [32]byte) bool {
	sum := sha256.Sum256([]byte(given))
	return subtle.ConstantTimeCompare(sum[:], wantSum[:]) == 1
}

type authResult int

const (
	authDenied  authResult = iota
	authOK                 // the token or a live session
	authLimited            // too many failures from this address: not even checked
)

// checkToken checks a token the client at key presents against want. While
// the address is over its failures, every token is refused unchecked, the
// right one included, so a right guess does not stand out.
func (a *auth) checkToken(token string, want [32]byte, enabled bool, key string, now time.Time) (authResult, time.Duration) {
	// A failure is charged before the check and refunded on success, so
	// parallel guesses cannot all slip through while one token is left.
	if ok, wait := a.fails.take(key, 1, now); !ok {
		return authLimited, wait
	}
	if enabled && sameSecret(token, want) {
		a.fails.refund(key, 1, now)
		return authOK, 0
	}
	return authDenied, 0
}

func (a *auth) newSession(now time.Time) string {
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	id := hex.EncodeToString(b)
	a.mu.Lock()
	defer a.mu.Unlock()
	for k, exp := range a.sessions {
		if now.After(exp) {
			delete(a.sessions, k)
		}
	}
	a.sessions[id] = now.Add(sessionTTL)
	return id
}

func (a *auth) sessionOK(id string, now time.Time) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	exp, ok := a.sessions[id]
	return ok && now.Before(exp)
}

func (a *auth) endSession(id string) {
	a.mu.Lock()
	delete(a.sessions, id)
	a.mu.Unlock()
}

// authorized checks r's token or session. A Bearer token counts toward the
// address's failures; a session cookie does not (it is 32 random bytes, and
// an operator signed in keeps working while someone at the same address
// guesses). A cookie-authenticated request that changes something must
// also come from this origin: SameSite=Strict already keeps other sites'
// requests from carrying the cookie, and this holds where a browser
// ignores it.
func (a *auth) authorized(r *http.Request, key string, now time.Time) (authResult, time.Duration) {
	if h := r.Header.Get("Authorization"); h != "" {
		token, isBearer := strings.CutPrefix(h, "Bearer ")
		return a.checkToken(token, a.tokenSum, a.enabled && isBearer, key, now)
	}
	c, err := r.Cookie(sessionCookie)
	if err != nil || !a.sessionOK(c.Value, now) {
		return authDenied, 0
	}
	if r.Method == http.MethodGet || r.Method == http.MethodHead {
		return authOK, 0
	}
	origin := r.Header.Get("Origin")
	if origin == "" {
		return authOK, 0
	}
	u, err := url.Parse(origin)
	if err == nil && u.Host == r.Host {
		return authOK, 0
	}
	return authDenied, 0
}

// signedIn reports whether r carries the session of a signed-in operator
// (the admin page's cookie). It counts no failures: it only exempts the
// operator from limits meant for anonymous clients.
func (s *Server) signedIn(r *http.Request) bool {
	c, err := r.Cookie(sessionCookie)
	return err == nil && s.auth.sessionOK(c.Value, time.Now())
}

// writeAuthRefusal answers a request that failed a token check.
func writeAuthRefusal(w http.ResponseWriter, res authResult, wait time.Duration) {
	if res == authLimited {
		secs := retryAfterSeconds(wait)
		w.Header().Set("Retry-After", fmt.Sprint(secs))
		writeError(w, http.StatusTooManyRequests, "too many failed token checks from this address; try again in %d s", secs)
		return
	}
	w.Header().Set("WWW-Authenticate", `Bearer realm="crowdtrain"`)
	writeJSONStatus(w, http.StatusUnauthorized, map[string]string{"error": "unauthorized"})
}

// admin wraps h so that only the operator reaches it. Anyone else gets 401
// and no detail, or 429 after too many failures.
func (s *Server) admin(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if res, wait := s.auth.authorized(r, s.clientKey(r), time.Now()); res != authOK {
			writeAuthRefusal(w, res, wait)
			return
		}
		h(w, r)
	}
}

func (s *Server) handleLogin(w http.ResponseWriter, r *http.Request) {
	var body struct {
		Token string `json:"token"`
	}
	raw, _ := io.ReadAll(io.LimitReader(r.Body, 4096))
	_ = json.Unmarshal(raw, &body) // a malformed body is a wrong token
	a := s.auth
	if res, wait := a.checkToken(body.Token, a.tokenSum, a.enabled, s.clientKey(r), time.Now()); res != authOK {
		writeAuthRefusal(w, res, wait)
		return
	}
	http.SetCookie(w, &http.Cookie{
		Name: sessionCookie, Value: s.auth.newSession(time.Now()), Path: "/",
		MaxAge: int(sessionTTL.Seconds()), HttpOnly: true, SameSite: http.SameSiteStrictMode,
		// TLS here or at a trusted proxy, or an https --public-url
		Secure: s.hosts.scheme(r) == "https" || s.hosts.secure,
	})
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) handleLogout(w http.ResponseWriter, r *http.Request) {
	if c, err := r.Cookie(sessionCookie); err == nil {
		s.auth.endSession(c.Value)
	}
	http.SetCookie(w, &http.Cookie{Name: sessionCookie, Value: "", Path: "/", MaxAge: -1, HttpOnly: true, SameSite: http.SameSiteStrictMode})
	w.WriteHeader(http.StatusNoContent)
}

func writeJSONStatus(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}
