package commands

import (
	"math"
	"sort"
	"strconv"
	"unicode/utf8"

	"github.com/cellserver/cellserver/gcra"
	"github.com/cellserver/cellserver/keyspace"
	"github.com/cellserver/cellserver/limiter"
)

// CL.PEEK key max_burst count period [MS]: what CL.THROTTLE ... 0 would
// answer (same errors too), without creating the key, refreshing its TTL or
// writing anything.
func cmdPeek(x *ctx) {
	args, ms := trailingMS(x.args[1:])
	for _, a := range x.args {
		if !utf8.Valid(a) {
			x.errorReply(msgCellBadUTF8)
			return
		}
	}
	if len(args) != 4 {
		x.errorReply(errWrongArity("cl.peek"))
		return
	}
	p, msg := gcraParams(args[1:4], true)
	if msg != noErr {
		x.errorReply(msg)
		return
	}
	p.Quantity = 0 // a peek
	now := x.clockNS()
	cur := x.keys[0].peek(floorDiv(now, 1e6)) // args[0]
	x.s.lookedUp(cur != nil)
	tat, msg := storedTAT(cur)
	if msg != noErr {
		x.errorReply(msg)
		return
	}
	r, err := gcra.Decide(now, tat, cur != nil, p)
	if err != nil { // unreachable: gcraParams checked the rate
		x.errorReply(msgCellZeroRate)
		return
	}
	t := tuple{r.Limited, r.Limit, r.Remaining, r.RetryAfter, r.ResetAfter}
	if ms {
		t.retry, t.resetA = r.RetryAfterMillis, r.ResetAfterMillis
	}
	x.tuple(t)
}

// tatInMS is how far the TAT tat (unsigned ns since the Unix epoch) lies
// after now, in ms, rounded down; saturating at math.MaxInt64.
func tatInMS(tat uint64, now int64) int64 {
	if now >= 0 && tat >= uint64(now) {
		return int64(min((tat-uint64(now))/1e6, math.MaxInt64))
	}
	if tat > math.MaxInt64 { // now < 0 (tests): far ahead
		return math.MaxInt64
	}
	return floorDiv(int64(tat)-now, 1e6)
}

// CL.INFO key: the key's limiter kind, state and TTL as field/value pairs.
func cmdLimiterInfo(x *ctx) {
	now := x.clockNS()
	nowMS := floorDiv(now, 1e6)
	v := x.keys[0].peek(nowMS)
	x.s.lookedUp(v != nil)
	if v == nil {
		x.nullArray()
		return
	}
	ttl := int64(-1)
	if v.Exp != 0 {
		ttl = max(v.Exp-nowMS, 0)
	}
	type field struct {
		name string
		val  any
	}
	var f []field
	switch v.Kind {
	case keyspace.KindString:
		f = []field{{"kind", "string"}, {"bytes", int64(len(v.Obj.([]byte)))}}
	case keyspace.KindGCRA:
		// tat_ns is a bulk string of decimal digits: nanoseconds since
		// the epoch (about 1.8e18) are past 2^53, so a JavaScript client
		// would round an integer reply. Every other figure is a count or
		// milliseconds, exact as integers.
		// The TAT is unsigned, as GET shows it (a settled debt may reach
		// 2^64-1 ns, the year 2554).
		f = []field{{"kind", "gcra"}, {"tat_ns", strconv.FormatUint(v.N, 10)}, {"tat_in_ms", tatInMS(v.N, now)}}
	case keyspace.KindFixed:
		f = []field{{"kind", "fixed"}, {"window_start_ms", v.WindowStart() / 1e6}, {"count", v.FixedCount()}}
	case keyspace.KindSliding:
		prev, cur := v.SlidingCounts()
		f = []field{{"kind", "sliding"}, {"window_start_ms", v.WindowStart() / 1e6}, {"previous", prev}, {"current", cur}}
	case keyspace.KindLog:
		l := v.Obj.(*limiter.Log)
		f = []field{{"kind", "slidinglog"}, {"entries", int64(len(l.Entries))}, {"units", l.Units}}
		if len(l.Entries) > 0 {
			f = append(f, field{"oldest_ms", l.Entries[0].T / 1e6}, field{"newest_ms", l.Entries[len(l.Entries)-1].T / 1e6})
		}
	case keyspace.KindLeases:
		toks := leasesOf(v, &x.cl.scratch.leases).Tokens(now)
		sort.Strings(toks)
		f = []field{{"kind", "concurrency"}, {"leases", int64(len(toks))}, {"tokens", toks}}
	}
	if res := reservationsOf(v); res != nil {
		f = append(f, field{"reservations", int64(res.Live(now))}, field{"reservations_open", int64(res.Open(now))})
	}
	f = append(f, field{"ttl_ms", ttl})
	x.mapLen(len(f))
	for _, e := range f {
		x.bulkStr(e.name)
		switch val := e.val.(type) {
		case string:
			x.bulkStr(val)
		case int64:
			x.int(val)
		case []string:
			x.array(len(val))
			for _, s := range val {
				x.bulkStr(s)
			}
		}
	}
}
