package commands

import (
	"runtime"
	"sort"
	"strconv"
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

// The statistics are counted in shards, one per event loop: a command
// adds to the shard of its client's loop (clients served on goroutines of
// their own take the shards in turn), so that loops running on different
// cores never write the same cache line, and readers (INFO, the metrics
// endpoint) add the shards up. A shard has a single writer unless there
// are more loops than shards or goroutine-served clients; the atomics keep
// the counts exact either way.

// statShard is one shard of a group of counters, such as one command's:
// 32 slots of which a group uses at most statSlots, so that the slots in
// use of two shards (adjacent, or of two groups allocated side by side)
// are 80 bytes apart or more, never on one 64-byte cache line.
type statShard [32]atomic.Int64

// statSlots is how many slots of a statShard a group may use.
const statSlots = 22

// statShards is how many shards the counters have: one per core (the
// default number of event loops), at most maxStatShards.
func statShards() int { return min(runtime.GOMAXPROCS(0), maxStatShards) }

// maxStatShards bounds the shards: their memory, and the index a client
// holds in 16 bits.
const maxStatShards = 256

// newShards returns n shards for a group of counters.
func newShards(n int) []statShard { return make([]statShard, max(n, 1)) }

// A counter is one statistic of a group: slot slot of each of its shards.
type counter struct {
	shards []statShard
	slot   int
}

// Add adds n to the counter in shard shard (taken modulo the shards).
func (c counter) Add(shard uint16, n int64) { c.shards[int(shard)%len(c.shards)][c.slot].Add(n) }

// Load returns the counter's total over its shards.
func (c counter) Load() int64 {
	var n int64
	for i := range c.shards {
		n += c.shards[i][c.slot].Load()
	}
	return n
}

func (c counter) reset() {
	for i := range c.shards {
		c.shards[i][c.slot].Store(0)
	}
}

// cmdStats are one command's counters, read by INFO and the metrics
// endpoint: statSlots counters sharing one set of shards.
type cmdStats struct {
	calls, usec, failed, rejected counter // usec holds nanoseconds
	allowed, limited              counter // limiter decisions
	buckets                       [16]counter
}

func newCmdStats(shards int) cmdStats {
	sh := newShards(shards)
	slot := 0
	next := func() counter {
		slot++
		return counter{sh, slot - 1}
	}
	st := cmdStats{calls: next(), usec: next(), failed: next(), rejected: next(), allowed: next(), limited: next()}
	for i := range st.buckets {
		st.buckets[i] = next()
	}
	if slot > statSlots {
		panic("commands: cmdStats uses " + strconv.Itoa(slot) + " slots, more than statSlots")
	}
	return st
}

// observe counts a call's latency of ns nanoseconds in shard shard.
func (st *cmdStats) observe(shard uint16, ns int64) {
	st.usec.Add(shard, ns)
	i := 0
	for i < len(latencyBoundsNS) && ns > latencyBoundsNS[i] {
		i++
	}
	st.buckets[i].Add(shard, 1)
}

func (st *cmdStats) reset() {
	for _, c := range []counter{st.calls, st.usec, st.failed, st.rejected, st.allowed, st.limited} {
		c.reset()
	}
	for _, c := range st.buckets {
		c.reset()
	}
}

// serviceStats are the server-wide counters INFO reports.
type serviceStats struct {
	errMu       sync.Mutex // guards errors
	errors      map[string]int64
	expired     atomic.Int64 // keys removed by the active sweep
	oomRefusals atomic.Int64 // commands refused for lack of memory
	cmdsTotal   counter      // commands run, in statShards shards
	openSeq     atomic.Int64 // clients opened: the shard of one without an event loop
	// Read-command lookups that found their key or not (keyspace_hits,
	// _misses), time spent in active expiry (expire_cycle_cpu_milliseconds)
	// and the sampled instantaneous figures.
	keyspaceHits   atomic.Int64
	keyspaceMisses atomic.Int64
	expireNS       atomic.Int64
	inst           instStats
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
func (s *Service) Stats() Stats {
	mem := s.ks.Memory()
	st := Stats{Errors: map[string]int64{}, ExpiredKeys: s.stats.expired.Load(), OOMRefusals: s.stats.oomRefusals.Load(),
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
// first separator) over fixed intervals, in bounded tables: one per shard
// (event loop, as the statistics above), each of at most capacity
// prefixes per interval, the rest counted as dropped. A shard's lock is
// taken by its loop and, once per interval, by the reader that closes the
// interval, so a busy prefix does not make the loops wait for each other.
// top reports the most limited prefixes of the last complete interval
// (the shards added up), so the label cardinality of the metric is bounded
// by topN.
type prefixTracker struct {
	sep      byte
	topN     int
	capacity int // prefixes per shard and interval
	interval time.Duration
	now      func() time.Time

	shards []prefixShard

	mu      sync.Mutex // guards start, last, lastDrp
	start   time.Time
	last    []PrefixCount
	lastDrp int64
}

// prefixShard is one shard's table of a prefixTracker, padded so that
// two shards' fields are never on one cache line.
type prefixShard struct {
	_       [64]byte
	mu      sync.Mutex        // guards counts, dropped
	counts  map[string]*int64 // pointers: incrementing needs no key conversion
	dropped int64
	_       [64]byte
}

func newPrefixTracker(sep byte, topN int, interval time.Duration, now func() time.Time, shards int) *prefixTracker {
	pt := &prefixTracker{sep: sep, topN: topN, capacity: 64 * topN, interval: interval, now: now,
		shards: make([]prefixShard, max(shards, 1)), start: now()}
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

// add counts one limited decision for key in shard shard (taken modulo
// the shards).
func (pt *prefixTracker) add(shard uint16, key []byte) {
	p := pt.prefix(key)
	sh := &pt.shards[int(shard)%len(pt.shards)]
	sh.mu.Lock()
	if n := sh.counts[string(p)]; n != nil {
		*n++
	} else if len(sh.counts) < pt.capacity {
		one := int64(1)
		sh.counts[string(p)] = &one
	} else {
		sh.dropped++
	}
	sh.mu.Unlock()
}

// rotate closes the current interval if it is over: the shards' tables
// are added up and emptied.
func (pt *prefixTracker) rotate() {
	pt.mu.Lock()
	defer pt.mu.Unlock()
	if pt.now().Sub(pt.start) < pt.interval {
		return
	}
	sums := map[string]int64{}
	var dropped int64
	for i := range pt.shards {
		sh := &pt.shards[i]
		sh.mu.Lock()
		counts := sh.counts
		dropped += sh.dropped
		sh.counts = make(map[string]*int64, len(counts))
		sh.dropped = 0
		sh.mu.Unlock()
		for p, n := range counts {
			sums[p] += *n
		}
	}
	all := make([]PrefixCount, 0, len(sums))
	for p, n := range sums {
		all = append(all, PrefixCount{p, n})
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
		x.spec.stats.limited.Add(x.cl.shard, 1)
		x.s.prefixes.add(x.cl.shard, key)
		return
	}
	x.spec.stats.allowed.Add(x.cl.shard, 1)
}

// oom refuses the running command for lack of memory (noeviction).
func (x *ctx) oom() {
	x.s.stats.oomRefusals.Add(1)
	x.errorReply(msgOOM)
}

func (s *Service) countError(msg string) {
	code := errorCode(msg)
	s.stats.errMu.Lock()
	s.stats.errors[code]++
	s.stats.errMu.Unlock()
}

func (s *Service) errorStats() []errStat {
	s.stats.errMu.Lock()
	defer s.stats.errMu.Unlock()
	out := make([]errStat, 0, len(s.stats.errors))
	for k, v := range s.stats.errors {
		out = append(out, errStat{k, v})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].code < out[j].code })
	return out
}

type errStat struct {
	code  string
	count int64
}
