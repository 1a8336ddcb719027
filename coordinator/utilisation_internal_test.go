package coordinator

import (
	"testing"
	"time"
)

func TestUtilisationSmoothsComputeOverElapsed(t *testing.T) {
	var u utilisation
	t0 := time.Unix(1000, 0)
	u.observe(t0, 80)
	if _, ok := u.share(); ok {
		t.Fatal("one result gives no utilisation: there is no interval yet")
	}
	// Results every 100 ms, each 80 ms of compute: 0.8.
	for i := 1; i <= 50; i++ {
		u.observe(t0.Add(time.Duration(i)*100*time.Millisecond), 80)
	}
	if s, ok := u.share(); !ok || s < 0.79 || s > 0.81 {
		t.Fatalf("utilisation %.3f, want 0.8", s)
	}
	// The worker starts waiting: results every 400 ms, still 80 ms of
	// compute. The share follows within a few dozen results.
	at := t0.Add(5 * time.Second)
	for i := 1; i <= 60; i++ {
		u.observe(at.Add(time.Duration(i)*400*time.Millisecond), 80)
	}
	if s, _ := u.share(); s < 0.19 || s > 0.23 {
		t.Fatalf("utilisation %.3f after the worker slowed to a task per 400 ms, want about 0.2", s)
	}
	// A worker that claims more compute than wall time is capped at 1.
	var v utilisation
	v.observe(t0, 0)
	v.observe(t0.Add(10*time.Millisecond), 5000)
	if s, _ := v.share(); s != 1 {
		t.Fatalf("utilisation %.3f for compute_ms past the wall time, want 1", s)
	}
}
