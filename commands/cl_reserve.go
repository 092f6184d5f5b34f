package commands

import (
	"errors"
	"math"

	"github.com/cellserver/cellserver/gcra"
	"github.com/cellserver/cellserver/keyspace"
	"github.com/cellserver/cellserver/limiter"
)

// Reservations (CL.RESERVE, CL.SETTLE, CL.CANCEL): units admitted before
// their real cost is known. A reservation is decided and counted exactly
// as the plain limiter command with its quantity; when admitted it is
// recorded in the key (limiter.Reservations: in Value.Obj for the scalar
// kinds, in the limiter.Log for the sliding log) and its id returned.
// Settling applies actual - reserved to the limiter's state (see
// limiter's reserve.go for what each kind does with it); cancelling is
// settling with 0. The key lives until the later of its limiter state's
// own expiry and its last reservation's deadline; past the former, the
// state counts as absent (limiterState).

// reserveKinds maps CL.RESERVE's kind word (lower-case) to the limiter
// command whose arguments follow, and how many (quantity included).
func reserveKind(b []byte) (name string, n int) {
	var lower [16]byte
	switch string(lowerInto(lower[:0], b)) {
	case "throttle":
		return "cl.throttle", 4
	case "fixed":
		return "cl.fixed", 3
	case "sliding":
		return "cl.sliding", 3
	case "slidinglog":
		return "cl.slidinglog", 3
	}
	return "", 0
}

// reserveArity returns how many arguments follow CL.RESERVE (key, kind,
// the kind's arguments, ttl) given the arguments after it (at least the
// key and the kind), or 0 for an unknown kind.
func reserveArity(args [][]byte) int {
	if len(args) < 2 {
		return 0
	}
	_, n := reserveKind(args[1])
	if n == 0 {
		return 0
	}
	return 2 + n + 1
}

// parseReserve sets c, which must be zero, to CL.RESERVE key kind
// args... ttl (args: from the key on, MS removed). It returns an error
// or noErr.
func (c *check) parseReserve(args [][]byte) wireErr {
	name, n := reserveKind(args[1])
	if n == 0 {
		return msgReserveKind
	}
	if len(args) != 2+n+1 {
		return errWrongArity("cl.reserve")
	}
	var buf [5][]byte
	sub := append(buf[:0], args[0])
	sub = append(sub, args[2:2+n]...)
	if msg := c.parse(name, sub); msg != noErr {
		return msg
	}
	q := c.q
	if c.kind == keyspace.KindGCRA {
		q = c.gp.Quantity
	}
	if q < 0 {
		return msgReserveQuantity
	}
	ttl, ok := parsePeriod(args[len(args)-1])
	if !ok {
		return msgReserveTTL
	}
	c.reserve, c.ttl, c.id = true, ttl, -1
	return noErr
}

// record adds c's reservation to the key's reservations (those of v, or
// new ones) and makes nv hold them: c was admitted, nv is its new state.
func (c *check) record(v, nv *keyspace.Value, now int64) {
	res := reservationsOf(v)
	if res == nil {
		res = new(limiter.Reservations)
	}
	res.Tidy(now)
	at, unit, q := now, c.per, c.q
	switch c.kind {
	case keyspace.KindGCRA:
		unit, q = gcra.EmissionInterval(c.gp.Count, c.gp.Period), c.gp.Quantity
	case keyspace.KindFixed, keyspace.KindSliding:
		at = max(now, nv.WindowStart()) // the window counted in, if the clock went back
	case keyspace.KindLog:
		if l := nv.Obj.(*limiter.Log); q > 0 && len(l.Entries) > 0 {
			at = l.Entries[len(l.Entries)-1].T // the entry holding the units
		}
	}
	id, err := res.Add(now, at, now+c.ttl, q, unit)
	if err != nil { // decide checked the room: cannot happen
		id = -1
	}
	c.id = id
	attachReservations(nv, res)
}

// reserveRoom returns an error text when a reservation admitted on v
// could not be recorded (the key holds limiter.MaxReservations, all open).
func reserveRoom(v *keyspace.Value, now int64) wireErr {
	if res := reservationsOf(v); res != nil && !res.CanAdd(now) {
		return msgTooManyReservations
	}
	return noErr
}

// CL.RESERVE key THROTTLE|FIXED|SLIDING|SLIDINGLOG <the command's
// arguments, quantity included> ttl [MS]
func cmdReserve(x *ctx) {
	args, ms := trailingMS(x.args[1:])
	if len(args) < 2 {
		x.errorReply(errWrongArity(x.spec.Name))
		return
	}
	var c check
	if msg := c.parseReserve(args); msg != noErr {
		x.errorReply(msg)
		return
	}
	c.ms = ms
	if _, ok := c.run(x); ok {
		x.decided(c.t.limited, c.key)
		c.reply(x)
	}
}

// CL.SETTLE key id actual
func cmdSettle(x *ctx) {
	actual, ok := parseRedisInt(x.args[3])
	if !ok || actual < 0 {
		x.errorReply(msgSettleActual)
		return
	}
	settle(x, actual)
}

// CL.CANCEL key id: CL.SETTLE key id 0.
func cmdCancel(x *ctx) { settle(x, 0) }

// settle settles the reservation x.args[2] of the key with actual units
// and replies [reserved, actual, reserved - actual].
func settle(x *ctx, actual int64) {
	id, ok := parseRedisInt(x.args[2])
	if !ok || id < 1 {
		x.errorReply(msgReservationID)
		return
	}
	lk := x.limiterKey()
	k, now, v := lk.k, lk.now, lk.v
	if v != nil {
		switch v.Kind {
		case keyspace.KindGCRA, keyspace.KindFixed, keyspace.KindSliding, keyspace.KindLog:
		default:
			x.errorReply(msgWrongType)
			return
		}
	}
	res := reservationsOf(v)
	if res == nil {
		x.errorReply(msgNoReservation)
		return
	}
	if p := res.Find(now, id); p != nil && p.Actual < 0 && actual > p.Reserved &&
		v.Kind == keyspace.KindLog && !x.s.ks.CanInsert() {
		x.oom() // a log grows by the units taken
		return
	}
	r, delta, apply, err := res.Settle(now, id, actual)
	switch {
	case errors.Is(err, limiter.ErrSettled):
		x.errorReply(errSettled(r.Actual))
		return
	case err != nil:
		x.errorReply(msgNoReservation)
		return
	}
	if apply {
		nv := settled(v, limiterState(v, lk.nowMS), res, r, delta, now)
		res.Tidy(now)
		attachReservations(&nv, res)
		k.replace(v, nv)
	}
	x.array(3)
	x.int(r.Reserved)
	x.int(actual)
	x.int(r.Reserved - actual)
}

// settled returns the key's limiter state after delta units of
// reservation r settle, its Exp the state's own expiry. v is the key's
// value, state the limiter's view of it (limiterState), res v's
// reservations.
func settled(v, state *keyspace.Value, res *limiter.Reservations, r limiter.Reservation, delta, now int64) keyspace.Value {
	keep := keyspace.Value{Kind: v.Kind, N: v.N, M: v.M, Exp: res.StateExp}
	rule := limiter.Rule{Period: r.Unit} // a settle reads only the period
	switch v.Kind {
	case keyspace.KindGCRA:
		var tat uint64
		if state != nil {
			tat = state.N
		}
		newTAT, ttl := gcra.Settle(now, tat, state != nil, r.Unit, delta)
		exp := int64(math.MaxInt64)
		if nowMS := floorDiv(now, 1e6); ttl < math.MaxInt64-nowMS {
			exp = nowMS + ttl
		}
		return keyspace.Value{Kind: keyspace.KindGCRA, N: newTAT, Exp: exp}
	case keyspace.KindFixed:
		next, store, exp := limiter.FixedSettle(fixedOf(state, r.Unit), state != nil, now, rule, r.At, delta)
		if !store {
			return keep
		}
		return fixedValue(next, r.Unit, exp)
	case keyspace.KindSliding:
		next, store, exp := limiter.SlidingSettle(slidingOf(state, r.Unit), state != nil, now, rule, r.At, delta)
		if !store {
			return keep
		}
		return slidingValue(next, r.Unit, exp)
	}
	l := v.Obj.(*limiter.Log)
	return keyspace.Value{Kind: keyspace.KindLog, Obj: l, Exp: expiryMS(l.Settle(now, rule, r.At, delta))}
}
