package coordinator

import (
	"cmp"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/coder/websocket"
	"github.com/gorilla/mux"
)

// The volunteers' HTTP API (docs/VOLUNTEERS.md): the join mode and the
// leaderboard are public; standing, bans and join tokens are the
// operator's.

// maxLeaderboard is the most volunteers GET /api/v1/volunteers lists;
// maxStanding the most the admin standing lists (most recently seen).
const (
	maxLeaderboard = 100
	maxStanding    = 1000
	maxAdminBody   = 4096
)

// LeaderboardEntry is a volunteer as the public sees it: a display name
// and credit, never an id, key, address or strike.
type LeaderboardEntry struct {
	Name     string  `json:"name"`
	Examples int64   `json:"examples"`
	FLOPs    float64 `json:"flops"`
}

// VolunteerView is a volunteer's standing as the operator sees it.
type VolunteerView struct {
	ID              string    `json:"id"`
	Name            string    `json:"name"`
	TokenID         string    `json:"token_id,omitempty"`
	TokenName       string    `json:"token_name"`
	Examples        int64     `json:"examples"`
	FLOPs           float64   `json:"flops"`
	RefutedExamples int64     `json:"refuted_examples"`
	RefutedFLOPs    float64   `json:"refuted_flops"`
	Strikes         int       `json:"strikes"`
	Banned          bool      `json:"banned"`
	BanReason       string    `json:"ban_reason"`
	Addresses       []string  `json:"addresses"`
	Connected       int       `json:"connected"`
	FirstSeen       time.Time `json:"first_seen"`
	LastSeen        time.Time `json:"last_seen"`
}

// ErrNoVolunteer: no volunteer with that id.
var ErrNoVolunteer = errors.New("no such volunteer")

func (s *Server) volunteerRoutes(api *mux.Router) {
	api.HandleFunc("/join", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, map[string]string{"mode": s.cfg.Join})
	}).Methods(http.MethodGet)
	// The public list is built at most once per leaderboardMaxAge, however
	// often anyone asks: building it scans and sorts every volunteer.
	var board struct {
		sync.Mutex
		at      time.Time
		entries []LeaderboardEntry
	}
	api.HandleFunc("/volunteers", func(w http.ResponseWriter, _ *http.Request) {
		board.Lock()
		if board.entries == nil || time.Since(board.at) >= leaderboardMaxAge {
			board.entries, board.at = s.Leaderboard(), time.Now()
		}
		entries := board.entries
		board.Unlock()
		writeJSON(w, map[string][]LeaderboardEntry{"volunteers": entries})
	}).Methods(http.MethodGet)
	api.HandleFunc("/volunteers/standing", s.admin(func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, map[string][]VolunteerView{"volunteers": s.Standing()})
	})).Methods(http.MethodGet)
	api.HandleFunc("/volunteers/{id}/ban", s.admin(s.handleBan)).Methods(http.MethodPost)
	api.HandleFunc("/volunteers/{id}/pardon", s.admin(s.handlePardon)).Methods(http.MethodPost)
	api.HandleFunc("/tokens", s.admin(s.handleIssueToken)).Methods(http.MethodPost)
	api.HandleFunc("/tokens", s.admin(func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, map[string][]TokenView{"tokens": s.Tokens()})
	})).Methods(http.MethodGet)
	api.HandleFunc("/tokens/{id}", s.admin(s.handleRevokeToken)).Methods(http.MethodDelete)
}

// leaderboardMaxAge is how stale the public leaderboard may be.
const leaderboardMaxAge = time.Second

// Leaderboard returns the volunteers with credit, most compute first, at
// most maxLeaderboard. Banned volunteers are left out.
func (s *Server) Leaderboard() []LeaderboardEntry {
	b := s.volunteers
	b.mu.Lock()
	out := make([]LeaderboardEntry, 0, min(len(b.byID), 4*maxLeaderboard))
	for _, v := range b.byID {
		if !v.Banned && v.Examples > 0 {
			out = append(out, LeaderboardEntry{Name: v.Name, Examples: v.Examples, FLOPs: v.FLOPs})
		}
	}
	b.mu.Unlock()
	slices.SortFunc(out, func(a, b LeaderboardEntry) int {
		return cmp.Or(cmp.Compare(b.FLOPs, a.FLOPs), cmp.Compare(b.Examples, a.Examples), strings.Compare(a.Name, b.Name))
	})
	return out[:min(len(out), maxLeaderboard)]
}

// Standing returns every volunteer's standing, most recently seen first,
// at most maxStanding.
func (s *Server) Standing() []VolunteerView {
	connected := map[string]int{}
	s.mu.Lock()
	for _, wc := range s.workers {
		connected[wc.volunteer]++
	}
	s.mu.Unlock()
	b := s.volunteers
	b.mu.Lock()
	out := make([]VolunteerView, 0, len(b.byID))
	for id, v := range b.byID {
		out = append(out, b.view(id, v, connected[id]))
	}
	b.mu.Unlock()
	slices.SortFunc(out, func(a, b VolunteerView) int {
		return cmp.Or(b.LastSeen.Compare(a.LastSeen), strings.Compare(a.ID, b.ID))
	})
	return out[:min(len(out), maxStanding)]
}

// volunteerView is the standing of one volunteer; b.mu is held.
func (b *volunteerBook) view(id string, v *volunteerStanding, connected int) VolunteerView {
	vv := VolunteerView{
		ID: id, Name: v.Name, TokenID: v.TokenID, Examples: v.Examples, FLOPs: v.FLOPs,
		RefutedExamples: v.RefutedExamples, RefutedFLOPs: v.RefutedFLOPs, Strikes: v.Strikes,
		Banned: v.Banned, BanReason: v.BanReason, Addresses: make([]string, 0, len(v.Addresses)),
		Connected: connected, FirstSeen: v.FirstSeen, LastSeen: v.LastSeen,
	}
	if t := b.tokens[v.TokenID]; t != nil {
		vv.TokenName = t.Name
	}
	for i := len(v.Addresses) - 1; i >= 0; i-- { // most recent first
		vv.Addresses = append(vv.Addresses, v.Addresses[i].Address)
	}
	return vv
}

// volunteerView returns one volunteer's standing.
func (s *Server) volunteerView(id string) (VolunteerView, bool) {
	n := 0
	s.mu.Lock()
	for _, wc := range s.workers {
		if wc.volunteer == id {
			n++
		}
	}
	s.mu.Unlock()
	b := s.volunteers
	b.mu.Lock()
	defer b.mu.Unlock()
	v := b.byID[id]
	if v == nil {
		return VolunteerView{}, false
	}
	return b.view(id, v, n), true
}

// BanVolunteer bans a volunteer the book knows (Ban on the ledger); its
// connections close at once.
func (s *Server) BanVolunteer(id, reason string) error {
	if !s.volunteers.known(id) {
		return fmt.Errorf("%w %q; GET /api/v1/volunteers/standing lists them", ErrNoVolunteer, id)
	}
	s.cfg.Logger.Info(fmt.Sprintf("volunteer %s banned by the operator: %q", id, reason), logVolunteer, id)
	s.volunteers.Ban(id, reason)
	return nil
}

// PardonVolunteer lifts a volunteer's ban and its addresses'.
func (s *Server) PardonVolunteer(id string) error {
	if !s.volunteers.Pardon(id) {
		return fmt.Errorf("%w %q; GET /api/v1/volunteers/standing lists them", ErrNoVolunteer, id)
	}
	s.cfg.Logger.Info(fmt.Sprintf("volunteer %s pardoned by the operator", id), logVolunteer, id)
	return nil
}

// closeVolunteer ends the connections of a banned volunteer, and of
// anyone connected from an address it was seen from (the book's onBan).
// Their leases go back to the queue as the sessions end.
func (s *Server) closeVolunteer(v, reason string) {
	var conns []*workerConn
	s.mu.Lock()
	for _, wc := range s.workers {
		conns = append(conns, wc)
	}
	s.mu.Unlock()
	why := "banned: " + reason
	n := 0
	for _, wc := range conns {
		if wc.volunteer != v && !s.volunteers.banned("", wc.clientKey) {
			continue
		}
		n++
		wc.closedBy.Store(&why)
		go wc.ws.Close(websocket.StatusPolicyViolation, truncateReason(why))
	}
	s.cfg.Logger.Warn(fmt.Sprintf("volunteer %s banned (%q): %d connections closed", v, reason, n), logVolunteer, v)
}

// checkBanReason checks a ban's reason: bounded, UTF-8, and no control
// or format character (which could forge a log line or garble a page).
func checkBanReason(r string) error {
	switch {
	case len(r) > maxBanReason:
		return fmt.Errorf("reason: %d bytes, at most %d allowed", len(r), maxBanReason)
	case !utf8.ValidString(r):
		return errors.New("reason: not valid UTF-8")
	}
	for _, c := range r {
		if unicode.IsControl(c) || unicode.Is(unicode.Cf, c) {
			return fmt.Errorf("reason: holds the control or format character %U; write it on one line of plain text", c)
		}
	}
	return nil
}

func (s *Server) handleBan(w http.ResponseWriter, r *http.Request) {
	id := mux.Vars(r)["id"]
	var body struct {
		Reason string `json:"reason"`
	}
	if !readJSONBody(w, r, &body, maxAdminBody, "a ban", `{"reason": "why, shown to the volunteer"}`) {
		return
	}
	if err := checkBanReason(body.Reason); err != nil {
		writeError(w, http.StatusBadRequest, "%v", err)
		return
	}
	reason := strings.TrimSpace(body.Reason)
	if reason == "" {
		reason = "banned by the operator"
	}
	if err := s.BanVolunteer(id, reason); err != nil {
		writeError(w, http.StatusNotFound, "%v", err)
		return
	}
	v, _ := s.volunteerView(id)
	writeJSON(w, v)
}

func (s *Server) handlePardon(w http.ResponseWriter, r *http.Request) {
	id := mux.Vars(r)["id"]
	if err := s.PardonVolunteer(id); err != nil {
		writeError(w, http.StatusNotFound, "%v", err)
		return
	}
	v, _ := s.volunteerView(id)
	writeJSON(w, v)
}

func (s *Server) handleIssueToken(w http.ResponseWriter, r *http.Request) {
	var body struct {
		Name string `json:"name"`
	}
	if !readJSONBody(w, r, &body, maxAdminBody, "a token request", `{"name": "the volunteer's name, such as alice"}`) {
		return
	}
	t, err := s.IssueToken(r.Context(), body.Name)
	if err != nil {
		code := http.StatusServiceUnavailable
		if errors.Is(err, errBadTokenName) {
			code = http.StatusBadRequest
		}
		writeError(w, code, "%v", err)
		return
	}
	writeJSONStatus(w, http.StatusCreated, t)
}

func (s *Server) handleRevokeToken(w http.ResponseWriter, r *http.Request) {
	err := s.RevokeToken(r.Context(), mux.Vars(r)["id"])
	switch {
	case err == nil:
		w.WriteHeader(http.StatusNoContent)
	case errors.Is(err, ErrNoToken):
		writeError(w, http.StatusNotFound, "%v", err)
	default:
		writeError(w, http.StatusServiceUnavailable, "%v", err)
	}
}
