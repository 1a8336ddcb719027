package engine

import (
	"fmt"
	"testing"
	"time"
)

// Each expiry halves a volunteer's cap (never below 1), each accepted
// result raises it by one until it is whole and forgotten, and the
// expiries in a row drop the volunteer at the limit, then count again.
func TestLeaseCapsHalveRaiseAndDrop(t *testing.T) {
	var c LeaseCaps
	now := time.Unix(1000, 0)
	const whole, dropAfter = 8, 3
	if _, _, ok := c.Cap("h"); ok {
		t.Fatal("a volunteer with no expiry has a cut cap")
	}
	for i, want := range []int{4, 2} {
		capNow, inARow, drop := c.Expired("h", now, whole, dropAfter)
		if capNow != want || inARow != i+1 || drop {
			t.Fatalf("expiry %d: cap %d, %d in a row, drop %v; want %d, %d, false", i+1, capNow, inARow, drop, want, i+1)
		}
	}
	capNow, inARow, drop := c.Expired("h", now, whole, dropAfter)
	if capNow != 1 || inARow != dropAfter || !drop {
		t.Fatalf("third expiry in a row: cap %d, %d in a row, drop %v; want 1, %d, true", capNow, inARow, drop, dropAfter)
	}
	if capNow, _, drop := c.Expired("h", now, whole, dropAfter); capNow != 1 || drop {
		t.Fatalf("after the drop the count starts again: cap %d, drop %v", capNow, drop)
	}
	if got, expired, ok := c.Cap("h"); !ok || got != 1 || expired != 4 {
		t.Fatalf("Cap: %d, %d expired, ok %v; want 1, 4, true", got, expired, ok)
	}
	c.Accepted("h", now, whole)
	if _, inARow, _ := c.Expired("h", now, whole, dropAfter); inARow != 1 {
		t.Fatalf("an accepted result did not end the run of expiries: %d in a row", inARow)
	}
	for range whole {
		c.Accepted("h", now, whole)
	}
	if _, _, ok := c.Cap("h"); ok || c.Len() != 0 {
		t.Fatalf("after enough accepted results the cap is still cut (%d volunteers cut)", c.Len())
	}
}

// The volunteers remembered are bounded: the one untouched longest is
// forgotten first, back to a whole cap.
func TestLeaseCapsForgetTheLongestUntouched(t *testing.T) {
	var c LeaseCaps
	start := time.Unix(1000, 0)
	for i := range maxCapped {
		c.Expired(fmt.Sprint(i), start.Add(time.Duration(i)*time.Second), 8, 100)
	}
	c.Expired("0", start.Add(time.Hour), 8, 100) // touched again: now the newest
	c.Expired("new", start.Add(2*time.Hour), 8, 100)
	if c.Len() != maxCapped {
		t.Fatalf("%d volunteers remembered, want %d", c.Len(), maxCapped)
	}
	if _, _, ok := c.Cap("1"); ok {
		t.Fatal("the longest untouched volunteer was kept")
	}
	if _, _, ok := c.Cap("0"); !ok {
		t.Fatal("a volunteer touched again was forgotten")
	}
}
