package httplimit

import (
	"sync"
	"time"

	"github.com/cellserver/cellserver/client"
	"github.com/cellserver/cellserver/gcra"
	"github.com/cellserver/cellserver/limiter"
)

// stateKey names a (limit, key) pair in the deny cache and the Local
// fallback.
type stateKey struct {
	idx int
	key string
}

// evictScan is how many entries an insert into a full map looks at (in Go's
// randomised map order) for an expired one to evict before evicting the
// first it saw.
const evictScan = 8

// denyCache remembers refusals: (limit, key) is refused until until, for
// any request of at least cost units.
type denyCache struct {
	mu  sync.Mutex // guards m
	m   map[stateKey]denyEntry
	max int
}

type denyEntry struct {
	until     int64 // Clock ns: refused before this instant
	resetAt   int64 // Clock ns: the limit's reset as reported
	cost      int64 // the refused cost: smaller requests go to the server
	remaining int64 // Remaining as reported
}

func newDenyCache(n int) *denyCache {
	return &denyCache{m: make(map[stateKey]denyEntry), max: n}
}

// lookup returns a live entry for one of app that refuses cost at now, and
// app's index of it.
func (c *denyCache) lookup(app []applied, cost, now int64) (denyEntry, int, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.m) == 0 {
		return denyEntry{}, 0, false
	}
	for i, a := range app {
		e, ok := c.m[stateKey(a)]
		if !ok {
			continue
		}
		if now >= e.until {
			delete(c.m, stateKey(a))
			continue
		}
		if cost >= e.cost {
			return e, i, true
		}
	}
	return denyEntry{}, 0, false
}

// add records a refusal of cost units for a at now with the server's result.
func (c *denyCache) add(a applied, cost, now int64, r client.Result) {
	if r.RetryAfter <= 0 {
		return
	}
	e := denyEntry{until: now + int64(r.RetryAfter), resetAt: now + int64(r.ResetAfter), cost: cost, remaining: r.Remaining}
	c.mu.Lock()
	defer c.mu.Unlock()
	k := stateKey(a)
	if old, ok := c.m[k]; ok && old.until > now && old.cost < cost {
		return // keep the entry that covers more requests
	}
	if _, ok := c.m[k]; !ok && len(c.m) >= c.max {
		evict(c.m, func(e denyEntry) bool { return e.until <= now })
	}
	c.m[k] = e
}

// evict deletes one entry of m: an expired one among the first evictScan
// seen, else the first seen.
func evict[V any](m map[stateKey]V, expired func(V) bool) {
	var first stateKey
	n := 0
	for k, v := range m {
		if expired(v) {
			delete(m, k)
			return
		}
		if n == 0 {
			first = k
		}
		if n++; n == evictScan {
			break
		}
	}
	delete(m, first)
}

// len returns the number of entries (Stats.DenyCacheEntries).
func (c *denyCache) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.m)
}

// localState is the Local fallback's limiter state, one entry per (limit,
// key), at most max entries, under one mutex (only the fallback path takes
// it).
type localState struct {
	mu  sync.Mutex // guards m
	m   map[stateKey]*localEntry
	max int
}

type localEntry struct {
	exists   bool
	tat      uint64 // GCRA
	fixed    limiter.FixedState
	sliding  limiter.SlidingState
	log      limiter.Log
	expireAt int64 // ns: the entry holds nothing after this
	// pending state of the current decision, applied if all limits admit
	nextTAT     uint64
	nextFixed   limiter.FixedState
	nextSliding limiter.SlidingState
	nextExpire  int64
}

func newLocalState(n int) *localState {
	return &localState{m: make(map[stateKey]*localEntry), max: n}
}

// reset drops every entry: cellserver answers again.
func (s *localState) reset() {
	s.mu.Lock()
	clear(s.m)
	s.mu.Unlock()
}

// size returns the number of entries (Stats.LocalKeys).
func (s *localState) size() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.m)
}

// decide decides cost units for app at now with each limit's local quota,
// all or nothing like CL.ALL, and returns one Result per app entry.
func (s *localState) decide(limits []limit, app []applied, cost, now int64) (bool, []client.Result) {
	s.mu.Lock()
	defer s.mu.Unlock()
	results := make([]client.Result, len(app))
	var ebuf [8]*localEntry
	ents := ebuf[:0]
	allowed := true
	for i, a := range app {
		l := &limits[a.idx]
		e := s.m[stateKey(a)]
		if e == nil {
			e = &localEntry{}
		} else if e.expireAt <= now {
			*e = localEntry{log: limiter.Log{Entries: e.log.Entries[:0]}}
		}
		ents = append(ents, e)
		period := int64(l.Window)
		rule := limiter.Rule{Limit: l.local, Period: period}
		var res client.Result
		switch l.Algorithm {
		case GCRA:
			r, err := gcra.Decide(now, e.tat, e.exists, gcra.Params{MaxBurst: l.local - 1, Count: l.local, PeriodNS: period, Quantity: cost})
			if err != nil { // a rate under 1 ns per unit: cannot happen for a valid Limit
				r = gcra.Result{Limited: true, Limit: l.local, RetryAfterMillis: -1}
			}
			res = client.Result{Allowed: !r.Limited, Limit: r.Limit, Remaining: r.Remaining,
				ResetAfter: max(0, time.Duration(r.ResetAfterMillis)*time.Millisecond)}
			if r.Limited {
				res.RetryAfter = client.Never
				if r.RetryAfterMillis >= 0 {
					res.RetryAfter = time.Duration(r.RetryAfterMillis) * time.Millisecond
				}
			} else {
				e.nextTAT = r.NewTAT
				e.nextExpire = now + r.TTLMillis*int64(time.Millisecond)
			}
		case Fixed:
			next, d, _, exp := limiter.Fixed(e.fixed, e.exists, now, rule, cost)
			res = fromDecision(d)
			e.nextFixed, e.nextExpire = next, exp
		case Sliding:
			next, d, _, exp := limiter.Sliding(e.sliding, e.exists, now, rule, cost)
			res = fromDecision(d)
			e.nextSliding, e.nextExpire = next, exp
		case SlidingLog:
			res = fromDecision(e.log.Decide(now, rule, cost))
		}
		results[i] = res
		allowed = allowed && res.Allowed
	}
	if !allowed {
		return false, results
	}
	for i, a := range app {
		l, e := &limits[a.idx], ents[i]
		switch l.Algorithm {
		case GCRA:
			e.tat = e.nextTAT
		case Fixed:
			e.fixed = e.nextFixed
		case Sliding:
			e.sliding = e.nextSliding
		case SlidingLog:
			e.nextExpire = e.log.Apply(now, limiter.Rule{Limit: l.local, Period: int64(l.Window)}, cost)
		}
		e.exists = true
		e.expireAt = e.nextExpire
		k := stateKey(a)
		if _, ok := s.m[k]; !ok {
			if len(s.m) >= s.max {
				evict(s.m, func(e *localEntry) bool { return e.expireAt <= now })
			}
			s.m[k] = e
		}
	}
	return true, results
}

func fromDecision(d limiter.Decision) client.Result {
	r := client.Result{Allowed: !d.Limited, Limit: d.Limit, Remaining: d.Remaining, ResetAfter: time.Duration(d.ResetAfter)}
	if d.Limited {
		r.RetryAfter = client.Never
		if d.RetryAfter >= 0 {
			r.RetryAfter = time.Duration(d.RetryAfter)
		}
	}
	return r
}
