package coordinator

import "github.com/crowdtrain/crowdtrain/protocol"

// VolunteerStandings copies the server's ledger, by volunteer id, for
// the tests of package coordinator_test.
func VolunteerStandings(s *Server) map[string]volunteerStanding {
	s.volunteers.mu.Lock()
	defer s.volunteers.mu.Unlock()
	out := make(map[string]volunteerStanding, len(s.volunteers.byID))
	for id, v := range s.volunteers.byID {
		out[id] = *v
	}
	return out
}

// VolunteerIDOfKey is the volunteer id of a worker that sends key.
func VolunteerIDOfKey(key string) string {
	return volunteerID(&protocol.Hello{VolunteerKey: key}, "")
}
