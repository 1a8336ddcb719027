package attack

import (
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"net/netip"
	"strings"
)

// maxBinds bounds a range: one address per attacker, and Config.N is at
// most 10,000.
const maxBinds = 10000

// ParseBinds reads --bind: one address, a comma-separated list, or an
// IPv4 or IPv6 range FIRST-LAST ("127.0.0.2-127.0.0.9"), in order, so
// that attacker i connects from the i-th address.
func ParseBinds(s string) ([]string, error) {
	var out []string
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			return nil, fmt.Errorf("bind %q has an empty entry: give ADDR, ADDR,ADDR,... or FIRST-LAST", s)
		}
		first, last, isRange := strings.Cut(part, "-")
		a, err := netip.ParseAddr(first)
		if err != nil {
			return nil, fmt.Errorf("bind %q: %q is not an IP address", s, first)
		}
		if !isRange {
			out = append(out, a.String())
			continue
		}
		b, err := netip.ParseAddr(last)
		if err != nil {
			return nil, fmt.Errorf("bind %q: %q is not an IP address", s, last)
		}
		if a.Is4() != b.Is4() || b.Less(a) {
			return nil, fmt.Errorf("bind %q: the range %s must go up from one address to another of the same family", s, part)
		}
		for x := a; ; x = x.Next() {
			if len(out) >= maxBinds {
				return nil, fmt.Errorf("bind %q holds more than %d addresses", s, maxBinds)
			}
			out = append(out, x.String())
			if x == b {
				break
			}
		}
	}
	return out, nil
}

// newKeys makes n volunteer keys, one per identity an attack poses as.
func newKeys(n int) []string {
	keys := make([]string, n)
	for i := range keys {
		var raw [32]byte
		rand.Read(raw[:])
		keys[i] = base64.RawURLEncoding.EncodeToString(raw[:])
	}
	return keys
}
