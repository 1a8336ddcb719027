package coordinator

import "github.com/crowdtrain/crowdtrain/protocol"

// VolunteerIDOfKey is the volunteer id of a worker that sends key, for
// the tests of package coordinator_test.
func VolunteerIDOfKey(key string) string {
	return volunteerID(&protocol.Hello{VolunteerKey: key}, "")
}
