package coordinator

import (
	"container/list"
	"math"
	"sync"
	"time"
)

// rateLimiter is a token bucket per client key: each key holds up to
// burst tokens and regains rate tokens per second. The table holds at most
// max keys; a new key beyond that evicts the least recently used one, so
// a spray of addresses cannot grow memory, and cannot reset the budgets of
// the addresses still in use either.
//
// All methods may be called concurrently.
type rateLimiter struct {
	rate  float64 // tokens per second
	burst float64
	max   int

	mu      sync.Mutex
	entries map[string]*list.Element // of *limiterEntry
	lru     list.List                // front: most recently used
}

type limiterEntry struct {
	key    string
	tokens float64
	at     time.Time
}

func newRateLimiter(rate, burst float64, max int) *rateLimiter {
	return &rateLimiter{rate: rate, burst: burst, max: max, entries: map[string]*list.Element{}}
}

// entry returns key's bucket refilled to now, creating it (full) if absent.
// l.mu must be held.
func (l *rateLimiter) entry(key string, now time.Time) *limiterEntry {
	if el := l.entries[key]; el != nil {
		l.lru.MoveToFront(el)
		e := el.Value.(*limiterEntry)
		if dt := now.Sub(e.at).Seconds(); dt > 0 {
			e.tokens = math.Min(l.burst, e.tokens+dt*l.rate)
		}
		e.at = now
		return e
	}
	for len(l.entries) >= l.max {
		oldest := l.lru.Back()
		delete(l.entries, oldest.Value.(*limiterEntry).key)
		l.lru.Remove(oldest)
	}
	e := &limiterEntry{key: key, tokens: l.burst, at: now}
	l.entries[key] = l.lru.PushFront(e)
	return e
}

// wait is how long until e holds need tokens.
func (l *rateLimiter) wait(e *limiterEntry, need float64) time.Duration {
	if l.rate <= 0 {
		return time.Duration(math.MaxInt64)
	}
	return time.Duration((need - e.tokens) / l.rate * float64(time.Second))
}

// take spends n tokens of key. A request larger than the burst is allowed
// when the bucket is full and leaves it in debt, so a big but legitimate
// download is possible, just not often. When not allowed, it says how long
// to wait and spends nothing.
func (l *rateLimiter) take(key string, n float64, now time.Time) (ok bool, retry time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	e := l.entry(key, now)
	need := math.Min(n, l.burst)
	if e.tokens < need {
		return false, l.wait(e, need)
	}
	e.tokens -= n
	return true, 0
}

// refund gives back n tokens taken for something that turned out free.
func (l *rateLimiter) refund(key string, n float64, now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	e := l.entry(key, now)
	e.tokens = math.Min(l.burst, e.tokens+n)
}

// size is how many keys the table holds.
func (l *rateLimiter) size() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.entries)
}

// retryAfterSeconds is a Retry-After value: whole seconds, at least 1.
func retryAfterSeconds(d time.Duration) int {
	return max(1, int(math.Ceil(d.Seconds())))
}
