package coordinator

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/gorilla/mux"

	"github.com/crowdtrain/crowdtrain/dataset"
	"github.com/crowdtrain/crowdtrain/protocol"
)

// FuzzVolunteerBodies feeds arbitrary bodies to the decoders of the new
// admin routes (a token's name, a ban's reason): each answers a status
// that fits (never a 5xx), and what it stores passes the same checks as
// a hello's name.
func FuzzVolunteerBodies(f *testing.F) {
	s, err := New(Config{Logf: func(string, ...any) {}, LoadData: func(dataset.Spec, dataset.Options) (*dataset.Set, *dataset.Set, error) {
		return nil, nil, nil
	}})
	if err != nil {
		f.Fatal(err)
	}
	defer s.Close()
	s.volunteers.seen("k-x", "x", "", "127.0.0.2")
	s.volunteers.onBan = nil // no connections to close
	for _, b := range []string{`{"name": "alice"}`, `{"reason": "forged"}`, `{"name": "a\nb"}`, `{"reason": "\u202e"}`, `{}`, `[]`, `{"name": 1}`, `null`, ``} {
		f.Add([]byte(b))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		rec := httptest.NewRecorder()
		s.handleIssueToken(rec, httptest.NewRequest(http.MethodPost, "/api/v1/tokens", bytes.NewReader(body)))
		switch rec.Code {
		case http.StatusCreated:
			var tok IssuedToken
			if err := json.Unmarshal(rec.Body.Bytes(), &tok); err != nil || protocol.CheckVolunteerName(tok.Name) != nil || tok.Name == "" {
				t.Fatalf("issued a token named %q (%v) for %q", tok.Name, err, body)
			}
		case http.StatusBadRequest, http.StatusRequestEntityTooLarge:
		default:
			t.Fatalf("POST /api/v1/tokens %q: %d %s", body, rec.Code, rec.Body)
		}

		rec = httptest.NewRecorder()
		req := mux.SetURLVars(httptest.NewRequest(http.MethodPost, "/api/v1/volunteers/k-x/ban", bytes.NewReader(body)), map[string]string{"id": "k-x"})
		s.handleBan(rec, req)
		switch rec.Code {
		case http.StatusOK:
			var v VolunteerView
			if err := json.Unmarshal(rec.Body.Bytes(), &v); err != nil || !v.Banned || checkBanReason(v.BanReason) != nil {
				t.Fatalf("ban with %q: %+v, %v", body, v, err)
			}
			s.volunteers.Pardon("k-x")
		case http.StatusBadRequest, http.StatusRequestEntityTooLarge:
		default:
			t.Fatalf("POST ban %q: %d %s", body, rec.Code, rec.Body)
		}
	})
}
