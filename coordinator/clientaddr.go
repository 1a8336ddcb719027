package coordinator

import (
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strings"
)

// The client address of a request is what every per-address limit keys
// on. X-Forwarded-For is a claim anyone can make, so it is believed only
// from a proxy the operator named (serve --trusted-proxy).

// trustedProxies is the set of addresses whose X-Forwarded-For is believed.
type trustedProxies []netip.Prefix

// parseTrustedProxies reads addresses ("10.0.0.7", "::1") and CIDRs
// ("10.0.0.0/8").
func parseTrustedProxies(list []string) (trustedProxies, error) {
	var out trustedProxies
	for _, s := range list {
		s = strings.TrimSpace(s)
		if strings.Contains(s, "/") {
			p, err := netip.ParsePrefix(s)
			if err != nil {
				return nil, fmt.Errorf("trusted proxy %q: %w (give an address such as 10.0.0.7 or a CIDR such as 10.0.0.0/8)", s, err)
			}
			out = append(out, p.Masked())
			continue
		}
		a, err := netip.ParseAddr(s)
		if err != nil {
			return nil, fmt.Errorf("trusted proxy %q: %w (give an address such as 10.0.0.7 or a CIDR such as 10.0.0.0/8)", s, err)
		}
		a = a.Unmap()
		out = append(out, netip.PrefixFrom(a, a.BitLen()))
	}
	return out, nil
}

func (t trustedProxies) contains(a netip.Addr) bool {
	for _, p := range t {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// remoteIP is the peer address of the connection, or an invalid Addr when
// RemoteAddr is not an IP (a test's fake request).
func remoteIP(r *http.Request) netip.Addr {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	a, _ := netip.ParseAddr(host)
	return a.Unmap()
}

// clientIP is the address of the client that made r: the peer, or, when
// the peer is a trusted proxy, the rightmost X-Forwarded-For entry that is
// not itself a trusted proxy (entries to its left were written by the
// client and prove nothing).
func (t trustedProxies) clientIP(r *http.Request) netip.Addr {
	ip := remoteIP(r)
	if !ip.IsValid() || !t.contains(ip) {
		return ip
	}
	hops := strings.Split(strings.Join(r.Header.Values("X-Forwarded-For"), ","), ",")
	for i := len(hops) - 1; i >= 0; i-- {
		a, err := netip.ParseAddr(strings.TrimSpace(hops[i]))
		if err != nil {
			break // a garbled entry: trust nothing further left
		}
		ip = a.Unmap()
		if !t.contains(ip) {
			break
		}
	}
	return ip
}

// clientKey is what per-address limits key on: an IPv4 address, or the
// /64 of an IPv6 one (one subscriber usually holds a whole /64, so keying
// by address would hand each of them 2^64 budgets).
func clientKey(a netip.Addr) string {
	if !a.IsValid() {
		return "unknown"
	}
	if a.Is4() {
		return a.String()
	}
	return netip.PrefixFrom(a, 64).Masked().String()
}

// clientKey is the limit key of the client that made r.
func (s *Server) clientKey(r *http.Request) string {
	return clientKey(s.proxies.clientIP(r))
}

// ConnState is for http.Server.ConnState: it holds each peer address (an
// IPv6 /64) to Config.MaxHTTPConnsPerAddress open HTTP connections,
// closing any more as they arrive. Every open connection can pin kernel
// memory with a response its client does not read (a snapshot or shard
// a worker with a lease gets free: 500 unread from one worker pinned
// 630 MB), or hold a goroutine while its headers trickle. A trusted
// proxy's connections are not counted; a connection handed to a
// websocket stops counting here (/ws has its own limit).
func (s *Server) ConnState(c net.Conn, st http.ConnState) {
	switch st {
	case http.StateNew:
		ip := remoteIPOf(c.RemoteAddr())
		if ip.IsValid() && s.proxies.contains(ip) {
			return
		}
		key := clientKey(ip)
		s.mu.Lock()
		over := s.httpConnsFrom[key] >= s.cfg.MaxHTTPConnsPerAddress
		if !over {
			s.httpConnsFrom[key]++
			s.httpConns[c] = key
		}
		s.mu.Unlock()
		if over {
			c.Close()
		}
	case http.StateHijacked, http.StateClosed:
		s.mu.Lock()
		if key, ok := s.httpConns[c]; ok {
			delete(s.httpConns, c)
			if s.httpConnsFrom[key]--; s.httpConnsFrom[key] <= 0 {
				delete(s.httpConnsFrom, key)
			}
		}
		s.mu.Unlock()
	}
}

// remoteIPOf is a connection's peer address, or an invalid Addr.
func remoteIPOf(a net.Addr) netip.Addr {
	if ta, ok := a.(*net.TCPAddr); ok {
		ip, _ := netip.AddrFromSlice(ta.IP)
		return ip.Unmap()
	}
	ap, err := netip.ParseAddrPort(a.String())
	if err != nil {
		return netip.Addr{}
	}
	return ap.Addr().Unmap()
}
