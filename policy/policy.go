package policy

import (
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/cellserver/cellserver/gcra"
	"github.com/cellserver/cellserver/glob"
)

// Limits of a policy file. Each is checked by Parse and reported like any
// other problem.
const (
	// MaxFileBytes is the largest policy file Parse reads: 4 MiB.
	MaxFileBytes = 4 << 20
	// MaxPolicies is the most policies one file declares.
	MaxPolicies = 1000
	// MaxOverrides is the most overrides one policy holds (a call tries
	// them in order: see ParamsFor for how a miss is kept cheap).
	MaxOverrides = 100
	// MaxMembers is the most limits a hierarchy applies, nested
	// hierarchies flattened: one CL.APPLY locks and decides that many keys.
	MaxMembers = 16
	// MaxNameLen is the longest policy name, in bytes.
	MaxNameLen = 64
	// MaxPatternLen is the longest override glob or key template, in bytes.
	MaxPatternLen = 512
	// MaxAuditMaxLen is the largest audit_maxlen: at about 100 bytes an
	// entry, a billion entries is 100 GB, past any sensible maxmemory.
	MaxAuditMaxLen = 1_000_000_000
)

// The audit defaults (see AuditMode).
const (
	// DefaultAuditMaxLen is audit_maxlen's default: the stream is
	// trimmed to about this many entries, as XADD MAXLEN ~ trims.
	DefaultAuditMaxLen = 100000
	// DefaultAuditPrefix makes audit_stream's default, audit:<policy>.
	DefaultAuditPrefix = "audit:"
)

// AuditMode says which of a policy's decisions CL.APPLY appends to the
// policy's audit stream (audit: off, limited or all in the file).
type AuditMode uint8

// The audit modes.
const (
	// AuditOff appends nothing (the default).
	AuditOff AuditMode = iota
	// AuditLimited appends the refusals: limited, and shadow_limited (a
	// refusal of a shadow policy, which replied allowed).
	AuditLimited
	// AuditAll appends every decision.
	AuditAll
)

var auditNames = []string{AuditOff: "off", AuditLimited: "limited", AuditAll: "all"}

// String returns the name the policy file uses.
func (m AuditMode) String() string {
	if int(m) < len(auditNames) {
		return auditNames[m]
	}
	return "audit(" + strconv.Itoa(int(m)) + ")"
}

// Audits reports whether a decision that refused (limited, a shadow
// policy's refusal included) is appended in mode m.
func (m AuditMode) Audits(limited bool) bool {
	return m == AuditAll || m == AuditLimited && limited
}

// KeyVar is the placeholder a key template replaces with the key CL.APPLY
// was called with.
const KeyVar = "${key}"

// Algorithm is the limiter a policy applies.
type Algorithm uint8

// The algorithms, one per limiter command.
const (
	Hierarchy   Algorithm = iota // a list of member policies (CL.ALL)
	GCRA                         // CL.THROTTLE
	Fixed                        // CL.FIXED
	Sliding                      // CL.SLIDING
	SlidingLog                   // CL.SLIDINGLOG
	Concurrency                  // CL.ACQUIRE
)

var algoNames = []string{Hierarchy: "all", GCRA: "gcra", Fixed: "fixed", Sliding: "sliding", SlidingLog: "sliding_log", Concurrency: "concurrency"}

// String returns the name the policy file uses.
func (a Algorithm) String() string {
	if int(a) < len(algoNames) {
		return algoNames[a]
	}
	return "algorithm(" + strconv.Itoa(int(a)) + ")"
}

// Params are an algorithm's numbers. Which fields apply depends on the
// algorithm: GCRA uses Burst, Count and Period (CL.THROTTLE's max_burst,
// count and period); Fixed, Sliding and SlidingLog use Limit and Period;
// Concurrency uses Limit and Period as the lease length.
type Params struct {
	Burst  int64
	Count  int64
	Limit  int64
	Period time.Duration // ns; the lease for Concurrency
}

// Override replaces a policy's parameters for the keys that match a glob.
type Override struct {
	Match  []byte // a Redis glob (KEYS's syntax)
	Params Params // the policy's parameters with the override's applied
	Line   int    // in the policy file

	lits glob.Literals // Match's literal ends (Parse sets them)
}

// matches reports whether key matches o's glob, as match (the full glob
// matcher) says. A key without the glob's literal prefix and suffix is
// refused without calling match, and a glob that is all literal is
// compared with the key directly.
func (o *Override) matches(key []byte, match func(pattern, key []byte) bool) bool {
	l := &o.lits
	if len(key) < len(l.Prefix)+len(l.Suffix) || string(key[:len(l.Prefix)]) != l.Prefix ||
		string(key[len(key)-len(l.Suffix):]) != l.Suffix {
		return false
	}
	if l.Exact {
		return len(key) == len(l.Prefix)
	}
	return match(o.Match, key)
}

// Member is one limit of a hierarchy: a policy that is not a hierarchy,
// applied to the key Key makes of the call's key.
type Member struct {
	Policy *Policy
	Key    Template
}

// Template makes a key from the key CL.APPLY was called with: every
// "${key}" in it is replaced by that key; a template without one names a
// fixed key (e.g. "global:api").
type Template string

// Expand appends the key t makes of key to dst and returns it.
func (t Template) Expand(dst, key []byte) []byte {
	s := string(t)
	for {
		i := strings.Index(s, KeyVar)
		if i < 0 {
			return append(dst, s...)
		}
		dst = append(dst, s[:i]...)
		dst = append(dst, key...)
		s = s[i+len(KeyVar):]
	}
}

// Counts are a policy's decisions since the server started: allowed,
// refused, and refused by a shadow policy or companion (which replied
// allowed). Safe for concurrent use; a reload carries a name's counts over.
type Counts struct {
	Allowed, Limited, ShadowLimited atomic.Int64
	// The entries appended to the policy's audit stream, and those
	// dropped: the key held another type, maxmemory (noeviction) was
	// reached, or the stream's last ID was the greatest possible.
	AuditAppended, AuditWrongType, AuditOOM, AuditIDExhausted atomic.Int64
}

// Policy is one named policy. A Policy is immutable once Parse returned
// it (its Counts excepted) and safe for concurrent use.
type Policy struct {
	Name      string
	Algorithm Algorithm // Hierarchy for a list of members
	Params    Params    // not for a hierarchy
	Overrides []Override
	// Members are a hierarchy's limits, nested hierarchies flattened
	// (their key templates composed), in the file's order.
	Members []Member
	// Shadow: the policy is evaluated and counted but never refuses.
	Shadow bool
	// Companion, when set, is evaluated beside this policy on every call,
	// on the key CompanionKey makes; only its verdict is counted.
	Companion    *Policy
	CompanionKey Template
	Description  string
	Line         int // where the policy starts in the file
	Counts       *Counts

	// Audit says which decisions of CL.APPLY naming this policy are
	// appended to the stream AuditStream (a key, default
	// "audit:<name>"), trimmed to about AuditMaxLen entries; AuditSample
	// (0 < s <= 1, default 1) is the fraction of them kept (AuditKeep).
	Audit       AuditMode
	AuditStream string
	AuditMaxLen int64
	AuditSample float64
	auditKey    []byte // AuditStream's bytes (AuditKey)
	// auditCut is AuditSample as a threshold on a uniform uint64 (0 when
	// AuditSample is 1: every draw kept).
	auditCut uint64

	def string // canonical definition (String)
	// first has a bit per byte some override's glob starts with (a
	// literal prefix); firstOK: every glob has one, so a key starting
	// with another byte matches none.
	first   [4]uint64
	firstOK bool
}

// ParamsFor returns the parameters that apply to key: those of the first
// override whose glob matches it (match is the glob matcher, e.g. KEYS's),
// else the policy's own. The globs' literal prefixes and suffixes, found
// by Parse, decide most keys that match none without running a glob:
// when every glob starts with a literal byte, a key whose first byte
// starts none is decided by one lookup, whatever the number of overrides.
func (p *Policy) ParamsFor(key []byte, match func(pattern, key []byte) bool) Params {
	if p.firstOK && len(key) > 0 && p.first[key[0]>>6]&(1<<(key[0]&63)) == 0 {
		return p.Params
	}
	for i := range p.Overrides {
		if p.Overrides[i].matches(key, match) {
			return p.Overrides[i].Params
		}
	}
	return p.Params
}

// indexOverrides finds each override's literal ends and the bytes the
// globs start with (ParamsFor).
func (p *Policy) indexOverrides() {
	p.firstOK = len(p.Overrides) > 0
	for i := range p.Overrides {
		o := &p.Overrides[i]
		o.lits = glob.LiteralsOf(o.Match)
		if o.lits.Prefix == "" {
			p.firstOK = false
			continue
		}
		c := o.lits.Prefix[0]
		p.first[c>>6] |= 1 << (c & 63)
	}
}

// AuditKeep reports whether the audited decision whose random draw is r
// (uniform over uint64) is kept by AuditSample: r below AuditSample times
// 2^64. With AuditSample 1 every decision is kept and r is not looked at.
func (p *Policy) AuditKeep(r uint64) bool { return p.auditCut == 0 || r < p.auditCut }

// AuditKey returns the audit stream's key, AuditStream's bytes, nil when
// p audits nothing. The caller must not modify it.
func (p *Policy) AuditKey() []byte {
	if p.Audit == AuditOff {
		return nil
	}
	return p.auditKey
}

// AuditSampled reports whether AuditKeep needs a draw (AuditSample < 1).
func (p *Policy) AuditSampled() bool { return p.auditCut != 0 }

// setAuditCut sets auditCut from AuditSample.
func (p *Policy) setAuditCut() {
	p.auditKey = []byte(p.AuditStream)
	p.auditCut = 0
	if p.AuditSample < 1 {
		// 2^64 * s, s in (0, 1): at least 1, so that a tiny s still
		// keeps a draw of 0.
		p.auditCut = max(uint64(p.AuditSample*(1<<63))*2, 1)
	}
}

// String returns the policy's definition, canonical: two policies with
// the same String behave the same (Diff compares them so).
func (p *Policy) String() string { return p.def }

func (p *Policy) buildDef() {
	var b strings.Builder
	b.WriteString("algorithm=" + p.Algorithm.String())
	if p.Algorithm != Hierarchy {
		b.WriteString(" " + p.Algorithm.paramString(p.Params))
	}
	for _, o := range p.Overrides {
		fmt.Fprintf(&b, " override(match=%q %s)", o.Match, p.Algorithm.paramString(o.Params))
	}
	for _, m := range p.Members {
		fmt.Fprintf(&b, " member(policy=%s key=%q %s)", m.Policy.Name, string(m.Key), m.Policy.def)
	}
	if p.Shadow {
		b.WriteString(" shadow=true")
	}
	if p.Companion != nil {
		fmt.Fprintf(&b, " shadow_companion(policy=%s key=%q %s)", p.Companion.Name, string(p.CompanionKey), p.Companion.def)
	}
	if p.Audit != AuditOff {
		for _, f := range p.AuditFields()[:4] {
			b.WriteString(" " + f[0] + "=" + f[1])
		}
	}
	p.def = b.String()
}

// ParamFields returns the parameter names and values of ps as the policy
// file writes them, for algorithm a (none for a hierarchy).
func (a Algorithm) ParamFields(ps Params) [][2]string {
	d := func(x time.Duration) string { return FormatDuration(x) }
	switch a {
	case GCRA:
		return [][2]string{{"burst", strconv.FormatInt(ps.Burst, 10)}, {"count", strconv.FormatInt(ps.Count, 10)}, {"period", d(ps.Period)}}
	case Fixed, Sliding, SlidingLog:
		return [][2]string{{"limit", strconv.FormatInt(ps.Limit, 10)}, {"period", d(ps.Period)}}
	case Concurrency:
		return [][2]string{{"limit", strconv.FormatInt(ps.Limit, 10)}, {"lease", d(ps.Period)}}
	}
	return nil
}

// AuditFields returns the audit fields of p as the policy file writes
// them: audit, audit_stream, audit_maxlen and audit_sample.
func (p *Policy) AuditFields() [][2]string {
	return [][2]string{{"audit", p.Audit.String()}, {"audit_stream", p.AuditStream},
		{"audit_maxlen", strconv.FormatInt(p.AuditMaxLen, 10)},
		{"audit_sample", strconv.FormatFloat(p.AuditSample, 'g', -1, 64)}}
}

func (a Algorithm) paramString(ps Params) string {
	var parts []string
	for _, f := range a.ParamFields(ps) {
		parts = append(parts, f[0]+"="+f[1])
	}
	return strings.Join(parts, " ")
}

// FormatDuration writes d as the policy file may: whole seconds as "60s",
// else Go's form ("1.5s", "250ms").
func FormatDuration(d time.Duration) string {
	if d%time.Second == 0 {
		return strconv.FormatInt(int64(d/time.Second), 10) + "s"
	}
	return d.String()
}

// Set is the policies of one file. A Set is immutable and safe for
// concurrent use; a reload replaces the whole Set.
type Set struct {
	byName map[string]*Policy
	list   []*Policy // by name
}

// Lookup returns the policy called name, or nil.
func (s *Set) Lookup(name []byte) *Policy {
	if s == nil {
		return nil
	}
	return s.byName[string(name)]
}

// Policies returns the policies sorted by name. The caller must not
// modify the slice.
func (s *Set) Policies() []*Policy {
	if s == nil {
		return nil
	}
	return s.list
}

// Len returns the number of policies.
func (s *Set) Len() int {
	if s == nil {
		return 0
	}
	return len(s.list)
}

// Adopt gives every policy of s whose name old also has old's Counts, so
// a reload keeps each name's counters running.
func (s *Set) Adopt(old *Set) {
	if s == nil || old == nil {
		return
	}
	for _, p := range s.list {
		if q := old.byName[p.Name]; q != nil {
			p.Counts = q.Counts
		}
	}
}

// Changes are the names a reload added, removed and changed (a changed
// policy has another definition: String differs). Each list is sorted.
type Changes struct {
	Added, Removed, Changed []string
	Unchanged               int
}

// Diff returns what replacing old by s changes.
func Diff(old, s *Set) Changes {
	var c Changes
	for _, p := range s.Policies() {
		q := old.Lookup([]byte(p.Name))
		switch {
		case q == nil:
			c.Added = append(c.Added, p.Name)
		case q.def != p.def:
			c.Changed = append(c.Changed, p.Name)
		default:
			c.Unchanged++
		}
	}
	for _, q := range old.Policies() {
		if s.Lookup([]byte(q.Name)) == nil {
			c.Removed = append(c.Removed, q.Name)
		}
	}
	return c
}

// Problem is one thing wrong in a policy file.
type Problem struct {
	Line   int    // 0 when not known
	Policy string // "" outside a policy
	Msg    string
}

func (p Problem) String() string {
	var b strings.Builder
	if p.Line > 0 {
		b.WriteString("line " + strconv.Itoa(p.Line) + ": ")
	}
	if p.Policy != "" {
		b.WriteString("policy " + strconv.Quote(p.Policy) + ": ")
	}
	b.WriteString(p.Msg)
	return b.String()
}

// ErrInvalid is what every error of Parse wraps (errors.Is).
var ErrInvalid = errors.New("policy: invalid policy file")

// Error lists every problem Parse found in a file, in line order. Its text
// is one line (it is also a Redis error reply).
type Error struct {
	Problems []Problem
}

func (e *Error) Error() string {
	parts := make([]string, len(e.Problems))
	for i, p := range e.Problems {
		parts[i] = p.String()
	}
	n := len(e.Problems)
	word := "problems"
	if n == 1 {
		word = "problem"
	}
	return fmt.Sprintf("policy: invalid policy file, %d %s: %s", n, word, strings.Join(parts, "; "))
}

// Unwrap makes errors.Is(err, ErrInvalid) true.
func (e *Error) Unwrap() error { return ErrInvalid }

func sortProblems(ps []Problem) {
	sort.SliceStable(ps, func(i, j int) bool { return ps[i].Line < ps[j].Line })
}

// validName: letters, digits, '_', '-' and '.', so a name is safe in an
// INFO line and a Prometheus label.
func validName(s string) bool {
	if s == "" || len(s) > MaxNameLen {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '-' || c == '.') {
			return false
		}
	}
	return true
}

func sortPolicies(l []*Policy) {
	sort.Slice(l, func(i, j int) bool { return l[i].Name < l[j].Name })
}

// GCRAParams returns ps as CL.THROTTLE's parameters (quantity q): a
// period of whole seconds in Period, as CL.THROTTLE takes it, else in
// PeriodNS.
func GCRAParams(ps Params, q int64) gcra.Params {
	g := gcra.Params{MaxBurst: ps.Burst, Count: ps.Count, Quantity: q}
	if ps.Period%time.Second == 0 {
		g.Period = int64(ps.Period / time.Second)
	} else {
		g.PeriodNS = int64(ps.Period)
	}
	return g
}
