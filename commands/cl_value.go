package commands

import (
	"math"
	"time"
	"unicode/utf8"

	"github.com/cellserver/cellserver/gcra"
	"github.com/cellserver/cellserver/keyspace"
	"github.com/cellserver/cellserver/limiter"
	"github.com/cellserver/cellserver/policy"
	"github.com/tidwall/redcon"
)

// What the limiter commands (cl_*.go) share: the reply tuple and its
// units, the argument parsers, check (one parsed limiter call: parse,
// decide, apply; standalone, in CL.ALL, CL.RESERVE and CL.APPLY), each
// kind's state in a keyspace.Value, the reservations a key carries across
// calls (limiterState, keepReservations), and the prologue of the
// single-key commands (limiterKey, gcraKey).
//
// Every limiter reply has CL.THROTTLE's shape [limited, limit, remaining,
// retry_after, reset_after]; durations are whole seconds rounded up, or
// milliseconds rounded up with a trailing MS argument (CL.PEEK keeps
// redis-cell's rounding, since it must answer exactly what CL.THROTTLE ...
// 0 would).

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
	ns, ok := parseSpan(b)
	return ns, ok && ns > 0
}

// parseSpan accepts 0, an integer number of seconds or a Go duration with
// a unit (250ms, 1.5s, 10m), at most limiter.MaxPeriod, and returns ns
// (CL.PACE's MAXWAIT; parsePeriod without 0).
func parseSpan(b []byte) (int64, bool) {
	if n, ok := parseRustI64(b); ok {
		if n < 0 || n > int64(limiter.MaxPeriod/time.Second) {
			return 0, false
		}
		return n * int64(time.Second), true
	}
	d, err := time.ParseDuration(string(b))
	if err != nil || d < 0 || d > limiter.MaxPeriod {
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
	// audit: the policy whose audit entry run prepares (auditPrepare)
	// between the decision and its storing; nil: none.
	audit *policy.Policy

	// CL.RESERVE: the reservation's ttl in ns, and its id once apply
	// recorded it (-1 until then).
	reserve bool
	ttl     int64
	id      int64

	// Set by decide, used by apply.
	t         tuple
	retryMS   int64 // the retry in ms whatever c.ms (-1: allowed), for an audit entry
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
		c.retryMS = r.RetryAfterMillis
		if c.ms { // inside CL.ALL only: as CL.PEEK ... MS
			c.t.retry, c.t.resetA = r.RetryAfterMillis, r.ResetAfterMillis
		}
	case keyspace.KindFixed:
		next, d, store, exp := limiter.Fixed(fixedOf(v, c.per), v != nil, now, c.rule(), c.q)
		c.t, c.store, c.retryMS = decisionTuple(d, c.ms), store, units(d.RetryAfter, true)
		c.next = fixedValue(next, c.per, exp)
	case keyspace.KindSliding:
		next, d, store, exp := limiter.Sliding(slidingOf(v, c.per), v != nil, now, c.rule(), c.q)
		c.t, c.store, c.retryMS = decisionTuple(d, c.ms), store, units(d.RetryAfter, true)
		c.next = slidingValue(next, c.per, exp)
	case keyspace.KindLog:
		d := logOf(v).Decide(now, c.rule(), c.q)
		c.t, c.store, c.retryMS = decisionTuple(d, c.ms), !d.Limited && (c.q > 0 || v != nil), units(d.RetryAfter, true)
	case keyspace.KindLeases:
		d := leasesOf(v, scratch).Acquire(now, c.per, c.limit, c.token)
		c.t, c.store, c.retryMS = decisionTuple(d, c.ms), !d.Limited, units(d.RetryAfter, true)
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

// run decides c, a parsed single-key call, on its key (x.keys[0]) at the
// clock's reading, now, and applies it: the body of the single-key
// limiter commands. ok is false when it replied an error instead.
func (c *check) run(x *ctx) (now int64, ok bool) {
	lk := x.limiterKey()
	k, v := lk.k, lk.v
	now = lk.now
	if msg := c.decide(v, now, &x.cl.scratch.leases); msg != noErr {
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
	if c.audit != nil && c.audit.Audit.Audits(c.t.limited) && !x.auditPrepare(c.audit, c.t.limited) {
		return now, false // to be run again (runLocked): no decision stored, nothing replied
	}
	c.apply(k, v, now, &x.cl.scratch.leases)
	return now, true
}

// limiterKey is the prologue of the single-key limiter commands: their
// key (x.keys[0], its shard locked), the command's clock reading in ns
// and in ms, and the key's value then (nil if absent).
type limiterKey struct {
	k          *rkey
	now, nowMS int64
	v          *keyspace.Value
}

// limiterKey reads the clock and looks the command's key up.
func (x *ctx) limiterKey() limiterKey {
	k := &x.keys[0]
	now := x.clockNS()
	nowMS := floorDiv(now, 1e6)
	return limiterKey{k: k, now: now, nowMS: nowMS, v: k.lookup(nowMS)}
}

// gcraKey is limiterKey for the commands on CL.THROTTLE's state
// (CL.THROTTLE, CL.PACE), with the TAT it holds and whether the state
// exists: the limiter sees v unless only its reservations live
// (limiterState). ok is false when it replied an error instead (the key
// holds another kind, or a string that is not a TAT).
func (x *ctx) gcraKey() (lk limiterKey, tat uint64, exists, ok bool) {
	lk = x.limiterKey()
	sv := limiterState(lk.v, lk.nowMS)
	tat, msg := storedTAT(sv)
	if msg != noErr {
		x.errorReply(msg)
		return lk, 0, false, false
	}
	return lk, tat, sv != nil, true
}

// storeGCRA stores the TAT tat at lk's key, which expires at exp (ms
// since the Unix epoch; 0: never), carrying its reservations over. It
// returns false when it replied OOM instead: a new key past maxmemory.
func (x *ctx) storeGCRA(lk *limiterKey, tat uint64, exp int64) bool {
	if lk.v == nil && !x.s.ks.CanInsert() {
		x.oom()
		return false
	}
	nv := keyspace.Value{Kind: keyspace.KindGCRA, N: tat, Exp: exp}
	keepReservations(lk.v, &nv, lk.now)
	lk.k.replace(lk.v, nv)
	return true
}

// storedTAT reads the TAT of a CL.THROTTLE key (0 when v is nil): a GCRA
// value, or a string holding a u64 as redis-cell reads it. Anything else
// gets an error text.
func storedTAT(v *keyspace.Value) (uint64, wireErr) {
	if v == nil {
		return 0, noErr
	}
	switch v.Kind {
	case keyspace.KindGCRA:
		return v.N, noErr
	case keyspace.KindString:
		n, ok := parseRustU64(v.Obj.([]byte))
		if !ok {
			return 0, msgCellBadStored
		}
		return n, noErr
	}
	return 0, msgWrongType
}

// gcraParams is throttleParams; with durations (CL.PEEK) the period may
// also be a Go duration such as 250ms (Params.PeriodNS), and a bad one is
// reported as a bad integer, as redis-cell reports its argument.
func gcraParams(nums [][]byte, durations bool) (gcra.Params, wireErr) {
	var v [4]int64
	v[3] = 1
	var periodNS int64
	for i, a := range nums {
		n, ok := parseRustI64(a)
		if !ok && i == 2 && durations {
			if d, err := time.ParseDuration(string(a)); err == nil && d > 0 {
				periodNS, ok = int64(d), true
			}
		}
		if !ok {
			return gcra.Params{}, errCellParseInt(a)
		}
		v[i] = n
	}
	p := gcra.Params{MaxBurst: v[0], Count: v[1], Period: v[2], PeriodNS: periodNS, Quantity: v[3]}
	if p.EmissionIntervalNS() == 0 {
		return p, msgCellZeroRate // checked before the key is looked at
	}
	return p, noErr
}

// reservationsOf returns the reservations v holds (nil: none, or v nil).
func reservationsOf(v *keyspace.Value) *limiter.Reservations {
	if v == nil {
		return nil
	}
	switch o := v.Obj.(type) {
	case *limiter.Reservations:
		return o
	case *limiter.Log:
		return o.Res
	}
	return nil
}

// limiterState returns v as its limiter sees it: nil when v holds
// reservations and its scalar limiter state ended (Reservations.StateExp
// before nowMS), the key living on for the reservations only. A sliding
// log's entries age out by themselves.
func limiterState(v *keyspace.Value, nowMS int64) *keyspace.Value {
	if res := reservationsOf(v); res != nil && v.Kind != keyspace.KindLog && res.StateExp != 0 && nowMS > res.StateExp {
		return nil
	}
	return v
}

// keepReservations carries the reservations of v, the key's value before
// a limiter command, into nv, the value it stores (see
// attachReservations); the ended ones are dropped.
func keepReservations(v, nv *keyspace.Value, now int64) {
	if res := reservationsOf(v); res != nil {
		res.Tidy(now)
		attachReservations(nv, res)
	}
}

// attachReservations makes nv, a limiter state whose Exp is its own
// expiry, hold res: the state's expiry becomes res.StateExp and the key's
// the later of it and the last deadline. An empty res is dropped.
func attachReservations(nv *keyspace.Value, res *limiter.Reservations) {
	if len(res.List) == 0 {
		res = nil
	} else {
		res.StateExp = nv.Exp
		nv.Exp = res.Expiry()
	}
	if nv.Kind == keyspace.KindLog {
		nv.Obj.(*limiter.Log).Res = res
	} else if res != nil {
		nv.Obj = res
	} else {
		nv.Obj = nil
	}
}

// reply writes c's reply: its tuple, and for a reservation a sixth
// integer, the reservation's id (-1 when nothing was reserved).
func (c *check) reply(x *ctx) {
	if !c.reserve {
		x.tuple(c.t)
		return
	}
	x.c.Out = appendTupleIn(x.c.Out, 6, c.t)
	x.int(c.id)
}
