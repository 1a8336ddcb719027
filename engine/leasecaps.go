package engine

import "time"

// A hostage takes leases and never answers: each of its leases holds a
// task until the deadline, and at the end of an epoch the whole job waits
// on it. Each expiry halves the lease cap of the volunteer whose lease it
// was (at least 1; all its connections together), and each accepted
// result raises the cap by one again, up to the whole cap. A volunteer
// whose leases expire a given number of times in a row, with no accepted
// result between, is to be dropped (the coordinator closes its
// connections and refuses it for a while); its count in a row then
// starts again.

// maxCapped bounds the volunteers with a cut cap remembered; past it,
// the longest untouched is forgotten (back to a whole cap).
const maxCapped = 4096

// leaseCap is a volunteer's cut lease cap.
type leaseCap struct {
	cap     int // leases it may hold, all its connections together
	inARow  int // expiries since its last accepted result
	expired int // expiries in all, for the idle message
	at      time.Time
}

// LeaseCaps are a job's cut lease caps, by volunteer. The zero value has
// none. Not safe for concurrent use: a job's loop owns it.
type LeaseCaps struct {
	caps map[string]*leaseCap
}

// Expired counts an expiry of a lease of volunteer v at now, where a
// whole cap is whole leases and dropAfter expiries in a row drop a
// volunteer. It returns the cap v may hold now and its expiries in a row,
// and drop when they reach dropAfter (the count in a row then starts
// again).
func (c *LeaseCaps) Expired(v string, now time.Time, whole, dropAfter int) (capNow, inARow int, drop bool) {
	lc := c.caps[v]
	if lc == nil {
		if c.caps == nil {
			c.caps = map[string]*leaseCap{}
		}
		if len(c.caps) >= maxCapped {
			c.forgetOldest()
		}
		lc = &leaseCap{cap: whole}
		c.caps[v] = lc
	}
	lc.cap = max(1, lc.cap/2)
	lc.inARow++
	lc.expired++
	lc.at = now
	capNow, inARow = lc.cap, lc.inARow
	if lc.inARow >= dropAfter {
		lc.inARow, drop = 0, true
	}
	return capNow, inARow, drop
}

// Accepted raises the cap of volunteer v by one after an accepted result
// at now, and forgets it once whole.
func (c *LeaseCaps) Accepted(v string, now time.Time, whole int) {
	lc := c.caps[v]
	if lc == nil {
		return
	}
	lc.inARow = 0
	lc.at = now
	if lc.cap++; lc.cap >= whole {
		delete(c.caps, v)
	}
}

// Cap returns volunteer v's cut cap and its expiries in all; ok is false
// when its cap is whole.
func (c *LeaseCaps) Cap(v string) (capNow, expired int, ok bool) {
	lc := c.caps[v]
	if lc == nil {
		return 0, 0, false
	}
	return lc.cap, lc.expired, true
}

// Len is how many volunteers have a cut cap.
func (c *LeaseCaps) Len() int { return len(c.caps) }

func (c *LeaseCaps) forgetOldest() {
	var oldest string
	var at time.Time
	for v, lc := range c.caps {
		if oldest == "" || lc.at.Before(at) {
			oldest, at = v, lc.at
		}
	}
	delete(c.caps, oldest)
}
