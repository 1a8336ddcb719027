package coordinator

import (
	"net/http"
	"net/netip"
	"testing"
	"testing/synctest"
	"time"
)

// The failure limiter as the token checks use it (one token per check,
// refunded when the token was right): a burst, then one per interval, on a
// fake clock.
func TestLimiterRefillsOnePerInterval(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := newRateLimiter(1/(10*time.Second).Seconds(), 5, 100)
		for i := range 5 {
			if ok, _ := l.take("a", 1, time.Now()); !ok {
				t.Fatalf("limited after %d failures, want a burst of 5", i)
			}
		}
		ok, wait := l.take("a", 1, time.Now())
		if ok || !near(wait, 10*time.Second) {
			t.Fatalf("after 5 failures: allowed %v, wait %v; want limited for 10s", ok, wait)
		}
		if ok, _ := l.take("b", 1, time.Now()); !ok {
			t.Fatal("another address is limited too")
		}
		time.Sleep(9 * time.Second)
		if ok, wait := l.take("a", 1, time.Now()); ok || !near(wait, time.Second) {
			t.Fatalf("after 9s: allowed %v, wait %v; want 1s more", ok, wait)
		}
		time.Sleep(time.Second)
		if ok, _ := l.take("a", 1, time.Now()); !ok {
			t.Fatal("still limited after the interval")
		}
		if ok, _ := l.take("a", 1, time.Now()); ok {
			t.Fatal("one interval refilled more than one attempt")
		}
		time.Sleep(time.Hour)
		for i := range 5 {
			if ok, _ := l.take("a", 1, time.Now()); !ok {
				t.Fatalf("after an hour, limited after %d failures: the bucket must refill to the burst", i)
			}
		}
		if ok, _ := l.take("a", 1, time.Now()); ok {
			t.Fatal("an hour's wait banked more than the burst")
		}
		// Right tokens are refunded: they never use up the budget.
		time.Sleep(time.Hour)
		for range 100 {
			if ok, _ := l.take("a", 1, time.Now()); !ok {
				t.Fatal("refunded checks used up the budget")
			}
			l.refund("a", 1, time.Now())
		}
	})
}

// A byte budget: a request bigger than the burst passes once when the
// bucket is full and leaves it in debt.
func TestLimiterTakeBytes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := newRateLimiter(1000, 4000, 100)
		if ok, _ := l.take("a", 3000, time.Now()); !ok {
			t.Fatal("first 3000 of a 4000 burst refused")
		}
		ok, wait := l.take("a", 3000, time.Now())
		if ok || !near(wait, 2*time.Second) {
			t.Fatalf("second 3000 with 1000 left: ok %v, wait %v; want refused for 2s", ok, wait)
		}
		time.Sleep(2 * time.Second)
		if ok, _ := l.take("a", 3000, time.Now()); !ok {
			t.Fatal("refused after the wait it was told")
		}
		time.Sleep(time.Minute)
		if ok, _ := l.take("a", 10000, time.Now()); !ok {
			t.Fatal("a request bigger than the burst is refused even with a full bucket")
		}
		if ok, wait := l.take("a", 1, time.Now()); ok || !near(wait, 6*time.Second+time.Millisecond) {
			t.Fatalf("after the big request: ok %v, wait %v; want the 6000-byte debt paid first", ok, wait)
		}
	})
}

// The table is bounded by forgetting the least recently seen address, so
// a spray of new addresses cannot wipe the budget of one still in use.
func TestLimiterEvictsOldestAtTheBound(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := newRateLimiter(0.1, 1, 3)
		for _, k := range []string{"guesser", "b", "c"} {
			l.take(k, 1, time.Now()) // each now limited
		}
		time.Sleep(time.Second)
		if ok, _ := l.take("guesser", 1, time.Now()); ok { // seen again: the newest
			t.Fatal("guesser not limited")
		}
		l.take("d", 1, time.Now()) // evicts b, the least recently seen
		if n := l.size(); n != 3 {
			t.Fatalf("%d entries, want the bound of 3", n)
		}
		if ok, _ := l.take("guesser", 1, time.Now()); ok {
			t.Fatal("a new address reset the guesser's limit")
		}
		if ok, _ := l.take("b", 1, time.Now()); !ok { // evicts c
			t.Fatal("b is still limited: the oldest entry was not the one evicted")
		}
		for i := range 10000 {
			l.take(netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)}).String(), 1, time.Now())
		}
		if n := l.size(); n != 3 {
			t.Fatalf("%d entries after a spray, want the bound of 3", n)
		}
	})
}

// near allows for floating-point rounding in a computed wait.
func near(got, want time.Duration) bool { return (got - want).Abs() < time.Microsecond }

func TestClientKeyGroupsIPv6By64(t *testing.T) {
	for _, c := range []struct{ a, b string }{
		{"2001:db8:1:2::1", "2001:db8:1:2:ffff:ffff:ffff:ffff"},
		{"::ffff:192.0.2.7", "192.0.2.7"},
	} {
		ka, kb := clientKey(netip.MustParseAddr(c.a).Unmap()), clientKey(netip.MustParseAddr(c.b).Unmap())
		if ka != kb {
			t.Errorf("%s -> %s and %s -> %s: want one key", c.a, ka, c.b, kb)
		}
	}
	for _, c := range []struct{ a, b string }{
		{"2001:db8:1:2::1", "2001:db8:1:3::1"},
		{"192.0.2.7", "192.0.2.8"},
	} {
		if clientKey(netip.MustParseAddr(c.a)) == clientKey(netip.MustParseAddr(c.b)) {
			t.Errorf("%s and %s share a key", c.a, c.b)
		}
	}
	if k := clientKey(netip.MustParseAddr("2001:db8:1:2:3:4:5:6")); k != "2001:db8:1:2::/64" {
		t.Errorf("key %q, want the /64", k)
	}
}

func TestForwardedForOnlyFromTrustedProxies(t *testing.T) {
	proxies, err := parseTrustedProxies([]string{"10.0.0.0/8", "::1"})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		remote, xff, want string
	}{
		{"203.0.113.5:4000", "198.51.100.1", "203.0.113.5"},          // not a proxy: the header is a claim
		{"10.0.0.7:4000", "198.51.100.1", "198.51.100.1"},            // a trusted proxy names the client
		{"10.0.0.7:4000", "6.6.6.6, 198.51.100.1", "198.51.100.1"},   // the client's own entry is not believed
		{"10.0.0.7:4000", "198.51.100.1, 10.0.0.9", "198.51.100.1"},  // a chain of trusted proxies
		{"[::1]:4000", "2001:db8::5", "2001:db8::/64"},               // IPv6 through a proxy: its /64
		{"10.0.0.7:4000", "", "10.0.0.7"},                            // no header: the proxy itself
		{"10.0.0.7:4000", "garbage, 198.51.100.1", "198.51.100.1"},   // garbage left of a good entry
		{"10.0.0.7:4000", "198.51.100.1, garbage", "10.0.0.7"},       // garbage from the proxy's side: stop there
		{"[::ffff:203.0.113.5]:4000", "198.51.100.1", "203.0.113.5"}, // a mapped address is the IPv4 one
	} {
		r := &http.Request{RemoteAddr: c.remote, Header: http.Header{}}
		if c.xff != "" {
			r.Header.Set("X-Forwarded-For", c.xff)
		}
		if got := clientKey(proxies.clientIP(r)); got != c.want {
			t.Errorf("from %s with X-Forwarded-For %q: client %s, want %s", c.remote, c.xff, got, c.want)
		}
	}
	if _, err := parseTrustedProxies([]string{"10.0.0.0/33"}); err == nil {
		t.Error("a bad CIDR was accepted")
	}
}
