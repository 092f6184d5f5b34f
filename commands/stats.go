package commands

import (
	"hash/maphash"
	"sort"
	"sync"
	"sync/atomic"
	"time"
)

// LatencyBuckets are the upper bounds of the per-command latency
// histogram, in seconds (the last bucket, +Inf, is implicit).
var LatencyBuckets = []float64{10e-6, 25e-6, 50e-6, 100e-6, 250e-6, 500e-6, 1e-3, 2.5e-3, 5e-3, 10e-3, 25e-3, 50e-3, 100e-3, 250e-3, 1}

var latencyBoundsNS = func() []int64 {
	b := make([]int64, len(LatencyBuckets))
	for i, s := range LatencyBuckets {
		b[i] = int64(s * 1e9)
	}
	return b
}()

// cmdStats are one command's counters. They are updated with atomics on
// the command's hot path and read by INFO and the metrics endpoint.
type cmdStats struct {
	calls, usec, failed, rejected atomic.Int64 // usec holds nanoseconds
	allowed, limited              atomic.Int64 // limiter decisions
	buckets                       [16]atomic.Int64
}

func (st *cmdStats) observe(ns int64) {
	st.usec.Add(ns)
	i := 0
	for i < len(latencyBoundsNS) && ns > latencyBoundsNS[i] {
		i++
	}
	st.buckets[i].Add(1)
}

func (st *cmdStats) reset() {
	st.calls.Store(0)
	st.usec.Store(0)
	st.failed.Store(0)
	st.rejected.Store(0)
	st.allowed.Store(0)
	st.limited.Store(0)
	for i := range st.buckets {
		st.buckets[i].Store(0)
	}
}

// CommandStats is a snapshot of one command's counters.
type CommandStats struct {
	Name     string
	Calls    int64
	Failed   int64 // calls that replied with an error
	Rejected int64 // refused before running (arity, auth, ...)
	Allowed  int64 // limiter commands: admitted decisions
	Limited  int64 // limiter commands: limited decisions
	// Latency: cumulative counts per LatencyBuckets bound (len+1 entries,
	// the last for +Inf) and the sum of latencies in seconds.
	Buckets []uint64
	Sum     float64
	Limiter bool // the command returns limiter decisions
}

// Stats is a snapshot of the server's counters.
type Stats struct {
	Commands       []CommandStats // commands called at least once, by name
	Errors         map[string]int64
	ExpiredKeys    int64
	OOMRefusals    int64 // commands refused by maxmemory (noeviction)
	EvictedKeys    int64 // keys evicted by maxmemory (allkeys-lru)
	StateMemory    int64 // estimated bytes of the keys
	MaxMemory      int64
	LimitedPrefix  []PrefixCount // most-limited key prefixes, last full interval
	LimitedDropped int64         // limited decisions whose prefix did not fit the tracker
	Policies       []PolicyStats // per policy of the policies in force, by name
}

// Stats returns a snapshot of the counters.
func (s *Server) Stats() Stats {
	mem := s.ks.Memory()
	st := Stats{Errors: map[string]int64{}, ExpiredKeys: s.expired.Load(), OOMRefusals: s.oomRefusals.Load(),
		EvictedKeys: mem.Evicted, StateMemory: mem.Used, MaxMemory: mem.MaxMemory}
	for _, sp := range s.specs {
		c := &sp.stats
		calls := c.calls.Load()
		if calls == 0 && c.rejected.Load() == 0 {
			continue
		}
		cs := CommandStats{Name: sp.Name, Calls: calls, Failed: c.failed.Load(), Rejected: c.rejected.Load(),
			Allowed: c.allowed.Load(), Limited: c.limited.Load(), Sum: float64(c.usec.Load()) / 1e9,
			Limiter: sp.Flags&Module != 0 && sp.Name != "cl.info" && sp.Name != "cl.release"}
		var cum uint64
		for i := 0; i <= len(LatencyBuckets); i++ {
			cum += uint64(c.buckets[i].Load())
			cs.Buckets = append(cs.Buckets, cum)
		}
		st.Commands = append(st.Commands, cs)
	}
	sort.Slice(st.Commands, func(i, j int) bool { return st.Commands[i].Name < st.Commands[j].Name })
	for _, e := range s.errorStats() {
		st.Errors[e.code] = e.count
	}
	st.LimitedPrefix, st.LimitedDropped = s.prefixes.top()
	st.Policies = s.policyStats()
	return st
}

// PrefixCount is how many limited decisions keys with Prefix received.
type PrefixCount struct {
	Prefix string
	Count  int64
}

// prefixTracker counts limited decisions per key prefix (the key up to the
// first separator) over fixed intervals, in a bounded table: at most
// capacity prefixes per interval, the rest counted as dropped. top reports
// the most limited prefixes of the last complete interval, so the label
// cardinality of the metric is bounded by topN.
type prefixTracker struct {
	sep      byte
	topN     int
	capacity int
	interval time.Duration
	now      func() time.Time
	seed     maphash.Seed

	shards [8]struct {
		mu      sync.Mutex        // guards counts, dropped
		counts  map[string]*int64 // pointers: incrementing needs no key conversion
		dropped int64
		_       [40]byte
	}

	mu      sync.Mutex // guards start, last, lastDrop
	start   time.Time
	last    []PrefixCount
	lastDrp int64
}

func newPrefixTracker(sep byte, topN int, interval time.Duration, now func() time.Time) *prefixTracker {
	pt := &prefixTracker{sep: sep, topN: topN, capacity: 64 * topN, interval: interval, now: now, seed: maphash.MakeSeed(), start: now()}
	for i := range pt.shards {
		pt.shards[i].counts = map[string]*int64{}
	}
	return pt
}

// NoPrefix is the prefix under which the most-limited-prefixes statistics
// count a key that has no separator: such a key is a whole identifier (an
// e-mail address, an IP address), which the metrics must not expose.
const NoPrefix = "(none)"

// prefix returns key up to its first separator, or NoPrefix.
func (pt *prefixTracker) prefix(key []byte) []byte {
	for i, c := range key {
		if c == pt.sep {
			return key[:i]
		}
	}
	return noPrefix
}

var noPrefix = []byte(NoPrefix)

// add counts one limited decision for key.
func (pt *prefixTracker) add(key []byte) {
	p := pt.prefix(key)
	sh := &pt.shards[maphash.Bytes(pt.seed, p)%uint64(len(pt.shards))]
	sh.mu.Lock()
	if n := sh.counts[string(p)]; n != nil {
		*n++
	} else if len(sh.counts) < pt.capacity/len(pt.shards) {
		one := int64(1)
		sh.counts[string(p)] = &one
	} else {
		sh.dropped++
	}
	sh.mu.Unlock()
}

// rotate closes the current interval if it is over.
func (pt *prefixTracker) rotate() {
	pt.mu.Lock()
	defer pt.mu.Unlock()
	if pt.now().Sub(pt.start) < pt.interval {
		return
	}
	var all []PrefixCount
	var dropped int64
	for i := range pt.shards {
		sh := &pt.shards[i]
		sh.mu.Lock()
		for p, n := range sh.counts {
			all = append(all, PrefixCount{p, *n})
		}
		dropped += sh.dropped
		sh.counts = map[string]*int64{}
		sh.dropped = 0
		sh.mu.Unlock()
	}
	sort.Slice(all, func(i, j int) bool {
		if all[i].Count != all[j].Count {
			return all[i].Count > all[j].Count
		}
		return all[i].Prefix < all[j].Prefix
	})
	if len(all) > pt.topN {
		all = all[:pt.topN]
	}
	pt.last, pt.lastDrp, pt.start = all, dropped, pt.now()
}

func (pt *prefixTracker) top() ([]PrefixCount, int64) {
	pt.rotate()
	pt.mu.Lock()
	defer pt.mu.Unlock()
	return append([]PrefixCount(nil), pt.last...), pt.lastDrp
}

// decided records a limiter decision of the running command on key.
func (x *ctx) decided(limited bool, key []byte) {
	if limited {
		x.spec.stats.limited.Add(1)
		x.s.prefixes.add(key)
		return
	}
	x.spec.stats.allowed.Add(1)
}

// oom refuses the running command for lack of memory (noeviction).
func (x *ctx) oom() {
	x.s.oomRefusals.Add(1)
	x.errorReply(msgOOM)
}
