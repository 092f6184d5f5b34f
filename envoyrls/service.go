package envoyrls

import (
	"cmp"
	"context"
	"errors"
	"math"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/cellserver/cellserver/policy"
	"github.com/cellserver/cellserver/server"
)

// Hit is one counter to charge: a descriptor's share of a request.
type Hit struct {
	// Key is the counter's key in the keyspace (see KeyFor).
	Key       string
	Algorithm Algorithm
	// Limit is the requests allowed per Period (at least 1); Burst is
	// CL.THROTTLE's max_burst (GCRA only).
	Limit  int64
	Burst  int64
	Period time.Duration
	// Hits is the quantity to charge: 0 only reads, negative refunds.
	Hits int64
	// Audit, when set, is the rule's audit (Rule.Audit): the in-process
	// store appends the decision to its stream, atomically with it.
	Audit *policy.Policy
}

// Result is a counter's answer to a Hit.
type Result struct {
	Limited    bool
	Remaining  int64
	ResetAfter time.Duration
}

// Store charges counters. Hit charges each of hits independently (one may
// be limited while the others are charged, as envoyproxy/ratelimit's
// INCRBY per descriptor) and returns one Result per Hit, in order. It must
// be safe for concurrent use.
type Store interface {
	Hit(ctx context.Context, hits []Hit) ([]Result, error)
}

// Headers names the response headers of the headers option. The zero value
// means envoyproxy/ratelimit's defaults (LIMIT_LIMIT_HEADER and friends).
type Headers struct {
	Limit, Remaining, Reset string
}

// DefaultHeaders are envoyproxy/ratelimit's default header names.
var DefaultHeaders = Headers{Limit: "RateLimit-Limit", Remaining: "RateLimit-Remaining", Reset: "RateLimit-Reset"}

// Options configure a Service.
type Options struct {
	// Store holds the counters; required.
	Store Store
	// Clock is the wall clock, for rules that never reach the Store
	// (requests_per_unit 0); nil means time.Now.
	Clock func() time.Time
	// ResponseHeaders turns on envoyproxy/ratelimit's
	// LIMIT_RESPONSE_HEADERS_ENABLED: response_headers_to_add gets the
	// limit, remaining and reset of the descriptor closest to its limit.
	ResponseHeaders bool
	// HeaderNames overrides the header names; zero fields mean
	// DefaultHeaders.
	HeaderNames Headers
}

// Stats counts what a Service answered, since it started.
type Stats struct {
	// Requests is the ShouldRateLimit calls answered (errors included):
	// OverLimit of them answered OVER_LIMIT, Errors with an error, the
	// OK ones OK (calls under way are in Requests only).
	Requests, OK uint64
	OverLimit    uint64
	// ShadowOverLimit is the descriptors over a shadow_mode rule's limit
	// that were answered OK.
	ShadowOverLimit uint64
	// NoRule is the descriptors that matched no rule (answered OK),
	// unknown domains included.
	NoRule uint64
	// Errors is the calls answered with an error.
	Errors uint64
	// Domains has the descriptor counts of each configured domain, by
	// name; Rules those of each rule with detailed_metric, by Rule.FullKey
	// (both sorted). UnknownDomain is the descriptors of requests whose
	// domain is not configured (answered OK, no rule). The counts of a
	// domain or rule that a reload keeps go on; those it removes are gone.
	Domains       []DescriptorCounts
	Rules         []DescriptorCounts
	UnknownDomain uint64
}

// DescriptorCounts is what the descriptors of a domain, or of a rule with
// detailed_metric, were answered: every descriptor of a request answered
// without error is counted once, under exactly one result.
type DescriptorCounts = server.RLSDescriptorCounts

// outcome is what a descriptor was answered (DescriptorCounts' fields).
type outcome uint8

const (
	withinLimit outcome = iota
	overLimit
	shadowOverLimit
	unlimited
	replaced
	noRule
	numOutcomes
)

// counts is the live form of DescriptorCounts, by outcome.
type counts [numOutcomes]atomic.Uint64

func (c *counts) snapshot(domain, rule string) DescriptorCounts {
	return DescriptorCounts{Domain: domain, Rule: rule, WithinLimit: c[withinLimit].Load(), OverLimit: c[overLimit].Load(),
		ShadowOverLimit: c[shadowOverLimit].Load(), Unlimited: c[unlimited].Load(), Replaced: c[replaced].Load(), NoRule: c[noRule].Load()}
}

// view is a Config with the counters of its domains and detailed_metric
// rules, swapped in whole by SetConfig.
type view struct {
	cfg     *Config
	domains map[string]*counts
	rules   map[*Rule]*ruleCounts
}

type ruleCounts struct {
	domain string
	counts
}

// Service implements envoy.service.ratelimit.v3.RateLimitService over a
// Config and a Store. Safe for concurrent use; SetConfig swaps the
// configuration atomically (a call sees the old or the new one whole).
type Service struct {
	pb.UnimplementedRateLimitServiceServer
	store   Store
	clock   func() time.Time
	headers Headers
	withHdr bool
	cur     atomic.Pointer[view]

	requests, ok, overLimit, shadowOver, noRule, errs, unknownDomain atomic.Uint64

	mu sync.Mutex // serialises SetConfig (the counters it carries over)
}

// NewService returns a Service answering from cfg.
func NewService(cfg *Config, o Options) (*Service, error) {
	if o.Store == nil {
		return nil, errors.New("envoyrls: Options.Store is required")
	}
	if cfg == nil {
		cfg = &Config{}
	}
	s := &Service{store: o.Store, clock: o.Clock, headers: o.HeaderNames, withHdr: o.ResponseHeaders}
	if s.clock == nil {
		s.clock = time.Now
	}
	s.headers.Limit = cmp.Or(s.headers.Limit, DefaultHeaders.Limit)
	s.headers.Remaining = cmp.Or(s.headers.Remaining, DefaultHeaders.Remaining)
	s.headers.Reset = cmp.Or(s.headers.Reset, DefaultHeaders.Reset)
	s.SetConfig(cfg)
	return s, nil
}

// SetConfig replaces the configuration; calls under way finish with the
// old one. The counts of a domain that stays, and of a detailed_metric
// rule whose full key stays, go on.
func (s *Service) SetConfig(cfg *Config) {
	if cfg == nil {
		cfg = &Config{}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	v := &view{cfg: cfg, domains: make(map[string]*counts, len(cfg.domains)), rules: map[*Rule]*ruleCounts{}}
	old := s.cur.Load()
	oldRules := map[[2]string]*ruleCounts{}
	if old != nil {
		for r, c := range old.rules {
			oldRules[[2]string{c.domain, r.FullKey}] = c
		}
	}
	for name, root := range cfg.domains {
		c := (*counts)(nil)
		if old != nil {
			c = old.domains[name]
		}
		if c == nil {
			c = new(counts)
		}
		v.domains[name] = c
		root.walk(func(r *Rule) {
			if !r.DetailedMetric {
				return
			}
			rc := oldRules[[2]string{name, r.FullKey}]
			if rc == nil {
				rc = &ruleCounts{domain: name}
			}
			v.rules[r] = rc
		})
	}
	s.cur.Store(v)
}

// Config returns the configuration in use.
func (s *Service) Config() *Config { return s.cur.Load().cfg }

// Stats returns the counts so far.
func (s *Service) Stats() Stats {
	v := s.cur.Load()
	st := Stats{Requests: s.requests.Load(), OK: s.ok.Load(), OverLimit: s.overLimit.Load(), ShadowOverLimit: s.shadowOver.Load(),
		NoRule: s.noRule.Load(), Errors: s.errs.Load(), UnknownDomain: s.unknownDomain.Load()}
	for name, c := range v.domains {
		st.Domains = append(st.Domains, c.snapshot(name, ""))
	}
	for r, c := range v.rules {
		st.Rules = append(st.Rules, c.snapshot(c.domain, r.FullKey))
	}
	sort.Slice(st.Domains, func(i, j int) bool { return st.Domains[i].Domain < st.Domains[j].Domain })
	sort.Slice(st.Rules, func(i, j int) bool {
		a, b := st.Rules[i], st.Rules[j]
		return a.Domain < b.Domain || (a.Domain == b.Domain && a.Rule < b.Rule)
	})
	return st
}

// The errors envoyproxy/ratelimit answers (as gRPC status Unknown, which
// is what a plain Go error becomes in grpc-go).
var (
	errEmptyDomain      = status.Error(codes.Unknown, "rate limit domain must not be empty")
	errEmptyDescriptors = status.Error(codes.Unknown, "rate limit descriptor list must not be empty")
)

// MaxDescriptors is the most descriptors one request may carry.
const MaxDescriptors = 1024

// ShouldRateLimit answers one request: every descriptor is looked up and
// its counter charged independently; the overall code is OVER_LIMIT if any
// enforced descriptor is over (see the package documentation).
func (s *Service) ShouldRateLimit(ctx context.Context, req *pb.RateLimitRequest) (*pb.RateLimitResponse, error) {
	return s.answer(ctx, req, new(answer))
}

// answer is ShouldRateLimit with the call's buffers a: the response is
// a.resp, valid until a is reused.
func (s *Service) answer(ctx context.Context, req *pb.RateLimitRequest, a *answer) (*pb.RateLimitResponse, error) {
	s.requests.Add(1)
	resp, err := s.shouldRateLimit(ctx, req, a)
	if err != nil {
		s.errs.Add(1)
		return nil, err
	}
	if resp.OverallCode == pb.RateLimitResponse_OVER_LIMIT {
		s.overLimit.Add(1)
	} else {
		s.ok.Add(1)
	}
	return resp, nil
}

// answer holds what answering one call needs, the response included, so
// that the gRPC handler reuses them from call to call (answers): a call
// of one descriptor allocates none of it.
type answer struct {
	checks []limitCheck
	keys   []string
	hits   []Hit
	vals   []string // a descriptor's Match.Values, for its key
	res    []Result // LocalStore's results
	resp   pb.RateLimitResponse
	ptrs   []*pb.RateLimitResponse_DescriptorStatus
	sts    []pb.RateLimitResponse_DescriptorStatus
	lims   []pb.RateLimitResponse_RateLimit
	durs   []durationpb.Duration
}

// answers are the gRPC handler's answers, back once the response is sent.
var answers = sync.Pool{New: func() any { return new(answer) }}

// maxPooledDescriptors is the most descriptors an answer kept for reuse
// has room for: a larger call's buffers are left to the collector.
const maxPooledDescriptors = 16

// reset sizes a for n descriptors, every field zero.
func (a *answer) reset(n int) {
	if cap(a.checks) < n {
		a.checks = make([]limitCheck, n)
		a.keys = make([]string, n)
		a.ptrs = make([]*pb.RateLimitResponse_DescriptorStatus, n)
		a.sts = make([]pb.RateLimitResponse_DescriptorStatus, n)
		a.lims = make([]pb.RateLimitResponse_RateLimit, n)
		a.durs = make([]durationpb.Duration, n)
	}
	a.checks, a.keys, a.ptrs = a.checks[:n], a.keys[:n], a.ptrs[:n]
	a.sts, a.lims, a.durs = a.sts[:n], a.lims[:n], a.durs[:n]
	clear(a.checks)
	clear(a.keys)
	clear(a.ptrs)
	for i := range n {
		a.sts[i] = pb.RateLimitResponse_DescriptorStatus{}
		a.lims[i] = pb.RateLimitResponse_RateLimit{}
		a.durs[i] = durationpb.Duration{}
	}
	clear(a.hits)
	a.hits = a.hits[:0]
	a.resp = pb.RateLimitResponse{}
}

// release gives a back to answers, unless it grew past maxPooledDescriptors.
func (a *answer) release() {
	if cap(a.checks) > maxPooledDescriptors || cap(a.hits) > maxPooledDescriptors {
		return
	}
	if cap(a.vals) > maxPooledDescriptors || cap(a.res) > maxPooledDescriptors {
		return
	}
	a.resp = pb.RateLimitResponse{} // no reference to the request's strings
	clear(a.keys)
	clear(a.hits)
	clear(a.vals[:cap(a.vals)])
	answers.Put(a)
}

// limitCheck is one descriptor of a request being answered.
type limitCheck struct {
	rule      *Rule // nil: no rule, unlimited or replaced
	unlimited bool
	replaced  bool
	limited   bool  // over the rule's limit (shadow_mode included)
	hitIndex  int   // index in the Store call's hits, -1 when not charged there
	hits      int64 // hits_addend, negative for a refund
}

func (s *Service) shouldRateLimit(ctx context.Context, req *pb.RateLimitRequest, a *answer) (*pb.RateLimitResponse, error) {
	if req.GetDomain() == "" {
		return nil, errEmptyDomain
	}
	if len(req.GetDescriptors()) == 0 {
		return nil, errEmptyDescriptors
	}
	if len(req.GetDescriptors()) > MaxDescriptors {
		return nil, status.Errorf(codes.InvalidArgument, "at most %d descriptors in one request", MaxDescriptors)
	}
	v := s.cur.Load()
	cfg := v.cfg
	domain := req.GetDomain()
	a.reset(len(req.Descriptors))
	checks, keys := a.checks, a.keys
	var replacing map[string]bool // made when a rule replaces another
	for i, d := range req.Descriptors {
		c := &checks[i]
		c.hitIndex = -1
		c.hits = hitsAddend(req, d)
		if !cfg.known(domain) {
			continue
		}
		if o := d.GetLimit(); o != nil {
			// A limit sent by Envoy replaces the configuration's, keyed by
			// the descriptor itself; never shadow_mode (as envoyproxy/ratelimit).
			unit := pb.RateLimitResponse_RateLimit_Unit(o.GetUnit())
			per, ok := unitPeriods[unit]
			if !ok {
				return nil, status.Errorf(codes.InvalidArgument, "descriptor %d: limit override has no valid unit", i)
			}
			if m := o.GetUnitMultiplier(); m != nil && m.GetValue() > 1 {
				per *= time.Duration(m.GetValue())
				if per > MaxPeriod {
					return nil, status.Errorf(codes.InvalidArgument, "descriptor %d: limit override period above %s", i, MaxPeriod)
				}
			}
			c.rule = &Rule{FullKey: "override", Unit: unit, RequestsPerUnit: o.GetRequestsPerUnit(), Period: per}
			vals := make([]string, len(d.Entries))
			for j, e := range d.Entries {
				vals[j] = e.GetValue()
			}
			keys[i] = KeyFor(domain, d.Entries, vals, Fixed)
		} else if m, ok := cfg.lookup(domain, d.GetEntries(), a.vals); ok {
			c.rule = m.Rule
			keys[i] = KeyFor(domain, d.Entries, m.Values, m.Rule.Algorithm)
			a.vals = m.Values // kept, grown or not, for the next descriptor and call
		}
		if c.rule == nil {
			continue
		}
		for _, r := range c.rule.Replaces {
			if replacing == nil {
				replacing = map[string]bool{}
			}
			replacing[r] = true
		}
		if c.rule.Unlimited {
			c.unlimited, c.rule = true, nil
		}
	}
	hits := a.hits
	for i := range checks {
		c := &checks[i]
		if c.rule != nil && c.rule.Name != "" && replacing[c.rule.Name] {
			c.rule, c.replaced = nil, true // replaced: neither charged nor reported
		}
		if c.rule == nil {
			continue
		}
		if c.rule.RequestsPerUnit == 0 {
			continue // answered without the store: nothing is ever allowed
		}
		c.hitIndex = len(hits)
		hits = append(hits, Hit{Key: keys[i], Algorithm: c.rule.Algorithm, Limit: int64(c.rule.RequestsPerUnit),
			Burst: c.rule.Burst, Period: c.rule.Period, Hits: c.hits, Audit: c.rule.Audit})
	}
	a.hits = hits
	var results []Result
	if len(hits) > 0 {
		var err error
		if ls, ok := s.store.(*LocalStore); ok {
			if cap(a.res) < len(hits) {
				a.res = make([]Result, len(hits))
			}
			a.res = a.res[:len(hits)]
			clear(a.res)
			results, err = ls.hitInto(ctx, hits, a.res)
		} else {
			results, err = s.store.Hit(ctx, hits)
		}
		if err != nil {
			if st, ok := status.FromError(err); ok && st.Code() != codes.Unknown {
				return nil, err
			}
			return nil, status.Errorf(codes.Unavailable, "cellserver: %v", err)
		}
		if len(results) != len(hits) {
			return nil, status.Errorf(codes.Internal, "store answered %d results for %d hits", len(results), len(hits))
		}
	}
	resp := &a.resp
	resp.Statuses = a.ptrs
	var minStatus *pb.RateLimitResponse_DescriptorStatus
	minRemaining := uint32(math.MaxUint32)
	var failed, failedQuota, quota int
	for i := range checks {
		c := &checks[i]
		switch {
		case c.unlimited:
			a.sts[i].Code, a.sts[i].LimitRemaining = pb.RateLimitResponse_OK, math.MaxUint32
			resp.Statuses[i] = &a.sts[i]
			continue
		case c.rule == nil:
			a.sts[i].Code = pb.RateLimitResponse_OK
			resp.Statuses[i] = &a.sts[i]
			continue
		}
		var r Result
		if c.hitIndex >= 0 {
			r = results[c.hitIndex]
		} else { // requests_per_unit 0
			r = Result{Limited: c.hits > 0}
		}
		if r.ResetAfter <= 0 && c.rule.Algorithm == Fixed {
			// No counter (requests_per_unit 0, or a read of a key that
			// does not exist): the window still ends, as envoyproxy/ratelimit says.
			r.ResetAfter = untilWindowEnd(s.clock(), c.rule.Period)
		}
		lim := &a.lims[i]
		lim.Name, lim.RequestsPerUnit, lim.Unit = c.rule.Name, c.rule.RequestsPerUnit, c.rule.Unit
		dur := &a.durs[i]
		setResetDuration(dur, r.ResetAfter, c.rule)
		st := &a.sts[i]
		st.Code, st.CurrentLimit, st.DurationUntilReset = pb.RateLimitResponse_OK, lim, dur
		if !r.Limited {
			st.LimitRemaining = clampU32(r.Remaining)
		}
		if s.withHdr && st.LimitRemaining < minRemaining {
			minStatus, minRemaining = st, st.LimitRemaining
		}
		if r.Limited {
			c.limited = true
			if !c.rule.ShadowMode { // shadow_mode: counted, never enforced
				st.Code = pb.RateLimitResponse_OVER_LIMIT
				if c.rule.QuotaMode {
					failedQuota++
				} else {
					failed++
					minStatus, minRemaining = st, 0
				}
			}
		}
		if c.rule.QuotaMode {
			quota++
		}
		resp.Statuses[i] = st
	}
	resp.OverallCode = pb.RateLimitResponse_OK
	if failed > 0 || (quota > 0 && quota == failedQuota) {
		resp.OverallCode = pb.RateLimitResponse_OVER_LIMIT
	}
	s.count(v, domain, checks)
	if s.withHdr && minStatus != nil {
		resp.ResponseHeadersToAdd = []*core.HeaderValue{
			{Key: s.headers.Limit, Value: strconv.FormatUint(uint64(minStatus.CurrentLimit.RequestsPerUnit), 10)},
			{Key: s.headers.Remaining, Value: strconv.FormatUint(uint64(minStatus.LimitRemaining), 10)},
			{Key: s.headers.Reset, Value: strconv.FormatInt(minStatus.DurationUntilReset.GetSeconds(), 10)},
		}
	}
	return resp, nil
}

// count adds the descriptors of a request answered without error to the
// counts of their domain and of their detailed_metric rules.
func (s *Service) count(v *view, domain string, checks []limitCheck) {
	dc := v.domains[domain]
	if dc == nil {
		s.unknownDomain.Add(uint64(len(checks)))
		s.noRule.Add(uint64(len(checks)))
		return
	}
	for i := range checks {
		c := &checks[i]
		var o outcome
		switch {
		case c.unlimited:
			o = unlimited
		case c.replaced:
			o = replaced
		case c.rule == nil:
			s.noRule.Add(1)
			o = noRule
		case c.limited && c.rule.ShadowMode:
			s.shadowOver.Add(1)
			o = shadowOverLimit
		case c.limited:
			o = overLimit
		default:
			o = withinLimit
		}
		dc[o].Add(1)
		if c.rule != nil && c.rule.DetailedMetric {
			if r := v.rules[c.rule]; r != nil {
				r.counts[o].Add(1)
			}
		}
	}
}

// hitsAddend is envoyproxy/ratelimit's GetHitsAddends: the descriptor's
// hits_addend when set (0 included: only read), else the request's, with 0
// meaning 1. is_negative_hits makes it a refund.
func hitsAddend(req *pb.RateLimitRequest, d *rlv3.RateLimitDescriptor) int64 {
	var n uint64
	if h := d.GetHitsAddend(); h != nil {
		n = h.GetValue()
	} else {
		n = max(1, uint64(req.GetHitsAddend()))
	}
	if n > math.MaxInt64 {
		n = math.MaxInt64
	}
	if d.GetIsNegativeHits() {
		return -int64(n)
	}
	return int64(n)
}

// setResetDuration sets dst to duration_until_reset: whole seconds rounded up for a
// rule of whole seconds (envoyproxy/ratelimit reports seconds), else
// milliseconds.
func setResetDuration(dst *durationpb.Duration, d time.Duration, r *Rule) {
	if r.Period%time.Second == 0 {
		d = (d + time.Second - 1) / time.Second * time.Second
	}
	// durationpb.New's fields, without its allocation.
	nanos := d.Nanoseconds()
	dst.Seconds, dst.Nanos = nanos/1e9, int32(nanos%1e9)
}

// untilWindowEnd is the time from now to the end of the fixed window of
// period that holds now (windows aligned to the Unix epoch).
func untilWindowEnd(now time.Time, period time.Duration) time.Duration {
	ns := now.UnixNano()
	return period - time.Duration(ns%int64(period))
}

func clampU32(n int64) uint32 {
	if n < 0 {
		return 0
	}
	if n > math.MaxUint32 {
		return math.MaxUint32
	}
	return uint32(n)
}

// KeyPrefix starts every key the Envoy front door writes.
const KeyPrefix = "rls:"

// keyEscaper makes the parts of a key unambiguous and keeps callers from
// choosing a cluster hash tag: ':' separates parts, '=' a key from its
// value, '|' the algorithm, and '{' '}' would be a hash tag.
var keyEscaper = strings.NewReplacer("%", "%25", ":", "%3A", "=", "%3D", "|", "%7C", "{", "%7B", "}", "%7D")

// KeyFor is the counter key of a descriptor:
// rls:<domain>:<key1>=<value1>:<key2>=<value2>... with '%', ':', '=', '|',
// '{' and '}' percent-encoded in every part, and "|<algorithm>" appended for
// an algorithm other than fixed (a key holds one kind of limiter). values
// are the values to key by (Match.Values).
func KeyFor(domain string, entries []*rlv3.RateLimitDescriptor_Entry, values []string, a Algorithm) string {
	var buf [128]byte // a key of one or two descriptors entries: one allocation, the string
	b := append(buf[:0], KeyPrefix...)
	b = append(b, keyEscaper.Replace(domain)...)
	for i, e := range entries {
		b = append(b, ':')
		b = append(b, keyEscaper.Replace(e.GetKey())...)
		b = append(b, '=')
		b = append(b, keyEscaper.Replace(values[i])...)
	}
	if a != Fixed {
		b = append(b, '|')
		b = append(b, a.String()...)
	}
	return string(b)
}
