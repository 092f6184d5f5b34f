package durability

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
)

// A key's class says which commands touch it, and how its state is read
// back: limiter keys with CL.INFO, string keys with GET and PTTL.
type class int

const (
	cGCRA class = iota
	cFixed
	cSliding
	cLog
	cLeases
	cString
	nClasses
)

var classNames = [...]string{"gcra", "fixed", "sliding", "slidinglog", "leases", "string"}

func (c class) String() string { return classNames[c] }

// expSlackMS widens the interval an absolute expiry is known to lie in
// (see state.expLo) for PTTL's rounding to whole milliseconds. Different
// expiries written by the test differ by 5 s at least.
const expSlackMS = 2

// state is a key's state as read back. Only the fields that are the state
// are compared: CL.INFO's ttl_ms and tat_in_ms move with the clock and are
// left out; a string's expiry is part of its state (EXPIRE changes only
// that), compared within expTolMS.
type state struct {
	absent bool
	kind   string
	desc   string           // the compared fields, canonical
	f      map[string]int64 // CL.INFO's integer fields
	tokens []string         // CL.INFO's lease tokens, sorted
	val    string           // a string key's value
	// The absolute expiry, ms by the client's clock, or -1 for none: the
	// server computed the TTL between the request's send (expLo = send +
	// TTL) and its reply's arrival (exp = arrival + TTL), so the expiry
	// lies in [expLo, exp].
	exp, expLo int64
}

func (s state) String() string {
	if s.absent {
		return "(absent)"
	}
	if s.kind == "string" && s.exp >= 0 {
		return fmt.Sprintf("%s exp=[%d,%d]", s.desc, s.expLo, s.exp)
	}
	return s.desc
}

func sameState(a, b state) bool {
	if a.absent || b.absent {
		return a.absent == b.absent
	}
	if a.desc != b.desc {
		return false
	}
	if a.kind == "string" {
		if (a.exp < 0) != (b.exp < 0) {
			return false
		}
		// The two intervals must overlap.
		if a.exp >= 0 && (a.expLo-expSlackMS > b.exp || b.expLo-expSlackMS > a.exp) {
			return false
		}
	}
	return true
}

// matches reports whether got can be the state want, read at nowMS: the
// same, or absent if want may have expired by then.
func matches(want, got state, nowMS int64) bool {
	if sameState(want, got) {
		return true
	}
	return got.absent && !want.absent && want.expLo >= 0 && want.expLo-expSlackMS <= nowMS
}

// readCmds queues the read-back of key in pipe.
func readCmds(ctx context.Context, pipe redis.Pipeliner, key string, c class) []*redis.Cmd {
	if c == cString {
		return []*redis.Cmd{pipe.Do(ctx, "GET", key), pipe.Do(ctx, "PTTL", key)}
	}
	return []*redis.Cmd{pipe.Do(ctx, "CL.INFO", key)}
}

// isNetErr reports whether err is a failure to talk to the server (not a
// reply, not an error reply).
func isNetErr(err error) bool {
	if err == nil || errors.Is(err, redis.Nil) {
		return false
	}
	var re redis.Error
	return !errors.As(err, &re)
}

// parseState decodes the read-back replies of a key, sent at sendMS and
// answered by ackMS.
func parseState(c class, cmds []*redis.Cmd, sendMS, ackMS int64) (state, error) {
	for _, cmd := range cmds {
		if err := cmd.Err(); err != nil && !errors.Is(err, redis.Nil) {
			return state{}, fmt.Errorf("%v: %w", cmd.Args(), err)
		}
	}
	if c == cString {
		if errors.Is(cmds[0].Err(), redis.Nil) {
			return state{absent: true}, nil
		}
		v, err := cmds[0].Text()
		if err != nil {
			return state{}, fmt.Errorf("GET: %w", err)
		}
		pttl, err := cmds[1].Int64()
		if err != nil {
			return state{}, fmt.Errorf("PTTL: %w", err)
		}
		st := state{kind: "string", val: v, desc: "string val=" + v, exp: -1, expLo: -1}
		switch {
		case pttl >= 0:
			st.exp, st.expLo = ackMS+pttl, sendMS+pttl
		case pttl == -1:
		default:
			return state{}, fmt.Errorf("GET %q then PTTL %d", v, pttl)
		}
		return st, nil
	}
	if errors.Is(cmds[0].Err(), redis.Nil) {
		return state{absent: true}, nil
	}
	arr, err := cmds[0].Slice()
	if err != nil {
		return state{}, fmt.Errorf("CL.INFO: %w", err)
	}
	if len(arr)%2 != 0 || len(arr) < 4 {
		return state{}, fmt.Errorf("CL.INFO: odd or short reply %v", arr)
	}
	st := state{f: map[string]int64{}, exp: -1, expLo: -1}
	var parts []string
	for i := 0; i < len(arr); i += 2 {
		name, ok := arr[i].(string)
		if !ok {
			return state{}, fmt.Errorf("CL.INFO: field name %v", arr[i])
		}
		val := arr[i+1]
		if s, ok := val.(string); ok && name == "tat_ns" {
			// A bulk string of digits, so JavaScript clients read it exactly.
			n, err := strconv.ParseInt(s, 10, 64)
			if err != nil {
				return state{}, fmt.Errorf("CL.INFO: tat_ns %q: %w", s, err)
			}
			val = n
		}
		switch v := val.(type) {
		case string:
			if name != "kind" {
				return state{}, fmt.Errorf("CL.INFO: field %s = %q", name, v)
			}
			st.kind = v
		case int64:
			st.f[name] = v
			switch name {
			case "ttl_ms":
				if v >= 0 {
					st.exp, st.expLo = ackMS+v, sendMS+v
				}
				continue
			case "tat_in_ms":
				continue
			}
			parts = append(parts, fmt.Sprintf("%s=%d", name, v))
		case []any:
			if name != "tokens" {
				return state{}, fmt.Errorf("CL.INFO: field %s = %v", name, v)
			}
			for _, x := range v {
				s, ok := x.(string)
				if !ok {
					return state{}, fmt.Errorf("CL.INFO: token %v", x)
				}
				st.tokens = append(st.tokens, s)
			}
			sort.Strings(st.tokens)
			parts = append(parts, "tokens=["+strings.Join(st.tokens, ",")+"]")
		default:
			return state{}, fmt.Errorf("CL.INFO: field %s has %T", name, v)
		}
	}
	want := map[class]string{cGCRA: "gcra", cFixed: "fixed", cSliding: "sliding", cLog: "slidinglog", cLeases: "concurrency"}[c]
	if st.kind != want {
		return state{}, fmt.Errorf("CL.INFO: kind %q, want %q (%v)", st.kind, want, arr)
	}
	sort.Strings(parts)
	st.desc = st.kind + " " + strings.Join(parts, " ")
	return st, nil
}

// op is one write. next reports whether got can be the key's state right
// after op was applied to prev (for a write whose effect was not read
// back): it is a property of the command, not a prediction of server time.
type op struct {
	args []any
	next func(prev, got state) bool
}

func (o op) String() string { return fmt.Sprint(o.args...) }

func kindIs(got state, kind string) bool { return !got.absent && got.kind == kind }

// genOp picks a write for key of class c. n numbers the key's writes, so
// that expiries and values written are all different.
func genOp(rng *rand.Rand, key string, c class, n int64, tag string) op {
	del := op{args: []any{"DEL", key}, next: func(_, got state) bool { return got.absent }}
	r := rng.IntN(100)
	switch c {
	case cGCRA:
		if r < 8 {
			return del
		}
		// Interval 1 h, burst 100000: never limited, TTL >= 1 h, and every
		// call moves the TAT forward.
		if r < 20 { // a reservation of one unit, held for 1000 h
			return op{args: []any{"CL.RESERVE", key, "THROTTLE", 100000, 1, 3600, 1, "1000h"}, next: func(prev, got state) bool {
				return kindIs(got, "gcra") && (prev.absent || got.f["tat_ns"] > prev.f["tat_ns"]) &&
					got.f["reservations"] == prev.f["reservations"]+1 && got.f["reservations_open"] == prev.f["reservations_open"]+1
			}}
		}
		return op{args: []any{"CL.THROTTLE", key, 100000, 1, 3600}, next: func(prev, got state) bool {
			return kindIs(got, "gcra") && (prev.absent || got.f["tat_ns"] > prev.f["tat_ns"]) &&
				got.f["reservations"] == prev.f["reservations"]
		}}
	case cFixed:
		if r < 8 {
			return del
		}
		args := []any{"CL.FIXED", key, 1000000, "1000h", 1}
		reserve := r < 20 // a reservation of one unit, held for 1000 h
		if reserve {
			args = []any{"CL.RESERVE", key, "FIXED", 1000000, "1000h", 1, "1000h"}
		}
		return op{args: args, next: func(prev, got state) bool {
			if !kindIs(got, "fixed") {
				return false
			}
			if want := prev.f["reservations"]; reserve && got.f["reservations"] != want+1 || !reserve && got.f["reservations"] != want {
				return false
			}
			if prev.absent || got.f["window_start_ms"] > prev.f["window_start_ms"] {
				return got.f["count"] == 1
			}
			return got.f["window_start_ms"] == prev.f["window_start_ms"] && got.f["count"] == prev.f["count"]+1
		}}
	case cSliding:
		if r < 8 {
			return del
		}
		return op{args: []any{"CL.SLIDING", key, 1000000, "1000h", 1}, next: func(prev, got state) bool {
			if !kindIs(got, "sliding") {
				return false
			}
			if prev.absent || got.f["window_start_ms"] > prev.f["window_start_ms"] {
				return got.f["current"] == 1
			}
			return got.f["window_start_ms"] == prev.f["window_start_ms"] &&
				got.f["current"] == prev.f["current"]+1 && got.f["previous"] == prev.f["previous"]
		}}
	case cLog:
		if r < 8 {
			return del
		}
		return op{args: []any{"CL.SLIDINGLOG", key, 1000000, "1h", 1}, next: func(prev, got state) bool {
			var units int64
			if !prev.absent {
				units = prev.f["units"]
			}
			return kindIs(got, "slidinglog") && got.f["units"] == units+1
		}}
	case cLeases:
		tok := fmt.Sprintf("t%d", rng.IntN(5))
		switch {
		case r < 8:
			return del
		case r < 55:
			// Limit 3 of 5 tokens: some acquisitions are refused (no change).
			return op{args: []any{"CL.ACQUIRE", key, 3, "1h", tok}, next: func(prev, got state) bool {
				want := append([]string(nil), prev.tokens...)
				if !slices.Contains(want, tok) {
					want = append(want, tok)
				}
				sort.Strings(want)
				return kindIs(got, "concurrency") && slices.Equal(got.tokens, want)
			}}
		default:
			return op{args: []any{"CL.RELEASE", key, tok}, next: func(prev, got state) bool {
				want := slices.DeleteFunc(append([]string(nil), prev.tokens...), func(s string) bool { return s == tok })
				if len(want) == 0 {
					return got.absent
				}
				return kindIs(got, "concurrency") && slices.Equal(got.tokens, want)
			}}
		}
	default: // cString
		val := fmt.Sprintf("v-%s-%d", tag, n)
		switch {
		case r < 8:
			return del
		case r < 45:
			return op{args: []any{"SET", key, val}, next: func(_, got state) bool {
				return kindIs(got, "string") && got.val == val && got.exp < 0
			}}
		case r < 65:
			return op{args: []any{"SET", key, val, "EX", 20000 + 5*n}, next: func(_, got state) bool {
				return kindIs(got, "string") && got.val == val && got.exp >= 0
			}}
		default:
			// EXPIRE of an absent key does nothing (the previous state).
			return op{args: []any{"EXPIRE", key, 10000 + 5*n}, next: func(prev, got state) bool {
				return kindIs(got, "string") && !prev.absent && got.val == prev.val && got.exp >= 0
			}}
		}
	}
}
