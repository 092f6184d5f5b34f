package commands

import (
	"bytes"
	"math"
	"slices"
	"sort"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/cellserver/cellserver/gcra"
	"github.com/cellserver/cellserver/keyspace"
	"github.com/cellserver/cellserver/limiter"
	"github.com/cellserver/cellserver/policy"
	"github.com/tidwall/redcon"
)

// The limiter family: CL.PEEK, CL.FIXED, CL.SLIDING, CL.SLIDINGLOG,
// CL.ACQUIRE/CL.RELEASE, CL.ALL and CL.INFO. Every limiter reply has
// CL.THROTTLE's shape [limited, limit, remaining, retry_after, reset_after];
// durations are whole seconds rounded up, or milliseconds rounded up with a
// trailing MS argument (CL.PEEK keeps redis-cell's rounding, since it must
// answer exactly what CL.THROTTLE ... 0 would).

// tuple is one limiter reply, durations already in reply units.
type tuple struct {
	limited                         bool
	limit, remaining, retry, resetA int64
}

func (x *ctx) tuple(t tuple) { x.c.Out = appendTuple(x.c.Out, t) }

// appendTuple appends t as the five integers of a limiter's reply.
func appendTuple(b []byte, t tuple) []byte { return appendTupleIn(b, 5, t) }

// appendTupleIn appends the header of an array of n >= 5 elements and t's
// five integers as its first ones; the caller appends the others.
func appendTupleIn(b []byte, n int, t tuple) []byte {
	b = redcon.AppendArray(b, n)
	if t.limited {
		b = redcon.AppendInt(b, 1)
	} else {
		b = redcon.AppendInt(b, 0)
	}
	b = redcon.AppendInt(b, t.limit)
	b = redcon.AppendInt(b, t.remaining)
	b = redcon.AppendInt(b, t.retry)
	return redcon.AppendInt(b, t.resetA)
}

// units converts a duration in ns for a reply: -1 stays -1 (not
// applicable), otherwise seconds or milliseconds rounded up.
func units(ns int64, ms bool) int64 {
	if ns < 0 {
		return -1
	}
	div := int64(time.Second)
	if ms {
		div = int64(time.Millisecond)
	}
	q := ns / div
	if ns%div != 0 {
		q++
	}
	return q
}

func decisionTuple(d limiter.Decision, ms bool) tuple {
	return tuple{d.Limited, d.Limit, d.Remaining, units(d.RetryAfter, ms), units(d.ResetAfter, ms)}
}

// expiryMS turns an instant in ns into a key expiry in ms, rounded up so a
// key never disappears before its state is empty.
func expiryMS(ns int64) int64 {
	ms := ns / 1e6
	if ns%1e6 != 0 {
		ms++
	}
	return ms
}

// parsePeriod accepts an integer number of seconds or a Go duration with a
// unit (250ms, 1.5s, 10m, 1h) and returns ns within (0, limiter.MaxPeriod].
func parsePeriod(b []byte) (int64, bool) {
	if n, ok := parseRustI64(b); ok {
		if n < 1 || n > int64(limiter.MaxPeriod/time.Second) {
			return 0, false
		}
		return n * int64(time.Second), true
	}
	d, err := time.ParseDuration(string(b))
	if err != nil || limiter.CheckPeriod(int64(d)) != nil {
		return 0, false
	}
	return int64(d), true
}

// check is one parsed limiter call, standalone or inside CL.ALL.
type check struct {
	name  string // the command, lower-case, for error texts
	kind  keyspace.Kind
	key   []byte
	gp    gcra.Params // CL.THROTTLE
	limit int64
	per   int64 // period or lease, ns
	q     int64
	token []byte
	ms    bool
	// CL.APPLY: the policy the check applies; a shadow check's refusal
	// does not block the others of runAll.
	pol    *policy.Policy
	shadow bool

	// CL.RESERVE: the reservation's ttl in ns, and its id once apply
	// recorded it (-1 until then).
	reserve bool
	ttl     int64
	id      int64

	// Set by decide, used by apply.
	t         tuple
	gres      gcra.Result
	next      keyspace.Value // scalar kinds: the value to store
	store     bool
	expireErr bool // CL.THROTTLE: allowed, but its TTL cannot be set
}

// rule is the window kinds' rule: c.limit units per c.per ns.
func (c *check) rule() limiter.Rule { return limiter.Rule{Limit: c.limit, Period: c.per} }

// parse sets c, which must be zero, to the call of the limiter command
// name with args (key first, then its parameters; a trailing MS already
// removed). It returns an error or noErr.
func (c *check) parse(name string, args [][]byte) (msg wireErr) {
	c.name, c.key = name, args[0]
	switch name {
	case "cl.throttle":
		for _, a := range args {
			if !utf8.Valid(a) {
				return msgCellBadUTF8
			}
		}
		c.kind = keyspace.KindGCRA
		c.gp, msg = throttleParams(args[1:])
		return msg
	case "cl.fixed", "cl.sliding", "cl.slidinglog":
		switch name {
		case "cl.fixed":
			c.kind = keyspace.KindFixed
		case "cl.sliding":
			c.kind = keyspace.KindSliding
		default:
			c.kind = keyspace.KindLog
		}
		n, ok := parseRedisInt(args[1])
		if !ok || limiter.CheckLimit(n) != nil {
			return msgLimit
		}
		if c.kind == keyspace.KindSliding && n > limiter.MaxSlidingLimit {
			return msgSlidingLimit
		}
		c.limit = n
		if c.per, ok = parsePeriod(args[2]); !ok {
			return msgPeriod
		}
		c.q = 1
		if len(args) > 3 {
			if c.q, ok = parseRedisInt(args[3]); !ok {
				return msgQuantity
			}
			if c.q < 0 && c.kind == keyspace.KindLog {
				return msgQuantityNeg
			}
		}
		return noErr
	case "cl.reserve":
		return c.parseReserve(args)
	case "cl.acquire":
		c.kind = keyspace.KindLeases
		n, ok := parseRedisInt(args[1])
		if !ok || limiter.CheckLimit(n) != nil {
			return msgLimit
		}
		if n > limiter.MaxLeases {
			return msgLeasesLimit
		}
		c.limit = n
		if c.per, ok = parsePeriod(args[2]); !ok {
			return msgLease
		}
		c.token = args[3]
		return noErr
	}
	return errUnknownCheck(name)
}

// decide evaluates c against the key's current value v (nil if absent) at
// now without changing anything. scratch is the client's Leases for
// unpacking (see leasesOf). It returns an error or noErr.
func (c *check) decide(v *keyspace.Value, now int64, scratch *limiter.Leases) wireErr {
	if v != nil && v.Kind != c.kind && !(c.kind == keyspace.KindGCRA && v.Kind == keyspace.KindString) {
		return msgWrongType
	}
	if msg := c.decideKind(limiterState(v, floorDiv(now, 1e6)), now, scratch); msg != noErr {
		return msg
	}
	if c.reserve && !c.t.limited {
		c.store = true // the reservation is written even when the state is not
		return reserveRoom(v, now)
	}
	return noErr
}

// decideKind is decide for v as the limiter sees it (limiterState).
func (c *check) decideKind(v *keyspace.Value, now int64, scratch *limiter.Leases) wireErr {
	switch c.kind {
	case keyspace.KindGCRA:
		tat, msg := storedTAT(v)
		if msg != noErr {
			return msg
		}
		r, err := gcra.Decide(now, tat, v != nil, c.gp)
		if err != nil {
			return msgCellZeroRate
		}
		c.gres = r
		c.store = r.Store
		c.expireErr = r.Store && r.TTLMillis < -1
		c.t = tuple{r.Limited, r.Limit, r.Remaining, r.RetryAfter, r.ResetAfter}
		if c.ms { // inside CL.ALL only: as CL.PEEK ... MS
			c.t.retry, c.t.resetA = r.RetryAfterMillis, r.ResetAfterMillis
		}
	case keyspace.KindFixed:
		next, d, store, exp := limiter.Fixed(fixedOf(v, c.per), v != nil, now, c.rule(), c.q)
		c.t, c.store = decisionTuple(d, c.ms), store
		c.next = fixedValue(next, c.per, exp)
	case keyspace.KindSliding:
		next, d, store, exp := limiter.Sliding(slidingOf(v, c.per), v != nil, now, c.rule(), c.q)
		c.t, c.store = decisionTuple(d, c.ms), store
		c.next = slidingValue(next, c.per, exp)
	case keyspace.KindLog:
		d := logOf(v).Decide(now, c.rule(), c.q)
		c.t, c.store = decisionTuple(d, c.ms), !d.Limited && (c.q > 0 || v != nil)
	case keyspace.KindLeases:
		d := leasesOf(v, scratch).Acquire(now, c.per, c.limit, c.token)
		c.t, c.store = decisionTuple(d, c.ms), !d.Limited
	}
	return noErr
}

// The fixed window's and the sliding counter's states in a Value: the
// window's start in ns and its counts (keyspace.Value's accessors); the
// limiter counts windows, the keyspace stores their starts.

// fixedOf returns the fixed-window state v (nil: absent) holds for
// windows of per ns; a state of another period is a window that never
// matches (the request starts afresh).
func fixedOf(v *keyspace.Value, per int64) limiter.FixedState {
	switch {
	case v == nil:
		return limiter.FixedState{}
	case v.WindowStart()%per != 0:
		return limiter.FixedState{Window: math.MinInt64}
	}
	return limiter.FixedState{Window: v.WindowStart() / per, Count: v.FixedCount()}
}

// slidingOf is fixedOf for the sliding counter.
func slidingOf(v *keyspace.Value, per int64) limiter.SlidingState {
	switch {
	case v == nil:
		return limiter.SlidingState{}
	case v.WindowStart()%per != 0:
		return limiter.SlidingState{Window: math.MinInt64}
	}
	prev, cur := v.SlidingCounts()
	return limiter.SlidingState{Window: v.WindowStart() / per, Prev: prev, Cur: cur}
}

// fixedValue is the Value that stores st for windows of per ns, kept
// until expireAt (ns).
func fixedValue(st limiter.FixedState, per, expireAt int64) keyspace.Value {
	v := keyspace.Value{Exp: expiryMS(expireAt)}
	v.SetFixed(st.Window*per, st.Count)
	return v
}

// slidingValue is fixedValue for the sliding counter.
func slidingValue(st limiter.SlidingState, per, expireAt int64) keyspace.Value {
	v := keyspace.Value{Exp: expiryMS(expireAt)}
	v.SetSliding(st.Window*per, st.Prev, st.Cur)
	return v
}

// needsRoom reports whether apply may take more memory than the key
// holds now (v, nil if absent): a new key, or a value that can grow (a
// log given units, a lease set given a lease). maxmemory's noeviction
// refuses such a change at the cap; the fixed-size kinds never grow.
func (c *check) needsRoom(v *keyspace.Value) bool {
	if !c.store {
		return false
	}
	switch {
	case v == nil, c.reserve:
		return true
	case c.kind == keyspace.KindLog:
		return c.q > 0
	case c.kind == keyspace.KindLeases:
		return true
	}
	return false
}

// apply performs what decide found on k, the check's key (its shard
// locked), whose current value is v (nil if absent).
func (c *check) apply(k *rkey, v *keyspace.Value, now int64, scratch *limiter.Leases) {
	if !c.store {
		return
	}
	var nv keyspace.Value
	switch c.kind {
	case keyspace.KindGCRA:
		nv = keyspace.Value{Kind: keyspace.KindGCRA, N: c.gres.NewTAT}
		if c.gres.TTLMillis >= 0 {
			nv.Exp = floorDiv(now, 1e6) + c.gres.TTLMillis
		}
	case keyspace.KindFixed, keyspace.KindSliding:
		nv = c.next
	case keyspace.KindLog:
		l := logOf(v)
		nv = keyspace.Value{Kind: keyspace.KindLog, Obj: l, Exp: expiryMS(l.Apply(now, c.rule(), c.q))}
	case keyspace.KindLeases:
		ls := leasesOf(v, scratch)
		nv = leasesValue(ls, scratch, ls.Apply(now, c.per, c.token))
	}
	if c.reserve {
		c.record(v, &nv, now)
	} else {
		keepReservations(v, &nv, now)
	}
	k.replace(v, nv)
}

// logOf returns the sliding log of v, a KindLog value, or a new empty one
// when the key does not exist (v nil).
func logOf(v *keyspace.Value) *limiter.Log {
	if v == nil {
		return new(limiter.Log)
	}
	return v.Obj.(*limiter.Log)
}

// leasesOf returns the leases of v, a KindLeases value (nil: the key does
// not exist). A value whose one lease is packed into N and M (see
// leasesValue) is unpacked into scratch, which is also what an absent key
// gets, empty: scratch is then only valid until its next use.
func leasesOf(v *keyspace.Value, scratch *limiter.Leases) *limiter.Leases {
	if v == nil {
		scratch.Unpack(0, 0)
		return scratch
	}
	if ls, ok := v.Obj.(*limiter.Leases); ok {
		return ls
	}
	scratch.Unpack(v.N, v.M)
	return scratch
}

// leasesValue returns the value that stores ls (from leasesOf), whose last
// lease ends at expireAt (ns). One lease with a token of up to
// limiter.PackedTokenLen bytes is packed into N and M, so the key takes no
// object: no allocation, and no memory read beyond its entry. Other leases
// keep a *limiter.Leases (a copy when ls is scratch).
func leasesValue(ls, scratch *limiter.Leases, expireAt int64) keyspace.Value {
	v := keyspace.Value{Kind: keyspace.KindLeases, Exp: expiryMS(expireAt)}
	if tok, exp, ok := ls.Pack(); ok {
		v.N, v.M = tok, exp
	} else if ls == scratch {
		v.Obj = ls.Clone()
	} else {
		v.Obj = ls
	}
	return v
}

// trailingMS strips a final MS argument (any case) and reports it.
func trailingMS(args [][]byte) ([][]byte, bool) {
	if n := len(args); n > 0 && eqFold(args[n-1], "ms") {
		return args[:n-1], true
	}
	return args, false
}

// runCheck is the body of CL.FIXED, CL.SLIDING, CL.SLIDINGLOG, CL.ACQUIRE:
// parse, lock the key's shard, decide, apply, reply.
func runCheck(x *ctx, minArgs, maxArgs int) {
	args, ms := trailingMS(x.args[1:])
	if len(args) < minArgs || len(args) > maxArgs {
		x.errorReply(errWrongArity(x.spec.Name))
		return
	}
	var c check
	if msg := c.parse(x.spec.Name, args); msg != noErr {
		x.errorReply(msg)
		return
	}
	c.ms = ms
	if _, ok := c.run(x); ok {
		x.decided(c.t.limited, c.key)
		x.tuple(c.t)
	}
}

// run decides c, a parsed single-key call, on its key (x.keys[0]) at the
// clock's reading, now, and applies it: the body of the single-key
// limiter commands. ok is false when it replied an error instead.
func (c *check) run(x *ctx) (now int64, ok bool) {
	k := &x.keys[0]
	now = x.clockNS()
	v := k.lookup(floorDiv(now, 1e6))
	if msg := c.decide(v, now, &x.cl.leases); msg != noErr {
		x.errorReply(msg)
		return now, false
	}
	if c.expireErr { // CL.THROTTLE's state (CL.RESERVE, CL.APPLY)
		x.errorReply(msgCellExpire)
		return now, false
	}
	if c.needsRoom(v) && !x.s.ks.CanInsert() {
		x.oom()
		return now, false
	}
	c.apply(k, v, now, &x.cl.leases)
	return now, true
}

func cmdFixed(x *ctx)      { runCheck(x, 3, 4) }
func cmdSliding(x *ctx)    { runCheck(x, 3, 4) }
func cmdSlidingLog(x *ctx) { runCheck(x, 3, 4) }

// CL.RELEASE key token
func cmdRelease(x *ctx) {
	k := &x.keys[0]
	now := x.clockNS()
	v := k.lookup(floorDiv(now, 1e6))
	if v == nil {
		x.int(0)
		return
	}
	if v.Kind != keyspace.KindLeases {
		x.errorReply(msgWrongType)
		return
	}
	ls := leasesOf(v, &x.cl.leases)
	released, exp := ls.Release(now, x.args[2])
	if ls.Held(now) == 0 {
		k.del(floorDiv(now, 1e6))
	} else {
		k.replace(v, leasesValue(ls, &x.cl.leases, exp))
	}
	x.s.serveLeaseQueue(k, now) // a waiter may take what was freed
	if released {
		x.int(1)
	} else {
		x.int(0)
	}
}

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

// CL.ALL check [check ...]: every check is a limiter command written out
// with its quantity, then an optional MS; all are decided under their
// shard locks (taken in shard order), and applied only if every one is
// admitted. A CL.THROTTLE check takes MS here too (its durations are then
// CL.PEEK ... MS's), though standalone CL.THROTTLE does not.
func cmdAll(x *ctx) {
	// The client's buffer holds up to four checks without allocating, and
	// without zeroing four checks on every call.
	checks, msg := parseChecks(x.cl.checks[:0], x.args[1:])
	if msg != noErr {
		x.errorReply(msg)
		return
	}
	// The dispatcher resolved the keys of the checks (allKeys) and holds
	// their shard locks: the checks parsed, so keys[i] is checks[i].key.
	admitted, limitedKey, ok := runAll(x, checks, x.keys)
	if !ok {
		return
	}
	x.decided(!admitted, limitedKey)
	x.array(len(checks))
	for i := range checks {
		checks[i].reply(x)
	}
}

// runAll decides checks on keys (keys[i] is checks[i].key, their shards
// locked) at one clock reading and applies them only if every one is
// admitted (a shadow check never blocks): CL.ALL's all-or-nothing, shared
// with CL.APPLY's hierarchies. It returns whether they were applied and
// the first refused key; ok is false when it replied an error instead.
func runAll(x *ctx, checks []check, keys []rkey) (admitted bool, limitedKey []byte, ok bool) {
	if len(keys) != len(checks) { // cannot happen: allKeys and parseChecks agree
		x.errorReply(msgInvalidArgs)
		return false, nil, false
	}
	var valBuf [4]*keyspace.Value
	vals := valBuf[:0]
	for range checks {
		vals = append(vals, nil)
	}
	now := x.clockNS()
	nowMS := floorDiv(now, 1e6)
	admitted = true
	for i := range checks {
		vals[i] = keys[i].lookup(nowMS)
		if msg := checks[i].decide(vals[i], now, &x.cl.leases); msg != noErr {
			x.errorReply(msg)
			return false, nil, false
		}
		if checks[i].t.limited && !checks[i].shadow && admitted {
			admitted = false
			limitedKey = checks[i].key
		}
		if checks[i].expireErr {
			x.errorReply(msgCellExpire)
			return false, nil, false
		}
	}
	if admitted {
		for i := range checks {
			if checks[i].needsRoom(vals[i]) && !x.s.ks.CanInsert() {
				x.oom()
				return false, nil, false
			}
		}
		for i := range checks {
			// Look the key up again: inserting an earlier check's new key
			// may have evicted this one (maxmemory), and its entry must
			// not be written behind the map's back. A single check's view
			// is still the shard's current one: nothing ran in between.
			v := vals[i]
			if len(checks) > 1 {
				v = keys[i].peek(nowMS)
			}
			checks[i].apply(&keys[i], v, now, &x.cl.leases)
		}
	}
	return admitted, limitedKey, true
}

// maxAllChecks is the most checks one CL.ALL takes (msgAllTooMany). A
// call at the cap takes about 1.7 ms (BenchmarkAllChecks/checks=1024),
// most of it with its shards locked.
const maxAllChecks = 1024

// fewChecks is the most checks whose keys are compared pairwise; more are
// sorted.
const fewChecks = 8

// parseChecks appends CL.ALL's arguments, split into checks, to checks.
// Keys must differ. The first problem in argument order is reported: a
// repeated key among the checks before a bad one comes first.
func parseChecks(checks []check, args [][]byte) ([]check, wireErr) {
	var lower [16]byte
	msg := noErr
	for i := 0; i < len(args); {
		if len(checks) == maxAllChecks {
			msg = msgAllTooMany
			break
		}
		name, n := checkName(lowerInto(lower[:0], args[i]))
		if n < 0 {
			if n = reserveArity(args[i+1:]); n == 0 {
				msg = msgReserveKindAll
				if i+2 >= len(args) {
					msg = errCheckArity(name)
				}
				break
			}
		}
		if n == 0 {
			msg = errUnknownCheck(string(args[i]))
			break
		}
		if i+1+n > len(args) {
			msg = errCheckArity(name)
			break
		}
		checks = append(checks, check{}) // parsed in place: a check is large
		c := &checks[len(checks)-1]
		if msg = c.parse(name, args[i+1:i+1+n]); msg != noErr {
			checks = checks[:len(checks)-1]
			break
		}
		i += 1 + n
		if i < len(args) && eqFold(args[i], "ms") {
			c.ms = true
			i++
		}
	}
	if hasDupKey(checks) {
		return nil, msgAllDupKey
	}
	if msg != noErr {
		return nil, msg
	}
	return checks, noErr
}

// hasDupKey reports whether two checks have the same key: pairwise for a
// few checks (no allocation), by sorting for more.
func hasDupKey(checks []check) bool {
	if len(checks) <= fewChecks {
		for i := 1; i < len(checks); i++ {
			for j := range i {
				if string(checks[j].key) == string(checks[i].key) {
					return true
				}
			}
		}
		return false
	}
	return dupSorted(len(checks), func(i int) []byte { return checks[i].key }, bytes.Compare)
}

// dupSorted reports whether two of n keys (key(i) is the i-th) are equal,
// with O(n log n) calls of compare: it sorts their indexes by compare and
// compares neighbours.
func dupSorted(n int, key func(int) []byte, compare func(a, b []byte) int) bool {
	idx := make([]int32, n)
	for i := range idx {
		idx[i] = int32(i)
	}
	slices.SortFunc(idx, func(a, b int32) int { return compare(key(int(a)), key(int(b))) })
	for i := 1; i < n; i++ {
		if compare(key(int(idx[i-1])), key(int(idx[i]))) == 0 {
			return true
		}
	}
	return false
}

// checkNames lists the limiter commands that CL.ALL takes as checks.
var checkNames = []string{"cl.throttle", "cl.fixed", "cl.sliding", "cl.slidinglog", "cl.acquire", "cl.reserve"}

// checkName returns the interned name of a limiter command (lower-case)
// and how many arguments follow it inside CL.ALL (quantity explicit, MS
// not counted; -1 for CL.RESERVE, whose count depends on its kind: see
// reserveArity), without allocating; for any other b, string(b) and 0.
func checkName(b []byte) (string, int) {
	switch string(b) { // a switch on string(b) does not allocate
	case "cl.throttle":
		return "cl.throttle", 5
	case "cl.fixed":
		return "cl.fixed", 4
	case "cl.sliding":
		return "cl.sliding", 4
	case "cl.slidinglog":
		return "cl.slidinglog", 4
	case "cl.acquire":
		return "cl.acquire", 4
	case "cl.reserve":
		return "cl.reserve", -1
	}
	return string(b), 0
}

// allKeys appends the positions of CL.ALL's keys to dst, for the
// dispatcher, COMMAND GETKEYS and cluster routing (none if the call does
// not parse), without allocating beyond growing dst.
func allKeys(dst []int, args [][]byte) []int {
	start := len(dst)
	var lower [16]byte
	for i := 1; i < len(args); {
		_, n := checkName(lowerInto(lower[:0], args[i]))
		if n < 0 {
			n = reserveArity(args[i+1:])
		}
		if n == 0 || i+1+n > len(args) {
			return dst[:start]
		}
		dst = append(dst, i+1)
		i += 1 + n
		if i < len(args) && eqFold(args[i], "ms") {
			i++
		}
	}
	return dst
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
		toks := leasesOf(v, &x.cl.leases).Tokens(now)
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
