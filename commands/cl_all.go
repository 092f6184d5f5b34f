package commands

import (
	"bytes"
	"slices"

	"github.com/cellserver/cellserver/keyspace"
)

// CL.ALL check [check ...]: every check is a limiter command written out
// with its quantity, then an optional MS; all are decided under their
// shard locks (taken in shard order), and applied only if every one is
// admitted. A CL.THROTTLE check takes MS here too (its durations are then
// CL.PEEK ... MS's), though standalone CL.THROTTLE does not.
func cmdAll(x *ctx) {
	// The client's buffer holds up to four checks without allocating, and
	// without zeroing four checks on every call.
	checks, msg := parseChecks(x.cl.scratch.checks[:0], x.args[1:])
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
		if msg := checks[i].decide(vals[i], now, &x.cl.scratch.leases); msg != noErr {
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
			checks[i].apply(&keys[i], v, now, &x.cl.scratch.leases)
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
