// Package client is a typed API for cellserver's limiter commands over any
// go-redis v9 [redis.UniversalClient]: one node, a Sentinel-managed primary
// or a cluster.
//
// # Model
//
// Each method sends one command and decodes its reply into a [Result]:
// whether the request was allowed, the limit, what remains, and two
// durations (how long until a retry can succeed, how long until the key is
// back to its full allowance). Rates are a count per period ([Rate]);
// periods, leases and replies are [time.Duration]s. Commands that take the
// MS option are sent with it, so their durations are exact to the
// millisecond (rounded up). Standalone CL.THROTTLE has no MS option (it
// answers as redis-cell does): [Client.Throttle]'s durations are whole
// seconds, rounded up. A CL.THROTTLE check inside CL.ALL takes MS, so
// [Batch.Throttle]'s are exact to the millisecond.
//
// [Client.All] builds a CL.ALL call: several checks decided atomically,
// all or nothing. [Client.ReserveThrottle] and its siblings send
// CL.RESERVE: units admitted before their cost is known, settled later
// ([Reservation.Settle], [Reservation.Cancel]).
//
// # Errors
//
// An error the server sends (a bad argument, WRONGTYPE, OOM, ...) is
// returned as an [*Error] carrying the reply's code word and message;
// test for it with [errors.As]. Any other error (dial, I/O, timeout,
// context, [redis.ErrClosed]) is go-redis's, returned unchanged: the
// server did not answer. [IsServerError] tells the two apart.
//
// # Cost
//
// A call allocates nothing of its own beyond what go-redis allocates for
// the same command sent with rdb.Do and run-time values. On loopback
// against an in-process cellserver (go test -run '^$' -bench Throttle
// -count 5 ./tests/client/ in the repository's root, 2 CPUs), Throttle
// takes about 11.6 µs, 392 B and 9 allocations per call, exactly the
// bytes and allocations of rdb.Do with the same arguments as variables
// (raw-vars, about 11.4 µs); with constant arguments rdb.Do takes 368 B
// and 7 allocations (raw-const), the 2 saved being the boxing of the key
// and of an integer >= 256 into go-redis's args ...any, which no caller
// with a run-time key avoids. The time is the round trip. A period that
// is not a whole number of seconds is sent as a duration string (one more
// small allocation); a CL.ALL Batch, its results slice and an Info
// allocate.
//
// # Concurrency
//
// A Client is safe for concurrent use, as is the go-redis client under it.
// A [Batch] is not.
//
// # Module
//
// This package and client/httplimit form the module
// github.com/cellserver/cellserver/client, apart from the server's: it
// needs Go 1.22 and go-redis v9.5.5 or newer, and brings none of the
// server's dependencies.
package client

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Client sends limiter commands through a go-redis client. The zero value
// is not usable; use [New].
type Client struct {
	rdb redis.UniversalClient
}

// New returns a Client over rdb, which the caller keeps owning (and closes).
func New(rdb redis.UniversalClient) *Client { return &Client{rdb: rdb} }

// Redis returns the go-redis client c sends through.
func (c *Client) Redis() redis.UniversalClient { return c.rdb }

// Rate is Count units per Period.
type Rate struct {
	Count  int64
	Period time.Duration
}

// PerSecond, PerMinute and PerHour return n units per second, minute, hour.
func PerSecond(n int64) Rate { return Rate{n, time.Second} }

// PerMinute returns n units per minute.
func PerMinute(n int64) Rate { return Rate{n, time.Minute} }

// PerHour returns n units per hour.
func PerHour(n int64) Rate { return Rate{n, time.Hour} }

// Never is Result.RetryAfter for a refused request that can never be
// allowed (its quantity is above the limit).
const Never time.Duration = -1

// Result is one limiter decision.
type Result struct {
	// Allowed reports whether the request was admitted (and charged).
	Allowed bool
	// Limit is the most units the key admits at once (for CL.THROTTLE,
	// max_burst + 1).
	Limit int64
	// Remaining is how many units the key would admit now.
	Remaining int64
	// RetryAfter is, for a refused request, how long until the same
	// request would be allowed; Never if it never would; 0 if allowed.
	RetryAfter time.Duration
	// ResetAfter is how long until the key is back to its full limit.
	ResetAfter time.Duration
}

// Error is an error reply from the server. Code is its first word ("ERR",
// "WRONGTYPE", "Cell" for CL.THROTTLE's redis-cell texts, "OOM", ...) and
// Message the rest; Command is the command sent (upper case).
type Error struct {
	Command string
	Code    string
	Message string
}

func (e *Error) Error() string {
	return "client: " + e.Command + ": " + e.Code + " " + e.Message
}

// WrongType reports whether the key holds another kind of limiter or value.
func (e *Error) WrongType() bool { return e.Code == "WRONGTYPE" }

// NoPermission reports whether the server's ACL refused the call: the
// user the connection authenticated as (go-redis Options.Username) may
// not run the command or touch the key (code NOPERM). Retrying as the
// same user cannot succeed; the message says which ("... to access one
// of the keys used as arguments", "... to run the 'x' command").
func (e *Error) NoPermission() bool { return e.Code == "NOPERM" }

// BadArgument reports whether the server refused the call's arguments
// (code ERR, or a redis-cell "Cell error"): retrying the same call cannot
// succeed.
func (e *Error) BadArgument() bool { return e.Code == "ERR" || e.Code == "Cell" }

// ErrRate is returned, without sending anything, for a CL.THROTTLE rate
// that cannot be written as a whole count per whole seconds.
var ErrRate = errors.New("client: CL.THROTTLE rate must be a count per whole seconds, or reduce to one")

// errReply is returned for a reply whose shape is not a limiter reply.
var errReply = errors.New("client: unexpected reply")

// IsServerError reports whether err is an answer from the server (an
// [*Error]) rather than a failure to get one.
func IsServerError(err error) bool {
	var e *Error
	return errors.As(err, &e)
}

// wrap turns a go-redis server error into an *Error; other errors pass.
func wrap(cmd string, err error) error {
	var re redis.Error
	if !errors.As(err, &re) {
		return err
	}
	s := re.Error()
	code, msg, _ := strings.Cut(s, " ")
	return &Error{Command: cmd, Code: code, Message: msg}
}

// period returns a period argument: whole seconds as an integer (no
// allocation), otherwise a Go duration string (250ms, 1.5s).
func period(d time.Duration) any {
	if d > 0 && d%time.Second == 0 {
		return int64(d / time.Second)
	}
	return d.String()
}

// throttleRate returns CL.THROTTLE's count and whole-second period for r.
func throttleRate(r Rate) (count, secs int64, err error) {
	if r.Count <= 0 || r.Period <= 0 {
		return 0, 0, ErrRate
	}
	if r.Period%time.Second == 0 {
		return r.Count, int64(r.Period / time.Second), nil
	}
	// Same emission interval over one second: Count/Period = c/1s.
	if c := r.Count * int64(time.Second); c/int64(time.Second) == r.Count && c%int64(r.Period) == 0 {
		return c / int64(r.Period), 1, nil
	}
	return 0, 0, ErrRate
}

// decode reads a 5-integer limiter reply; unit is the duration unit.
func decode(v any, unit time.Duration) (Result, error) {
	a, ok := v.([]any)
	if !ok || len(a) != 5 {
		return Result{}, errReply
	}
	var n [5]int64
	for i := range a {
		if n[i], ok = a[i].(int64); !ok {
			return Result{}, errReply
		}
	}
	r := Result{Allowed: n[0] == 0, Limit: n[1], Remaining: n[2]}
	switch {
	case r.Allowed:
	case n[3] < 0:
		r.RetryAfter = Never
	default:
		r.RetryAfter = time.Duration(n[3]) * unit
	}
	if n[4] > 0 {
		r.ResetAfter = time.Duration(n[4]) * unit
	}
	return r, nil
}

func (c *Client) tuple(ctx context.Context, name string, unit time.Duration, args ...any) (Result, error) {
	v, err := c.rdb.Do(ctx, args...).Result()
	if err != nil {
		return Result{}, wrap(name, err)
	}
	return decode(v, unit)
}

// Throttle sends CL.THROTTLE key max_burst count period quantity (GCRA, as
// redis-cell): a burst of maxBurst+1 units, refilled at rate. Durations are
// whole seconds, rounded up as redis-cell rounds. A rate whose period is not
// whole seconds is sent reduced to a count per second when exact, or
// refused with ErrRate. A negative quantity is a refund; 0 reports.
func (c *Client) Throttle(ctx context.Context, key string, maxBurst int64, rate Rate, quantity int64) (Result, error) {
	count, secs, err := throttleRate(rate)
	if err != nil {
		return Result{}, err
	}
	return c.tuple(ctx, "CL.THROTTLE", time.Second, "CL.THROTTLE", key, maxBurst, count, secs, quantity)
}

// Peek sends CL.PEEK key max_burst count period MS: what Throttle with
// quantity 0 would answer, writing nothing. Durations are milliseconds.
// The period may be any positive duration.
func (c *Client) Peek(ctx context.Context, key string, maxBurst int64, rate Rate) (Result, error) {
	return c.tuple(ctx, "CL.PEEK", time.Millisecond, "CL.PEEK", key, maxBurst, rate.Count, period(rate.Period), "MS")
}

// Fixed sends CL.FIXED key limit period quantity MS: at most limit units
// per window of period, windows aligned on multiples of period since the
// Unix epoch.
func (c *Client) Fixed(ctx context.Context, key string, limit int64, per time.Duration, quantity int64) (Result, error) {
	return c.tuple(ctx, "CL.FIXED", time.Millisecond, "CL.FIXED", key, limit, period(per), quantity, "MS")
}

// Sliding sends CL.SLIDING key limit period quantity MS: the
// sliding-window counter (approximate; see docs/commands.md).
func (c *Client) Sliding(ctx context.Context, key string, limit int64, per time.Duration, quantity int64) (Result, error) {
	return c.tuple(ctx, "CL.SLIDING", time.Millisecond, "CL.SLIDING", key, limit, period(per), quantity, "MS")
}

// SlidingLog sends CL.SLIDINGLOG key limit period quantity MS: the exact
// sliding log. quantity must not be negative.
func (c *Client) SlidingLog(ctx context.Context, key string, limit int64, per time.Duration, quantity int64) (Result, error) {
	return c.tuple(ctx, "CL.SLIDINGLOG", time.Millisecond, "CL.SLIDINGLOG", key, limit, period(per), quantity, "MS")
}

// Lease is a slot of a concurrency limit held under Token, until Release
// or until its lease time passes. The zero Lease holds nothing.
type Lease struct {
	c          *Client
	Key, Token string
}

// Acquire sends CL.ACQUIRE key limit lease token MS: take one of limit
// slots for lease. Acquiring again with the same token extends the lease.
// The Lease is valid (and needs releasing) only if Result.Allowed.
func (c *Client) Acquire(ctx context.Context, key string, limit int64, lease time.Duration, token string) (Lease, Result, error) {
	r, err := c.tuple(ctx, "CL.ACQUIRE", time.Millisecond, "CL.ACQUIRE", key, limit, period(lease), token, "MS")
	if err != nil || !r.Allowed {
		return Lease{}, r, err
	}
	return Lease{c: c, Key: key, Token: token}, r, nil
}

// Release sends CL.RELEASE key token and reports whether a live lease was
// released (false: unknown token or already expired).
func (c *Client) Release(ctx context.Context, key, token string) (bool, error) {
	n, err := c.rdb.Do(ctx, "CL.RELEASE", key, token).Int64()
	if err != nil {
		return false, wrap("CL.RELEASE", err)
	}
	return n == 1, nil
}

// Release gives the lease back (CL.RELEASE); see [Client.Release]. On the
// zero Lease it does nothing and reports false.
func (l Lease) Release(ctx context.Context) (bool, error) {
	if l.c == nil {
		return false, nil
	}
	return l.c.Release(ctx, l.Key, l.Token)
}

// Batch builds one CL.ALL call: every check is decided under its key's
// lock and, if any is refused, nothing is charged anywhere. Keys must be
// distinct (and, in a cluster, share a slot: use a hash tag). A Batch is
// not safe for concurrent use; it can be sent again with Do.
type Batch struct {
	c     *Client
	args  []any
	units []time.Duration
	err   error
}

// All starts a CL.ALL call.
func (c *Client) All() *Batch {
	return &Batch{c: c, args: []any{"CL.ALL"}}
}

// Throttle adds a CL.THROTTLE check, sent with MS (which CL.ALL accepts
// after a CL.THROTTLE check): its durations are milliseconds rounded up,
// as [Client.Peek]'s, not the whole seconds of [Client.Throttle]. The rate
// is sent as Throttle sends it (ErrRate when it cannot be).
func (b *Batch) Throttle(key string, maxBurst int64, rate Rate, quantity int64) *Batch {
	count, secs, err := throttleRate(rate)
	if err != nil {
		b.err = err
		return b
	}
	b.args = append(b.args, "CL.THROTTLE", key, maxBurst, count, secs, quantity, "MS")
	b.units = append(b.units, time.Millisecond)
	return b
}

func (b *Batch) add(name, key string, limit int64, per time.Duration, q any) *Batch {
	b.args = append(b.args, name, key, limit, period(per), q, "MS")
	b.units = append(b.units, time.Millisecond)
	return b
}

// Fixed adds a CL.FIXED check.
func (b *Batch) Fixed(key string, limit int64, per time.Duration, quantity int64) *Batch {
	return b.add("CL.FIXED", key, limit, per, quantity)
}

// Sliding adds a CL.SLIDING check.
func (b *Batch) Sliding(key string, limit int64, per time.Duration, quantity int64) *Batch {
	return b.add("CL.SLIDING", key, limit, per, quantity)
}

// SlidingLog adds a CL.SLIDINGLOG check.
func (b *Batch) SlidingLog(key string, limit int64, per time.Duration, quantity int64) *Batch {
	return b.add("CL.SLIDINGLOG", key, limit, per, quantity)
}

// Acquire adds a CL.ACQUIRE check for one lease held under token.
func (b *Batch) Acquire(key string, limit int64, lease time.Duration, token string) *Batch {
	return b.add("CL.ACQUIRE", key, limit, lease, token)
}

// Err returns the error a check added so far recorded without sending
// anything (ErrRate), or nil. Do returns the same error.
func (b *Batch) Err() error { return b.err }

// Len returns the number of checks added.
func (b *Batch) Len() int { return len(b.units) }

// Do sends the call. allowed is true iff every check was allowed (and then
// all were charged); results has one Result per check, in the order added
// (when refused, each shows what its check would answer with the earlier
// checks applied). The slice is the caller's.
func (b *Batch) Do(ctx context.Context) (allowed bool, results []Result, err error) {
	if b.err != nil {
		return false, nil, b.err
	}
	v, err := b.c.rdb.Do(ctx, b.args...).Result()
	if err != nil {
		return false, nil, wrap("CL.ALL", err)
	}
	a, ok := v.([]any)
	if !ok || len(a) != len(b.units) {
		return false, nil, errReply
	}
	results = make([]Result, len(a))
	allowed = true
	for i := range a {
		if results[i], err = decode(a[i], b.units[i]); err != nil {
			return false, nil, err
		}
		allowed = allowed && results[i].Allowed
	}
	return allowed, results, nil
}

// Info is CL.INFO's view of a key. Kind says which fields are set: "gcra"
// (TAT, TATIn), "fixed" (WindowStart, Count), "sliding" (WindowStart,
// Previous, Current), "slidinglog" (Entries, Units, Oldest, Newest),
// "concurrency" (Leases, Tokens), "string" (Bytes).
type Info struct {
	Kind string
	// TTL is the key's time to live, -1 if it has none.
	TTL time.Duration

	TAT         time.Time     // gcra: theoretical arrival time, to the ns
	TATIn       time.Duration // gcra: TAT − now, whole ms (floored)
	WindowStart time.Time     // fixed, sliding: current window's start, ms
	Count       int64         // fixed
	Previous    int64         // sliding: previous window's count
	Current     int64         // sliding: current window's count
	Entries     int64         // slidinglog: entries kept
	Units       int64         // slidinglog: units in the entries
	Oldest      time.Time     // slidinglog, ms; zero without entries
	Newest      time.Time     // slidinglog, ms; zero without entries
	Leases      int64         // concurrency: leases held
	Tokens      []string      // concurrency: their tokens, sorted
	Bytes       int64         // string: length
}

// Info sends CL.INFO key. found is false (and err nil) if the key does not
// exist. It reads both the RESP3 map and the RESP2 array forms.
func (c *Client) Info(ctx context.Context, key string) (info Info, found bool, err error) {
	v, err := c.rdb.Do(ctx, "CL.INFO", key).Result()
	if err == redis.Nil {
		return Info{}, false, nil
	}
	if err != nil {
		return Info{}, false, wrap("CL.INFO", err)
	}
	// The integer fields: counts as they are, instants in ms since the
	// Unix epoch.
	counts := map[string]*int64{"count": &info.Count, "previous": &info.Previous, "current": &info.Current,
		"entries": &info.Entries, "units": &info.Units, "leases": &info.Leases, "bytes": &info.Bytes}
	instants := map[string]*time.Time{"window_start_ms": &info.WindowStart, "oldest_ms": &info.Oldest, "newest_ms": &info.Newest}
	set := func(k string, val any) error {
		n, isInt := val.(int64)
		switch {
		case counts[k] != nil:
			*counts[k] = n
		case instants[k] != nil:
			*instants[k] = time.UnixMilli(n)
		case k == "kind":
			info.Kind, _ = val.(string)
		case k == "ttl_ms":
			info.TTL = -1
			if n >= 0 {
				info.TTL = time.Duration(n) * time.Millisecond
			}
		case k == "tat_ns":
			s, _ := val.(string)
			ns, err := strconv.ParseInt(s, 10, 64)
			if err != nil {
				return errReply
			}
			info.TAT = time.Unix(0, ns)
		case k == "tat_in_ms":
			info.TATIn = time.Duration(n) * time.Millisecond
		case k == "tokens":
			a, _ := val.([]any)
			info.Tokens = make([]string, 0, len(a))
			for _, t := range a {
				s, _ := t.(string)
				info.Tokens = append(info.Tokens, s)
			}
			return nil
		default:
			return nil // a field added later
		}
		if !isInt && k != "kind" && k != "tat_ns" {
			return fmt.Errorf("client: CL.INFO field %s: %w", k, errReply)
		}
		return nil
	}
	switch r := v.(type) {
	case map[any]any:
		for k, val := range r {
			ks, _ := k.(string)
			if err := set(ks, val); err != nil {
				return Info{}, false, err
			}
		}
	case []any:
		for i := 0; i+1 < len(r); i += 2 {
			ks, _ := r[i].(string)
			if err := set(ks, r[i+1]); err != nil {
				return Info{}, false, err
			}
		}
	default:
		return Info{}, false, errReply
	}
	return info, true, nil
}
