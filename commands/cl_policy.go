package commands

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/cellserver/cellserver/glob"
	"github.com/cellserver/cellserver/keyspace"
	"github.com/cellserver/cellserver/policy"
)

// Policies: CL.APPLY key policy [quantity|token] [MS] applies a named policy
// of the policy file (package policy) to a key and replies as the
// policy's own command would; CL.POLICY LIST|GET|RELOAD shows and reloads
// them.
//
// # Snapshot
//
// The policies are one *policy.Set behind an atomic pointer: a reload
// builds and validates a new Set, then swaps it whole, so a call sees the
// old definitions or the new ones, never a mix. A call reads the pointer
// once, when the dispatcher resolves its keys (applyKeys: a hierarchy's
// member keys and a companion's key come from the policy), and decides
// with that Set; inside EXEC every CL.APPLY of the transaction uses the
// Set of the first one.
//
// # State
//
// A policy's state is its limiter's value at the key, the same value the
// direct command keeps (CL.APPLY k gcra-policy and CL.THROTTLE k ... share
// it). A reload never touches the keyspace: every key keeps its state, and
// the next call applies the policy's current parameters to it, exactly as
// the direct command does when called with other arguments.

// policyState is the server's policies.
type policyState struct {
	set  atomic.Pointer[policy.Set] // nil: no policy file
	file string                     // Config.PolicyFile; "" when policies are not from a file
	mu   sync.Mutex                 // serializes reloads
	// loadedAt is when the Set in force was put in force (Unix seconds,
	// the server's clock); reloadFailed: the last reload was refused.
	loadedAt     atomic.Int64
	reloadFailed atomic.Bool
	// rand draws audit_sample's uniform numbers (rand.Uint64; tests pin
	// it).
	rand func() uint64
	// extAudit counts the audit entries of Envoy rate limit rules
	// (Local.SendAudited), all rules together.
	extAudit policy.Counts
	// auditRedos counts the calls run again because their audit
	// stream's lock, out of the lock order, was busy (lazyAudit).
	auditRedos atomic.Int64
}

// Policies returns the policies in force (nil when none were loaded).
func (s *Service) Policies() *policy.Set { return s.pol.set.Load() }

// ErrNoPolicyFile is ReloadPolicies' error when the server was started
// without a policy file.
var ErrNoPolicyFile = errors.New("commands: no policy file (start cellserver with --policies FILE)")

// ReloadPolicies reads the policy file again and, if it is valid, puts
// its policies in force at once (atomically; counters carry over by
// name). An invalid file changes nothing: the error lists every problem
// (a *policy.Error). The outcome is logged either way, with the names
// added, removed and changed. CL.POLICY RELOAD and SIGHUP call it.
func (s *Service) ReloadPolicies() (policy.Changes, error) {
	s.pol.mu.Lock()
	defer s.pol.mu.Unlock()
	if s.pol.file == "" {
		return policy.Changes{}, ErrNoPolicyFile
	}
	src, err := os.ReadFile(s.pol.file)
	if err != nil {
		err = fmt.Errorf("commands: policy reload: %w", err)
	}
	var set *policy.Set
	if err == nil {
		set, err = policy.Parse(src)
	}
	if err == nil {
		err = auditModeErr(s.cluster.on, set)
	}
	if err != nil {
		s.pol.reloadFailed.Store(true)
		s.log.Error("policy reload refused, the policies in force stay", "file", s.pol.file, "err", err)
		return policy.Changes{}, err
	}
	old := s.pol.set.Load()
	set.Adopt(old)
	ch := policy.Diff(old, set)
	s.pol.set.Store(set)
	s.pol.loadedAt.Store(s.clock().Unix())
	s.pol.reloadFailed.Store(false)
	s.log.Info("policies reloaded", "file", s.pol.file, "policies", set.Len(),
		"added", strings.Join(ch.Added, ","), "removed", strings.Join(ch.Removed, ","),
		"changed", strings.Join(ch.Changed, ","), "unchanged", ch.Unchanged)
	return ch, nil
}

// maxKeptPolBuf bounds the buffer of derived keys a client keeps between
// calls (keys may be long: up to the bulk length limit each).
const maxKeptPolBuf = 64 << 10

// applyKeys is CL.APPLY's key resolution (Spec.derive): the call's key,
// then a hierarchy's member keys or a companion's key, made from the
// policy's templates. It pins the policy Set for the call (ctx.polSet)
// and finds the policy (ctx.pol, nil if unknown).
func applyKeys(x *ctx, db *keyspace.DB) {
	if x.polSet == nil {
		x.polSet = x.s.pol.set.Load()
	}
	p := x.polSet.Lookup(x.args[2])
	x.pol = p
	n := 0
	var audit []byte // the audit stream's key, last (cl_audit.go)
	if p != nil {
		n = len(p.Members)
		if p.Companion != nil {
			n = 1
		}
		audit = p.AuditKey()
	}
	if n == 0 {
		x.keys = x.kbuf[:1]
		x.setKey(&x.kbuf[0], db, x.args[1])
		if audit != nil {
			x.keys = x.kbuf[:2]
			x.setAuditKey(&x.kbuf[1], db, p)
			x.auditKey, x.auditRedoable = true, true // cmdApply's single check (auditPrepare)
		}
		return
	}
	cl := x.cl
	buf := cl.scratch.polBuf[:0]
	var ends [policy.MaxMembers]int
	key := x.args[1]
	if p.Companion != nil {
		buf = p.CompanionKey.Expand(buf, key)
		ends[0] = len(buf)
	} else {
		for i := range p.Members {
			buf = p.Members[i].Key.Expand(buf, key)
			ends[i] = len(buf)
		}
	}
	if cap(buf) <= maxKeptPolBuf {
		cl.scratch.polBuf = buf
	} else {
		cl.scratch.polBuf = nil // the keys of this call still point into buf
	}
	x.keys = x.kbuf[:0]
	extra := 0
	if audit != nil {
		extra = 1
	}
	x.growKeys(1 + n + extra)
	x.addKey(db, key)
	start := 0
	for i := range n {
		x.addKey(db, buf[start:ends[i]:ends[i]])
		start = ends[i]
	}
	if audit != nil {
		x.addKey(db, audit)
		x.auditKey = true
	}
}

// CL.APPLY key policy [quantity] [MS]: the policy's command on key, with
// the policy's parameters (an override's for a matching key); for a
// concurrency policy the third argument is the lease's token (required).
// MS: retry_after and reset_after in milliseconds, as the commands' MS (a
// gcra policy's as CL.ALL's CL.THROTTLE ... MS).
func cmdApply(x *ctx) {
	if x.polSet == nil {
		x.errorReply(msgNoPolicies)
		return
	}
	p := x.pol
	if p == nil {
		x.errorReply(errUnknownPolicy(x.args[2]))
		return
	}
	rest, ms := trailingMS(x.args[3:]) // the quantity or token, if any
	if len(rest) > 1 {
		x.errorReply(errWrongArity("cl.apply"))
		return
	}
	var q int64 = 1
	var token []byte
	if p.Algorithm == policy.Concurrency {
		if len(rest) != 1 {
			x.errorReply(msgApplyToken)
			return
		}
		token = rest[0]
	} else if len(rest) == 1 {
		a := rest[0]
		var ok bool
		if p.Algorithm == policy.GCRA || p.Algorithm == policy.Hierarchy {
			if q, ok = parseRustI64(a); !ok {
				x.errorReply(errCellParseInt(a))
				return
			}
		} else if q, ok = parseRedisInt(a); !ok {
			x.errorReply(msgQuantity)
			return
		}
	}
	if p.Algorithm == policy.Hierarchy {
		applyAll(x, p, q, ms)
		return
	}
	key := x.keys[0].key
	var c check
	if msg := c.fromPolicy(p, p.ParamsFor(key, policyGlob), key, q, token); msg != noErr {
		x.errorReply(msg)
		return
	}
	c.ms = ms
	if p.Audit != policy.AuditOff && x.auditRedoable {
		c.audit = p
	}
	now, ok := c.run(x)
	if !ok {
		return
	}
	t := c.t
	count(p.Counts, t.limited, p.Shadow)
	if p.Audit.Audits(t.limited) { // asked here: a call that appends nothing makes no call
		x.audit(p, auditDecision{key: key, limited: t.limited, shadow: p.Shadow,
			remaining: t.remaining, retry: c.retryMS, quantity: q})
	}
	if t.limited && p.Shadow {
		t = shadowTuple(t)
	}
	if p.Companion != nil {
		companion(x, p, q, now)
	}
	x.decided(t.limited, c.key)
	x.tuple(t)
}

// shadowTuple is the reply of a shadow policy that refused: as allowed
// (limited 0, retry_after -1), the rest as decided.
func shadowTuple(t tuple) tuple {
	t.limited, t.retry = false, -1
	return t
}

// count counts a decision in c: allowed, or refused (as shadow_limited
// for a shadow policy, member or companion, which replied allowed).
func count(c *policy.Counts, limited, shadow bool) {
	switch {
	case !limited:
		c.Allowed.Add(1)
	case shadow:
		c.ShadowLimited.Add(1)
	default:
		c.Limited.Add(1)
	}
}

// companion evaluates p's shadow companion on its key (x.keys[1]) with
// quantity q: applied if it admits, counted allowed or shadow_limited,
// never replied. A companion that cannot decide (its key holds another
// kind, or memory is full) is not counted.
func companion(x *ctx, p *policy.Policy, q int64, now int64) {
	cp := p.Companion
	k := &x.keys[1]
	var c check
	if c.fromPolicy(cp, cp.ParamsFor(k.key, policyGlob), k.key, q, nil) != noErr {
		return
	}
	v := k.lookup(floorDiv(now, 1e6))
	if c.decide(v, now, &x.cl.scratch.leases) != noErr || c.expireErr {
		return
	}
	if c.needsRoom(v) && !x.s.ks.CanInsert() {
		return
	}
	c.apply(k, v, now, &x.cl.scratch.leases)
	count(cp.Counts, c.t.limited, true)
}

// applyAll applies hierarchy p: one check per member on its key
// (x.keys[1:]), all admitted or none, through CL.ALL's path (runAll). A
// shadow member never blocks the others. The reply is one tuple: the
// first refusing member's when refused, else the member with the least
// remaining (the first of equals), among enforced members if any. Each
// member's policy counts its own verdict (a refusal as shadow_limited for
// a shadow member or in a shadow hierarchy).
func applyAll(x *ctx, p *policy.Policy, q int64, ms bool) {
	checks := x.cl.scratch.checks[:0]
	for i, m := range p.Members {
		k := x.keys[1+i].key
		checks = append(checks, check{})
		c := &checks[i]
		if msg := c.fromPolicy(m.Policy, m.Policy.ParamsFor(k, policyGlob), k, q, nil); msg != noErr {
			x.errorReply(msg)
			return
		}
		c.shadow, c.ms = m.Policy.Shadow, ms
	}
	if hasDupKey(checks) {
		x.errorReply(msgAllDupKey)
		return
	}
	admitted, limitedKey, ok := runAll(x, checks, x.keys[1:1+len(checks)])
	if !ok {
		return
	}
	best := -1
	for i := range checks {
		c := &checks[i]
		count(c.pol.Counts, c.t.limited, c.shadow || p.Shadow)
		switch {
		case !admitted:
			if best < 0 && c.t.limited && !c.shadow {
				best = i
			}
		case best < 0 || c.shadow != checks[best].shadow && checks[best].shadow || c.shadow == checks[best].shadow && c.t.remaining < checks[best].t.remaining:
			best = i
		}
	}
	t := checks[best].t
	if admitted && t.limited { // a shadow member refused, and every member is shadow
		t = shadowTuple(t)
	}
	if p.Audit != policy.AuditOff {
		retry := int64(-1)
		if !admitted {
			retry = checks[best].retryMS
		}
		x.audit(p, auditDecision{key: x.keys[0].key, limited: !admitted, shadow: p.Shadow,
			remaining: t.remaining, retry: retry, quantity: q})
	}
	switch {
	case admitted:
		p.Counts.Allowed.Add(1)
	case p.Shadow:
		p.Counts.ShadowLimited.Add(1)
		t = shadowTuple(t)
		admitted, limitedKey = true, nil
	default:
		p.Counts.Limited.Add(1)
	}
	x.decided(!admitted, limitedKey)
	x.tuple(t)
}

// policyGlob matches an override's glob as KEYS does (case-sensitive).
func policyGlob(pattern, key []byte) bool { return glob.Match(pattern, key, false) }

// fromPolicy sets c, which must be zero, to policy p's command on key
// with parameters ps, quantity q (and token, for a concurrency policy).
// It returns an error or noErr (the file's validation makes errors
// unlikely: a zero rate cannot pass it).
func (c *check) fromPolicy(p *policy.Policy, ps policy.Params, key []byte, q int64, token []byte) wireErr {
	c.key, c.q, c.pol = key, q, p
	c.limit, c.per = ps.Limit, int64(ps.Period)
	switch p.Algorithm {
	case policy.GCRA:
		c.name, c.kind = "cl.throttle", keyspace.KindGCRA
		c.gp = policy.GCRAParams(ps, q)
	case policy.Fixed:
		c.name, c.kind = "cl.fixed", keyspace.KindFixed
	case policy.Sliding:
		c.name, c.kind = "cl.sliding", keyspace.KindSliding
	case policy.SlidingLog:
		c.name, c.kind = "cl.slidinglog", keyspace.KindLog
		if q < 0 {
			return msgQuantityNeg
		}
	case policy.Concurrency:
		c.name, c.kind, c.token = "cl.acquire", keyspace.KindLeases, token
	default:
		return msgInvalidArgs
	}
	return noErr
}

// CL.POLICY LIST: the names of the policies, sorted.
func cmdPolicyList(x *ctx) {
	set := x.s.pol.set.Load()
	ps := set.Policies()
	x.array(len(ps))
	for _, p := range ps {
		x.bulkStr(p.Name)
	}
}

// CL.POLICY GET name: the policy's effective definition as field/value
// pairs (nested hierarchies flattened, overrides with their full
// parameters).
func cmdPolicyGet(x *ctx) {
	set := x.s.pol.set.Load()
	if set == nil {
		x.errorReply(msgNoPolicies)
		return
	}
	p := set.Lookup(x.args[2])
	if p == nil {
		x.errorReply(errUnknownPolicy(x.args[2]))
		return
	}
	fields := [][2]string{{"name", p.Name}, {"algorithm", p.Algorithm.String()}}
	fields = append(fields, p.Algorithm.ParamFields(p.Params)...)
	fields = append(fields, [2]string{"shadow", map[bool]string{false: "no", true: "yes"}[p.Shadow]})
	if p.Companion != nil {
		fields = append(fields, [2]string{"shadow_companion", p.Companion.Name}, [2]string{"shadow_companion_key", string(p.CompanionKey)})
	}
	if p.Audit != policy.AuditOff {
		fields = append(fields, p.AuditFields()...)
	}
	if p.Description != "" {
		fields = append(fields, [2]string{"description", p.Description})
	}
	n := len(fields) + 1 // overrides or members
	x.mapLen(n)
	for _, f := range fields {
		x.bulkStr(f[0])
		x.bulkStr(f[1])
	}
	if p.Algorithm == policy.Hierarchy {
		x.bulkStr("members")
		x.array(len(p.Members))
		for _, m := range p.Members {
			pf := m.Policy.Algorithm.ParamFields(m.Policy.Params)
			x.mapLen(3 + len(pf))
			x.bulkStr("policy")
			x.bulkStr(m.Policy.Name)
			x.bulkStr("key")
			x.bulkStr(string(m.Key))
			x.bulkStr("algorithm")
			x.bulkStr(m.Policy.Algorithm.String())
			for _, f := range pf {
				x.bulkStr(f[0])
				x.bulkStr(f[1])
			}
		}
		return
	}
	x.bulkStr("overrides")
	x.array(len(p.Overrides))
	for _, o := range p.Overrides {
		pf := p.Algorithm.ParamFields(o.Params)
		x.mapLen(1 + len(pf))
		x.bulkStr("match")
		x.bulkStr(string(o.Match))
		for _, f := range pf {
			x.bulkStr(f[0])
			x.bulkStr(f[1])
		}
	}
}

// CL.POLICY RELOAD: ReloadPolicies; replies OK, or the error listing
// every problem of the file.
func cmdPolicyReload(x *ctx) {
	if _, err := x.s.ReloadPolicies(); err != nil {
		if errors.Is(err, ErrNoPolicyFile) {
			x.errorReply(msgNoPolicyFile)
			return
		}
		x.errorReply(errPolicyReload(err))
		return
	}
	x.status("OK")
}

func cmdPolicyHelp(x *ctx) {
	helpReply(x,
		"CL.POLICY <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
		"LIST",
		"    Return the names of the policies in force.",
		"GET <name>",
		"    Return a policy's effective definition.",
		"RELOAD",
		"    Read the policy file again; an invalid file is refused and the policies in force stay.",
		"HELP",
		"    Print this help.")
}

// policyInfo returns INFO's policies section: the file, how many
// policies are in force, when they were loaded (Unix seconds) and whether
// the last reload was refused, then one line per policy, as Redis's
// cmdstat lines.
func (s *Service) policyInfo() []string {
	set := s.pol.set.Load()
	lines := make([]string, 0, 4+set.Len())
	if set != nil {
		lines = append(lines, "policies_file:"+s.pol.file,
			fmt.Sprintf("policies_loaded:%d", set.Len()),
			fmt.Sprintf("policies_last_load_time:%d", s.pol.loadedAt.Load()),
			"policies_last_reload_status:"+map[bool]string{false: "ok", true: "err"}[s.pol.reloadFailed.Load()])
	}
	for _, p := range policyStatsOf(set) {
		lines = append(lines, fmt.Sprintf("policy_%s:allowed=%d,limited=%d,shadow_limited=%d",
			p.Name, p.Allowed, p.Limited, p.ShadowLimited))
	}
	for _, p := range set.Policies() {
		if p.Audit == policy.AuditOff {
			continue
		}
		c := p.Counts
		lines = append(lines, fmt.Sprintf("policy_audit_%s:stream=%s,appended=%d,dropped_wrongtype=%d,dropped_oom=%d,dropped_id=%d",
			p.Name, p.AuditStream, c.AuditAppended.Load(), c.AuditWrongType.Load(), c.AuditOOM.Load(), c.AuditIDExhausted.Load()))
	}
	if c := &s.pol.extAudit; c.AuditAppended.Load()+c.AuditWrongType.Load()+c.AuditOOM.Load()+c.AuditIDExhausted.Load() > 0 {
		lines = append(lines, fmt.Sprintf("rls_audit:appended=%d,dropped_wrongtype=%d,dropped_oom=%d,dropped_id=%d",
			c.AuditAppended.Load(), c.AuditWrongType.Load(), c.AuditOOM.Load(), c.AuditIDExhausted.Load()))
	}
	if n := s.pol.auditRedos.Load(); n > 0 {
		lines = append(lines, fmt.Sprintf("audit_calls_rerun:%d", n))
	}
	return lines
}

// PolicyStats is one policy's decisions (Stats.Policies), and its audit
// entries appended and dropped (all 0 for a policy that audits nothing).
type PolicyStats struct {
	Name                            string
	Allowed, Limited, ShadowLimited int64
	Audit                           bool // the policy audits
	AuditAppended                   int64
	AuditWrongType, AuditOOM        int64
	AuditIDExhausted                int64
}

func (s *Service) policyStats() []PolicyStats { return policyStatsOf(s.pol.set.Load()) }

// policyStatsOf reads the counts of set's policies, by name.
func policyStatsOf(set *policy.Set) []PolicyStats {
	ps := set.Policies()
	out := make([]PolicyStats, 0, len(ps))
	for _, p := range ps {
		c := p.Counts
		out = append(out, PolicyStats{Name: p.Name, Allowed: c.Allowed.Load(), Limited: c.Limited.Load(),
			ShadowLimited: c.ShadowLimited.Load(), Audit: p.Audit != policy.AuditOff,
			AuditAppended: c.AuditAppended.Load(), AuditWrongType: c.AuditWrongType.Load(),
			AuditOOM: c.AuditOOM.Load(), AuditIDExhausted: c.AuditIDExhausted.Load()})
	}
	return out
}
