package httplimit

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/cellserver/cellserver/client"
	"github.com/cellserver/cellserver/limiter"
)

// KeyFunc returns the key a limit counts r under. ok=false means the limit
// does not apply to r (it is neither checked nor reported in the headers).
type KeyFunc func(r *http.Request) (key string, ok bool)

// Algorithm selects the limiter command a Limit is checked with.
type Algorithm int

const (
	// GCRA is CL.THROTTLE: a burst of Quota, refilled at Quota per Window
	// (max_burst = Quota-1). The zero value.
	GCRA Algorithm = iota
	// Fixed is CL.FIXED: at most Quota per window aligned on the epoch.
	Fixed
	// Sliding is CL.SLIDING: the sliding-window counter (approximate).
	Sliding
	// SlidingLog is CL.SLIDINGLOG: the exact sliding log.
	SlidingLog
)

var algorithmNames = [...]string{GCRA: "gcra", Fixed: "fixed", Sliding: "sliding", SlidingLog: "slidinglog"}

func (a Algorithm) String() string { return enumString(algorithmNames[:], "Algorithm", int(a)) }

// Limit is one policy: Quota units per Window, counted per key.
type Limit struct {
	// Name is the policy's name: the item of RateLimit-Policy and RateLimit
	// ("per-ip") and part of the server key. Printable ASCII without ':'.
	Name string
	// Quota is q, the units admitted per Window (at least 1). For GCRA it is
	// the burst, refilled at Quota per Window.
	Quota int64
	// Window is w. For GCRA it must be whole seconds, or Quota per Window
	// must reduce to a whole count per second (CL.THROTTLE's arguments).
	// RateLimit-Policy's w is Window in seconds, rounded up.
	Window time.Duration
	// Algorithm is the limiter; the zero value is GCRA.
	Algorithm Algorithm
	// Key returns the request's key for this limit; required.
	Key KeyFunc
}

// FailMode is what the middleware does when cellserver cannot answer.
type FailMode int

const (
	// Open lets the request through (the default).
	Open FailMode = iota
	// Closed answers 503 with Retry-After.
	Closed
	// Local decides in process at LocalShare of each limit.
	Local
)

var failModeNames = [...]string{Open: "open", Closed: "closed", Local: "local"}

func (f FailMode) String() string { return enumString(failModeNames[:], "FailMode", int(f)) }

// Defaults of Options' zero values.
const (
	DefaultPrefix        = "rl:"
	DefaultDeadline      = 50 * time.Millisecond
	DefaultProbeInterval = time.Second
	DefaultLocalShare    = 0.1
	DefaultDenyCacheSize = 10_000
	DefaultLocalMaxKeys  = 10_000
)

// Options configure a Middleware. Zero values take the documented defaults.
type Options struct {
	// Limits are checked together in one CL.ALL call: a request is admitted
	// only if every applicable limit admits it, and nothing is charged
	// otherwise. At least one; names distinct.
	Limits []Limit
	// Prefix starts every server key: Prefix+Limit.Name+":"+key. Default
	// "rl:". In a cluster, several limits need a hash tag here (e.g.
	// "{rl}:") or in their keys; see the package doc.
	Prefix string
	// Deadline bounds each call to cellserver (default 50 ms), whatever the
	// go-redis client's own timeouts.
	Deadline time.Duration
	// OnError is the policy when cellserver does not answer, or answers
	// with an error: Open (default), Closed or Local.
	OnError FailMode
	// ProbeInterval is how often, while cellserver is unreachable, one
	// request tries it (default 1 s). Others decide by OnError at once.
	ProbeInterval time.Duration
	// LocalShare is the fraction of each limit's Quota one process admits
	// alone under OnError=Local, in (0, 1]; at least 1 unit. Default 0.1:
	// right for about ten processes sharing the limit.
	LocalShare float64
	// LocalMaxKeys bounds the keys the Local fallback tracks (default
	// 10,000); past it, an arbitrary key is forgotten.
	LocalMaxKeys int
	// DenyCacheSize bounds the deny cache in entries (default 10,000, about
	// 100 B each plus the key); negative disables it.
	DenyCacheSize int
	// Cost returns a request's cost in units (default 1). A value below 1
	// counts as 1.
	Cost func(*http.Request) int64
	// LegacyHeaders adds X-RateLimit-Limit, -Remaining and -Reset (seconds)
	// for the most restrictive limit.
	LegacyHeaders bool
	// Shadow decides and reports every request but refuses none, and sets
	// no rate-limit header (see the package doc).
	Shadow bool
	// OnDecision, if set, is called with every decision, before the
	// request is passed on or refused. It must be safe for concurrent use.
	OnDecision func(r *http.Request, d Decision)
	// Denied writes a refusal after the headers (RateLimit, Retry-After)
	// are set; it must write the status (429). [DecisionFrom] gives it the
	// decision. Default: 429 with a JSON body.
	Denied http.Handler
	// Unavailable writes the 503 of OnError=Closed, after Retry-After is
	// set; it must write the status. Default: 503 with a JSON body.
	Unavailable http.Handler
	// Clock is the time of the local parts: the deny cache, the Local
	// fallback and the probe schedule. Default time.Now. The Deadline is
	// always wall-clock time.
	Clock func() time.Time
}

// Outcome is the kind of a Decision.
type Outcome int

const (
	// Allowed: cellserver admitted the request.
	Allowed Outcome = iota
	// Limited: cellserver (or the deny cache) refused it.
	Limited
	// Fallback: cellserver did not answer in time; OnError decided.
	Fallback
	// Error: cellserver answered with an error; OnError decided.
	Error
)

var outcomeNames = [...]string{Allowed: "allowed", Limited: "limited", Fallback: "fallback", Error: "error"}

func (o Outcome) String() string { return enumString(outcomeNames[:], "Outcome", int(o)) }

// Source says who made a Decision.
type Source int

const (
	SourceServer    Source = iota // cellserver's CL.ALL reply
	SourceDenyCache               // the local deny cache, no round trip
	SourceLocal                   // the Local fallback
	SourceOpen                    // the Open fallback
	SourceClosed                  // the Closed fallback
)

var sourceNames = [...]string{SourceServer: "server", SourceDenyCache: "denycache", SourceLocal: "local", SourceOpen: "open", SourceClosed: "closed"}

func (s Source) String() string { return enumString(sourceNames[:], "Source", int(s)) }

// Decision is what the middleware decided for one request.
type Decision struct {
	Outcome Outcome
	Source  Source
	// Refused reports that the request was refused (429 or 503), or in
	// shadow mode would have been.
	Refused bool
	// Limit is the name of the limit that refused the request ("" if none,
	// or if the Closed fallback refused it).
	Limit string
	// RetryAfter is, for a refusal, how long until a retry can succeed
	// (rounded up to whole seconds in the Retry-After header).
	RetryAfter time.Duration
	// Results are indexed like Options.Limits: the server's (or the Local
	// fallback's) answer for each limit; the zero Result (Limit 0) for a
	// limit that did not apply. Nil for deny-cache, Open and Closed
	// decisions. The slice is the hook's to keep.
	Results []client.Result
	// Shadow reports that the middleware runs in shadow mode: the request
	// passed even if Refused.
	Shadow bool
	// Err is the server's error reply (Outcome Error), or why it did not
	// answer (Outcome Fallback; nil when the breaker skipped the call).
	Err error
}

// ErrCrossSlot wraps a CROSSSLOT reply: in a cluster, the keys of one
// request's limits map to different slots. Decision.Err matches it with
// errors.Is.
var ErrCrossSlot = errors.New("httplimit: the limits' keys hash to different cluster slots; put a hash tag in Options.Prefix (e.g. \"{rl}:\") or in the keys")

// Stats are the middleware's counters since New and two gauges.
type Stats struct {
	Allowed        uint64 // requests admitted by cellserver's answer
	Limited        uint64 // requests refused by cellserver or the deny cache (shadow included)
	DenyCacheHits  uint64 // of Limited, decided by the deny cache
	RoundTrips     uint64 // CL.ALL calls sent
	Unanswered     uint64 // calls that got no reply (network error or Deadline)
	Errors         uint64 // server error replies
	FallbackOpen   uint64 // decisions made by OnError=Open
	FallbackClosed uint64 // decisions made by OnError=Closed
	FallbackLocal  uint64 // decisions made by OnError=Local
	LocalLimited   uint64 // of FallbackLocal, refusals
	Probes         uint64 // calls sent while cellserver was considered down
	Recoveries     uint64 // times cellserver answered again after being down

	// Gauges: current sizes, not counters. They bound the middleware's
	// memory: each is at most its Options bound (DenyCacheSize,
	// LocalMaxKeys); the local state is emptied when cellserver answers
	// again.
	DenyCacheEntries int // entries in the deny cache (0 when it is disabled)
	LocalKeys        int // (limit, key) entries of the Local fallback's state
}

type stats struct {
	allowed, limited, denyHits, roundTrips, unanswered, errors  atomic.Uint64
	fbOpen, fbClosed, fbLocal, localLimited, probes, recoveries atomic.Uint64
}

// limit is a validated Limit with its precomputed strings.
type limit struct {
	Limit
	keyPrefix string // Prefix+Name+":"
	quoted    string // the sf-string of Name
	policy    string // `"name";q=Q;w=W`
	local     int64  // quota of the Local fallback
}

// Middleware is rate-limiting middleware; safe for concurrent use.
type Middleware struct {
	c       *client.Client
	o       Options
	limits  []limit
	policy  string // RateLimit-Policy when every limit applies
	clock   func() time.Time
	deny    *denyCache
	local   *localState
	breaker breaker
	stats   stats
	direct  bool // the go-redis client honours context deadlines: no guard goroutine
}

// ctxHonored reports whether rdb applies context deadlines to its sockets
// (ContextTimeoutEnabled), so that a call can be bounded without a guard
// goroutine.
func ctxHonored(rdb redis.UniversalClient) bool {
	switch r := rdb.(type) {
	case *redis.Client:
		return r.Options().ContextTimeoutEnabled
	case *redis.ClusterClient:
		return r.Options().ContextTimeoutEnabled
	case *redis.Ring:
		return r.Options().ContextTimeoutEnabled
	}
	return false
}

// New validates o and returns a Middleware sending to c. Every problem
// found is listed in the error.
func New(c *client.Client, o Options) (*Middleware, error) {
	var errs []error
	bad := func(format string, a ...any) { errs = append(errs, fmt.Errorf("httplimit: "+format, a...)) }
	if c == nil {
		bad("nil client")
	}
	if len(o.Limits) == 0 {
		bad("no limits")
	}
	if o.Prefix == "" {
		o.Prefix = DefaultPrefix
	}
	switch {
	case o.Deadline < 0:
		bad("negative Deadline %v", o.Deadline)
	case o.Deadline == 0:
		o.Deadline = DefaultDeadline
	}
	switch {
	case o.ProbeInterval < 0:
		bad("negative ProbeInterval %v", o.ProbeInterval)
	case o.ProbeInterval == 0:
		o.ProbeInterval = DefaultProbeInterval
	}
	if o.OnError < Open || o.OnError > Local {
		bad("unknown OnError %d", int(o.OnError))
	}
	switch {
	case o.LocalShare == 0:
		o.LocalShare = DefaultLocalShare
	case !(o.LocalShare > 0 && o.LocalShare <= 1): // NaN too
		bad("LocalShare %v not in (0, 1]", o.LocalShare)
	}
	switch {
	case o.LocalMaxKeys < 0:
		bad("negative LocalMaxKeys %d", o.LocalMaxKeys)
	case o.LocalMaxKeys == 0:
		o.LocalMaxKeys = DefaultLocalMaxKeys
	}
	if o.DenyCacheSize == 0 {
		o.DenyCacheSize = DefaultDenyCacheSize
	}
	if o.Clock == nil {
		o.Clock = time.Now
	}
	if o.Denied == nil {
		o.Denied = http.HandlerFunc(defaultDenied)
	}
	if o.Unavailable == nil {
		o.Unavailable = http.HandlerFunc(defaultUnavailable)
	}
	m := &Middleware{c: c, o: o, clock: o.Clock}
	if c != nil {
		m.direct = ctxHonored(c.Redis())
	}
	seen := map[string]bool{}
	var policies []string
	for i, l := range o.Limits {
		where := fmt.Sprintf("limit %d (%q)", i, l.Name)
		if err := checkName(l.Name); err != nil {
			bad("%s: %v", where, err)
		} else if seen[l.Name] {
			bad("%s: duplicate name", where)
		}
		seen[l.Name] = true
		if l.Quota < 1 {
			bad("%s: Quota %d, want at least 1", where, l.Quota)
		}
		if l.Window <= 0 || l.Window > limiter.MaxPeriod {
			bad("%s: Window %v not in (0, 10 years]", where, l.Window)
		}
		if l.Key == nil {
			bad("%s: nil Key", where)
		}
		switch l.Algorithm {
		case GCRA:
			if l.Quota >= 1 && l.Window > 0 && int64(l.Window)/l.Quota < 1 {
				bad("%s: %d per %v: under 1 ns per unit, a zero rate for CL.THROTTLE", where, l.Quota, l.Window)
			} else if l.Quota >= 1 && l.Window > 0 && c != nil {
				if err := c.All().Throttle("k", l.Quota-1, client.Rate{Count: l.Quota, Period: l.Window}, 1).Err(); err != nil {
					bad("%s: %d per %v: %v", where, l.Quota, l.Window, err)
				}
			}
		case Sliding:
			if l.Quota > limiter.MaxSlidingLimit {
				bad("%s: Quota %d above the sliding counter's %d", where, l.Quota, int64(limiter.MaxSlidingLimit))
			}
		case Fixed, SlidingLog:
		default:
			bad("%s: unknown Algorithm %d", where, int(l.Algorithm))
		}
		q := quote(l.Name)
		w := int64(math.Ceil(l.Window.Seconds()))
		lm := limit{
			Limit:     l,
			keyPrefix: o.Prefix + l.Name + ":",
			quoted:    q,
			policy:    q + ";q=" + strconv.FormatInt(l.Quota, 10) + ";w=" + strconv.FormatInt(w, 10),
			local:     max(1, int64(float64(l.Quota)*o.LocalShare)),
		}
		m.limits = append(m.limits, lm)
		policies = append(policies, lm.policy)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	m.policy = strings.Join(policies, ", ")
	if o.DenyCacheSize > 0 {
		m.deny = newDenyCache(o.DenyCacheSize)
	}
	m.local = newLocalState(o.LocalMaxKeys)
	return m, nil
}

// checkName accepts printable ASCII without ':' (so that server keys of
// different limits cannot collide), non-empty.
func checkName(s string) error {
	if s == "" {
		return errors.New("empty name")
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c > 0x7e {
			return fmt.Errorf("name byte %#x at %d is not printable ASCII (sf-string)", c, i)
		}
		if s[i] == ':' {
			return errors.New("name contains ':'")
		}
	}
	return nil
}

// quote returns s as an sf-string (RFC 8941 §3.3.3): '"' and '\' escaped.
func quote(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for i := 0; i < len(s); i++ {
		if s[i] == '"' || s[i] == '\\' {
			b.WriteByte('\\')
		}
		b.WriteByte(s[i])
	}
	b.WriteByte('"')
	return b.String()
}

// Stats returns the counters and the gauges. The gauges take the deny
// cache's and the local state's locks for a moment; the counters are read
// one at a time, not as one snapshot.
func (m *Middleware) Stats() Stats {
	s := &m.stats
	deny := 0
	if m.deny != nil {
		deny = m.deny.len()
	}
	return Stats{
		Allowed: s.allowed.Load(), Limited: s.limited.Load(), DenyCacheHits: s.denyHits.Load(),
		RoundTrips: s.roundTrips.Load(), Unanswered: s.unanswered.Load(), Errors: s.errors.Load(),
		FallbackOpen: s.fbOpen.Load(), FallbackClosed: s.fbClosed.Load(), FallbackLocal: s.fbLocal.Load(),
		LocalLimited: s.localLimited.Load(), Probes: s.probes.Load(), Recoveries: s.recoveries.Load(),
		DenyCacheEntries: deny, LocalKeys: m.local.size(),
	}
}

// applied is one limit that applies to a request, with its key.
type applied struct {
	idx int
	key string
}

// Handler returns next wrapped by the middleware.
func (m *Middleware) Handler(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { m.serve(w, r, next) })
}

func (m *Middleware) serve(w http.ResponseWriter, r *http.Request, next http.Handler) {
	var buf [8]applied
	app := buf[:0]
	for i := range m.limits {
		if k, ok := m.limits[i].Key(r); ok {
			app = append(app, applied{i, k})
		}
	}
	if len(app) == 0 {
		next.ServeHTTP(w, r)
		return
	}
	cost := int64(1)
	if m.o.Cost != nil {
		cost = max(1, m.o.Cost(r))
	}
	now := m.clock()

	if m.deny != nil {
		if e, i, ok := m.deny.lookup(app, cost, now.UnixNano()); ok {
			m.stats.limited.Add(1)
			m.stats.denyHits.Add(1)
			d := Decision{Outcome: Limited, Source: SourceDenyCache, Refused: true,
				Limit: m.limits[app[i].idx].Name, RetryAfter: time.Duration(e.until - now.UnixNano())}
			if !m.o.Shadow {
				h := w.Header()
				m.setPolicy(h, app)
				item := m.limits[app[i].idx].quoted + ";r=" + strconv.FormatInt(e.remaining, 10) +
					";t=" + strconv.FormatInt(ceilSeconds(time.Duration(e.resetAt-now.UnixNano())), 10)
				h.Set("RateLimit", item)
				if m.o.LegacyHeaders {
					m.legacy(h, m.limits[app[i].idx].Quota, e.remaining, time.Duration(e.resetAt-now.UnixNano()))
				}
			}
			m.finish(w, r, next, d)
			return
		}
	}

	probe, call := m.breaker.admit(now)
	if !call {
		m.fallback(w, r, next, app, cost, now, Fallback, nil)
		return
	}
	if probe {
		m.stats.probes.Add(1)
	}
	allowed, results, err := m.call(r.Context(), app, cost)
	if probe {
		m.breaker.probing.Store(false)
	}
	if err != nil {
		if client.IsServerError(err) {
			m.stats.errors.Add(1)
			var ce *client.Error
			if errors.As(err, &ce) && ce.Code == "CROSSSLOT" {
				err = fmt.Errorf("%w: %w", ErrCrossSlot, err)
			}
			m.recovered()
			m.fallback(w, r, next, app, cost, now, Error, err)
			return
		}
		m.stats.unanswered.Add(1)
		m.breaker.trip(m.clock(), m.o.ProbeInterval)
		m.fallback(w, r, next, app, cost, now, Fallback, err)
		return
	}
	m.recovered()
	m.decided(w, r, next, app, cost, now, SourceServer, allowed, results, Allowed, nil)
}

// recovered notes that the server answered: close the breaker and drop
// the Local fallback's state.
func (m *Middleware) recovered() {
	if m.breaker.down.Load() && m.breaker.down.CompareAndSwap(true, false) {
		m.stats.recoveries.Add(1)
		m.local.reset()
	}
}

type callResult struct {
	allowed bool
	results []client.Result
	err     error
}

// call sends the CL.ALL of app and waits at most the Deadline. Unless the
// go-redis client honours context deadlines (ContextTimeoutEnabled), the
// call runs in its own goroutine, so that the Deadline holds anyway: an
// abandoned call ends when go-redis's own timeouts end it.
func (m *Middleware) call(parent context.Context, app []applied, cost int64) (bool, []client.Result, error) {
	b := m.c.All()
	for _, a := range app {
		l := &m.limits[a.idx]
		key := l.keyPrefix + a.key
		switch l.Algorithm {
		case GCRA:
			b.Throttle(key, l.Quota-1, client.Rate{Count: l.Quota, Period: l.Window}, cost)
		case Fixed:
			b.Fixed(key, l.Quota, l.Window, cost)
		case Sliding:
			b.Sliding(key, l.Quota, l.Window, cost)
		case SlidingLog:
			b.SlidingLog(key, l.Quota, l.Window, cost)
		}
	}
	m.stats.roundTrips.Add(1)
	ctx, cancel := context.WithTimeout(context.WithoutCancel(parent), m.o.Deadline)
	defer cancel()
	if m.direct {
		ok, res, err := b.Do(ctx)
		if err != nil && !client.IsServerError(err) && ctx.Err() != nil {
			err = fmt.Errorf("httplimit: no answer within %v: %w", m.o.Deadline, err)
		}
		return ok, res, err
	}
	ch := make(chan callResult, 1)
	go func() {
		ok, res, err := b.Do(ctx)
		ch <- callResult{ok, res, err}
	}()
	select {
	case cr := <-ch:
		return cr.allowed, cr.results, cr.err
	case <-ctx.Done():
		return false, nil, fmt.Errorf("httplimit: no answer within %v: %w", m.o.Deadline, ctx.Err())
	}
}

// decided applies a decision with per-limit results (server or local):
// headers, deny cache, counters, then pass or refuse. For the Local
// fallback, oc (Fallback or Error) and err are the Decision's.
func (m *Middleware) decided(w http.ResponseWriter, r *http.Request, next http.Handler, app []applied, cost int64, now time.Time, src Source, allowed bool, results []client.Result, oc Outcome, err error) {
	d := Decision{Source: src, Results: m.spread(app, results), Err: err}
	switch {
	case src == SourceLocal:
		d.Outcome = oc
		m.stats.fbLocal.Add(1)
		if !allowed {
			m.stats.localLimited.Add(1)
		}
	case allowed:
		d.Outcome = Allowed
		m.stats.allowed.Add(1)
	default:
		d.Outcome = Limited
		m.stats.limited.Add(1)
	}
	most := -1 // the most restrictive limit, for legacy headers
	if !allowed {
		d.Refused = true
		for i, res := range results {
			if res.Allowed {
				continue
			}
			retry := res.RetryAfter
			if retry == client.Never { // cost above the quota: never admitted
				retry = m.limits[app[i].idx].Window
			} else if src == SourceServer && m.deny != nil {
				m.deny.add(app[i], cost, now.UnixNano(), res)
			}
			if most < 0 || retry > d.RetryAfter {
				d.RetryAfter, d.Limit, most = retry, m.limits[app[i].idx].Name, i
			}
		}
	}
	if !m.o.Shadow {
		h := w.Header()
		m.setPolicy(h, app)
		bs := make([]byte, 0, 32*len(app))
		for i, res := range results {
			l := &m.limits[app[i].idx]
			rem := res.Remaining
			if !allowed && res.Allowed {
				// Reported as if charged, but a refused CL.ALL charges
				// nothing: what remains is one cost more, up to the limit.
				rem = min(rem+cost, res.Limit)
			}
			if i > 0 {
				bs = append(bs, ", "...)
			}
			bs = append(bs, l.quoted...)
			bs = append(bs, ";r="...)
			bs = strconv.AppendInt(bs, max(rem, 0), 10)
			bs = append(bs, ";t="...)
			bs = strconv.AppendInt(bs, ceilSeconds(res.ResetAfter), 10)
			if allowed && (most < 0 || rem < results[most].Remaining) {
				most = i
			}
		}
		h.Set("RateLimit", string(bs))
		if m.o.LegacyHeaders && most >= 0 {
			res := results[most]
			m.legacy(h, res.Limit, max(res.Remaining, 0), res.ResetAfter)
		}
	}
	if allowed {
		m.hook(r, d)
		next.ServeHTTP(w, r)
		return
	}
	m.finish(w, r, next, d)
}

// spread returns results indexed like m.limits.
func (m *Middleware) spread(app []applied, results []client.Result) []client.Result {
	if len(app) == len(m.limits) {
		return results
	}
	all := make([]client.Result, len(m.limits))
	for i, a := range app {
		all[a.idx] = results[i]
	}
	return all
}

// fallback decides by OnError (Outcome Fallback or Error).
func (m *Middleware) fallback(w http.ResponseWriter, r *http.Request, next http.Handler, app []applied, cost int64, now time.Time, oc Outcome, err error) {
	switch m.o.OnError {
	case Local:
		allowed, results := m.local.decide(m.limits, app, cost, now.UnixNano())
		m.decided(w, r, next, app, cost, now, SourceLocal, allowed, results, oc, err)
	case Closed:
		m.stats.fbClosed.Add(1)
		d := Decision{Outcome: oc, Source: SourceClosed, Refused: true, Err: err,
			RetryAfter: m.breaker.retryAfter(now)}
		if oc == Error {
			d.RetryAfter = time.Second
		}
		if !m.o.Shadow {
			m.setPolicy(w.Header(), app)
		}
		m.finish(w, r, next, d)
	default:
		m.stats.fbOpen.Add(1)
		if !m.o.Shadow {
			m.setPolicy(w.Header(), app)
		}
		m.hook(r, Decision{Outcome: oc, Source: SourceOpen, Err: err})
		next.ServeHTTP(w, r)
	}
}

// finish reports a refusal d and writes it (Denied or Unavailable), or in
// shadow mode passes the request on.
func (m *Middleware) finish(w http.ResponseWriter, r *http.Request, next http.Handler, d Decision) {
	d.Shadow = m.o.Shadow
	m.hook(r, d)
	if d.Shadow {
		next.ServeHTTP(w, r)
		return
	}
	w.Header().Set("Retry-After", strconv.FormatInt(max(1, ceilSeconds(d.RetryAfter)), 10))
	r = r.WithContext(context.WithValue(r.Context(), decisionKey{}, d))
	if d.Source == SourceClosed {
		m.o.Unavailable.ServeHTTP(w, r)
		return
	}
	m.o.Denied.ServeHTTP(w, r)
}

func (m *Middleware) hook(r *http.Request, d Decision) {
	if m.o.OnDecision != nil {
		d.Shadow = m.o.Shadow
		m.o.OnDecision(r, d)
	}
}

// setPolicy sets RateLimit-Policy for the applicable limits.
func (m *Middleware) setPolicy(h http.Header, app []applied) {
	if len(app) == len(m.limits) {
		h.Set("RateLimit-Policy", m.policy)
		return
	}
	ps := make([]string, len(app))
	for i, a := range app {
		ps[i] = m.limits[a.idx].policy
	}
	h.Set("RateLimit-Policy", strings.Join(ps, ", "))
}

func (m *Middleware) legacy(h http.Header, lim, rem int64, reset time.Duration) {
	h.Set("X-RateLimit-Limit", strconv.FormatInt(lim, 10))
	h.Set("X-RateLimit-Remaining", strconv.FormatInt(rem, 10))
	h.Set("X-RateLimit-Reset", strconv.FormatInt(ceilSeconds(reset), 10))
}

// ceilSeconds rounds d up to whole seconds; 0 for d <= 0.
func ceilSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Second - 1) / time.Second)
}

type decisionKey struct{}

// DecisionFrom returns the decision stored in the context of the request
// passed to Options.Denied and Options.Unavailable.
func DecisionFrom(ctx context.Context) (Decision, bool) {
	d, ok := ctx.Value(decisionKey{}).(Decision)
	return d, ok
}

func defaultDenied(w http.ResponseWriter, r *http.Request) {
	d, _ := DecisionFrom(r.Context())
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusTooManyRequests)
	fmt.Fprintf(w, "{\"error\":\"too many requests\",\"limit\":%s,\"retry_after\":%d}\n",
		strconv.Quote(d.Limit), max(1, ceilSeconds(d.RetryAfter)))
}

func defaultUnavailable(w http.ResponseWriter, r *http.Request) {
	d, _ := DecisionFrom(r.Context())
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusServiceUnavailable)
	fmt.Fprintf(w, "{\"error\":\"rate limiter unavailable\",\"retry_after\":%d}\n", max(1, ceilSeconds(d.RetryAfter)))
}

// breaker keeps requests from waiting the Deadline while cellserver is
// down: after a call gets no answer, calls are skipped until nextProbe,
// and then one request at a time (probing) tries.
type breaker struct {
	down      atomic.Bool
	probing   atomic.Bool
	nextProbe atomic.Int64 // Clock ns
}

// admit reports whether this request may call, and whether as a probe.
func (b *breaker) admit(now time.Time) (probe, call bool) {
	if !b.down.Load() {
		return false, true
	}
	if now.UnixNano() < b.nextProbe.Load() {
		return false, false
	}
	if !b.probing.CompareAndSwap(false, true) {
		return false, false
	}
	return true, true
}

func (b *breaker) trip(now time.Time, every time.Duration) {
	b.nextProbe.Store(now.Add(every).UnixNano())
	b.down.Store(true)
}

// retryAfter is the time until the next probe (at least 1 s in the header).
func (b *breaker) retryAfter(now time.Time) time.Duration {
	return time.Duration(b.nextProbe.Load() - now.UnixNano())
}

// enumString is the String of one of this package's enumerations: its
// name in names, or typ(v) for a value without one.
func enumString(names []string, typ string, v int) string {
	if v >= 0 && v < len(names) && names[v] != "" {
		return names[v]
	}
	return typ + "(" + strconv.Itoa(v) + ")"
}
