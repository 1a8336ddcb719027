package coordinator

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net"
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
	// Sign-in attempts: a burst of loginBurst per client address, then
	// one per loginEvery. A 32-byte token is not guessable anyway; this
	// keeps a weak operator-chosen one from being brute-forced.
	loginBurst = 5
	loginEvery = 10 * time.Second
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

	mu       sync.Mutex
	sessions map[string]time.Time // session id → expiry
	attempts map[string]*bucket   // client address → sign-in budget
}

type bucket struct {
	tokens float64
	at     time.Time
}

func newAuth(token string) *auth {
	return &auth{
		tokenSum: sha256.Sum256([]byte(token)), enabled: token != "",
		sessions: map[string]time.Time{}, attempts: map[string]*bucket{},
	}
}

func (a *auth) tokenOK(token string) bool {
	if !a.enabled {
		return false
	}
	sum := sha256.Sum256([]byte(token))
	return subtle.ConstantTimeCompare(sum[:], a.tokenSum[:]) == 1
}

// allowLogin spends one sign-in attempt of the client at addr; when none is
// left it says how long to wait.
func (a *auth) allowLogin(addr string, now time.Time) (bool, time.Duration) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		host = addr
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	b := a.attempts[host]
	if b == nil {
		if len(a.attempts) > 10000 { // bounded memory under a spray of addresses
			clear(a.attempts)
		}
		b = &bucket{tokens: loginBurst, at: now}
		a.attempts[host] = b
	}
	b.tokens = math.Min(loginBurst, b.tokens+now.Sub(b.at).Seconds()/loginEvery.Seconds())
	b.at = now
	if b.tokens < 1 {
		return false, time.Duration((1 - b.tokens) * float64(loginEvery))
	}
	b.tokens--
	return true, 0
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

// authorized reports whether r carries the token or a live session. A
// cookie-authenticated request that changes something must also come from
// this origin: SameSite=Strict already keeps other sites' requests from
// carrying the cookie, and this holds where a browser ignores it.
func (a *auth) authorized(r *http.Request) bool {
	if h := r.Header.Get("Authorization"); h != "" {
		token, ok := strings.CutPrefix(h, "Bearer ")
		return ok && a.tokenOK(token)
	}
	c, err := r.Cookie(sessionCookie)
	if err != nil || !a.sessionOK(c.Value, time.Now()) {
		return false
	}
	if r.Method == http.MethodGet || r.Method == http.MethodHead {
		return true
	}
	origin := r.Header.Get("Origin")
	if origin == "" {
		return true
	}
	u, err := url.Parse(origin)
	return err == nil && u.Host == r.Host
}

// admin wraps h so that only the operator reaches it. Anyone else gets 401
// and no detail.
func (s *Server) admin(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if !s.auth.authorized(r) {
			w.Header().Set("WWW-Authenticate", `Bearer realm="crowdtrain"`)
			writeJSONStatus(w, http.StatusUnauthorized, map[string]string{"error": "unauthorized"})
			return
		}
		h(w, r)
	}
}

func (s *Server) handleLogin(w http.ResponseWriter, r *http.Request) {
	if ok, wait := s.auth.allowLogin(r.RemoteAddr, time.Now()); !ok {
		secs := int(math.Ceil(wait.Seconds()))
		w.Header().Set("Retry-After", fmt.Sprint(secs))
		writeError(w, http.StatusTooManyRequests, "too many sign-in attempts; try again in %d s", secs)
		return
	}
	var body struct {
		Token string `json:"token"`
	}
	raw, err := io.ReadAll(io.LimitReader(r.Body, 4096))
	if err != nil || json.Unmarshal(raw, &body) != nil || !s.auth.tokenOK(body.Token) {
		writeJSONStatus(w, http.StatusUnauthorized, map[string]string{"error": "unauthorized"})
		return
	}
	http.SetCookie(w, &http.Cookie{
		Name: sessionCookie, Value: s.auth.newSession(time.Now()), Path: "/",
		MaxAge: int(sessionTTL.Seconds()), HttpOnly: true, SameSite: http.SameSiteStrictMode,
		Secure: r.TLS != nil,
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
