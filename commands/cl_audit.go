package commands

import (
	"strconv"
	"unsafe"

	"github.com/cellserver/cellserver/keyspace"
	"github.com/cellserver/cellserver/policy"
	"github.com/cellserver/cellserver/stream"
)

// Audit: a policy with audit: limited or all (package policy) has CL.APPLY
// append one entry per audited decision to the policy's audit stream, a
// stream key (AuditStream, default "audit:<policy>"), trimmed as XADD
// MAXLEN ~ AuditMaxLen trims. docs/audit.md is the user's page.
//
// # Atomic with the decision
//
// applyKeys adds the audit stream's key as the call's last key (so that
// ACL checks it, and EXEC locks it). The entry is appended under the
// same locks as the decision is stored, and both changes reach the
// keyspace's journal (persistence's change log, the replication stream,
// WATCH, client-side caching) from one command with the locks held, the
// decision first. No other command's change to the decided keys can come
// between them.
//
// Taking the audit stream's lock on every call would cost a call that
// appends nothing (audit: limited's allowed calls) a second shard lock,
// so the dispatcher leaves it to the audit when it can (lazyAudit), and
// releases it after the command if the audit took it:
//
//   - CL.APPLY on a policy of one key (auditRedoable) decides under the
//     key's lock alone; once the decision is known, and before it is
//     stored, auditPrepare draws the sample and, for an entry it keeps,
//     tries the audit stream's lock. If that lock is busy, it waits for
//     it when the stream's shard comes after the key's in the lock order
//     (taking it last keeps the order); else the call stops, having
//     changed and replied nothing, and runLocked runs it again with both
//     locks taken in order (counted: policyState.auditRedos). A lock
//     taken out of order only when free cannot deadlock.
//   - Other calls (hierarchies, companions, the Envoy front door's
//     rules) leave the lock to the audit only when the stream's shard
//     comes after every decided key's: audit takes it last.
//
// Otherwise (a shard shared with a decided key, inside EXEC, for a
// NOLOOP client, under sync-replicas, with persistence's batches) the key
// is locked up front, whatever the decision.

// # Never at the decision's expense
//
// The entry is appended after the decision is made and stored, and
// nothing about the entry can undo or refuse it: an audit key holding
// another type, maxmemory's noeviction over the cap, or a stream whose
// last ID is the greatest possible drops the entry and counts it
// (policy.Counts, INFO's policy_audit_<name> line, the metric
// cellserver_policy_audit_entries_total).
//
// # The entry
//
// Its ID is what XADD * would give at the command's clock reading (the
// injected clock, in ms): <ms>-0, or the last ID's successor when the
// stream's last ID is not older. Its fields, in this order: key, policy,
// decision (allowed, limited, shadow_limited), remaining, retry_after_ms
// (-1 when allowed), quantity, client (the CLIENT SETNAME name, else the
// address ip:port).
//
// # Sampling
//
// With audit_sample s < 1 an audited decision is kept when a uniform
// 64-bit draw (math/rand/v2's per-thread generator, a few ns, no lock) is
// below s * 2^64 (policy.Policy.AuditKeep): each decision is kept
// independently with probability s. With s = 1 nothing is drawn.

// auditFields is the number of fields of an audit entry.
const auditFields = 7

// auditScratch is a client's cache for its audit entries: the hash of
// keyPol's audit stream's key in keyspace keyKS (setAuditKey).
type auditScratch struct {
	keyPol  *policy.Policy
	keyKS   *keyspace.Keyspace
	keyHash uint64
}

// setAuditKey sets k to the key of p's audit stream in db, its hash kept
// per client while its calls name the same policy (EXEC's pre-resolved
// keys and cluster mode go through setKey).
func (x *ctx) setAuditKey(k *rkey, db *keyspace.DB, p *policy.Policy) {
	key := p.AuditKey()
	if x.pre != nil || x.s.cluster.on {
		x.setKey(k, db, key)
		return
	}
	sc := &x.cl.scratch.audit
	if sc.keyPol != p || sc.keyKS != x.s.ks {
		sc.keyPol, sc.keyKS, sc.keyHash = p, x.s.ks, x.s.ks.Hash(key)
	}
	k.key, k.hash, k.sh, k.slot = key, sc.keyHash, db.ShardHash(sc.keyHash), 0
}

// auditNames are an audit entry's field names, in order (the entry is
// appended with stream.AppendNamedSized, its names being these slices).
var auditNames = stream.NewNames("key", "policy", "decision", "remaining", "retry_after_ms", "quantity", "client")

// auditSmall holds the decimal forms of -1 to 99 (auditSmall[v+1]): the
// usual retry_after_ms of an allowed call, quantities, small remainders.
var auditSmall = func() (t [101][]byte) {
	for i := range t {
		t[i] = strconv.AppendInt(nil, int64(i-1), 10)
	}
	return t
}()

// The decision field of an audit entry.
var (
	auditAllowed       = []byte("allowed")
	auditLimited       = []byte("limited")
	auditShadowLimited = []byte("shadow_limited")
)

// decisionName is the decision field of an audit entry.
func decisionName(limited, shadow bool) []byte {
	switch {
	case !limited:
		return auditAllowed
	case shadow:
		return auditShadowLimited
	}
	return auditLimited
}

// auditDecision is one decision as an audit entry records it.
type auditDecision struct {
	key              []byte
	limited, shadow  bool // shadow: a refusal replied as allowed
	remaining, retry int64
	quantity         int64
}

// The states of ctx.auditDraw.
const (
	auditUnknown int8 = iota // not drawn yet
	auditKept
	auditSkipped
)

// auditKeeps reports whether the entry of a decision of p (limited: a
// refusal) is kept, by p's audit mode and sample. audit_sample is drawn
// once per command (ctx.auditDraw), so that auditPrepare and audit, and
// a command run again (runLocked), agree; the mode is asked each time (a
// decision made again can differ).
func (x *ctx) auditKeeps(p *policy.Policy, limited bool) bool {
	if !p.Audit.Audits(limited) {
		return false
	}
	if !p.AuditSampled() {
		return true
	}
	if x.auditDraw == auditUnknown {
		x.auditDraw = auditSkipped
		if p.AuditKeep(x.s.pol.rand()) {
			x.auditDraw = auditKept
		}
	}
	return x.auditDraw == auditKept
}

// auditPrepare is called by a redoable command (ctx.auditRedoable) once
// its decision is known and before it is stored: when runLocked left the
// audit stream's lock to the audit (lazyAudit) and the entry is kept
// (auditKeeps), it takes that lock. Out of the lock order it only tries
// (TryLock): if the lock is busy it returns false, and the command must
// stop with no decision stored and nothing replied; runLocked then runs
// it again with every lock taken up front.
func (x *ctx) auditPrepare(p *policy.Policy, limited bool) bool {
	sh := x.auditLock
	if sh == nil || !x.auditKeeps(p, limited) {
		return true
	}
	if !sh.TryLock() {
		if !x.auditInOrder() {
			x.auditRedo = true
			return false
		}
		sh.Lock()
	}
	x.auditLock, x.auditHeld = nil, sh
	return true
}

// audit appends d, a decision of policy p, to p's audit stream (the
// call's last key, its shard locked, or locked here when runLocked left
// it: lazyAudit) when p's audit mode and sample keep it. It never fails
// the call: an entry that cannot be appended is dropped and counted.
func (x *ctx) audit(p *policy.Policy, d auditDecision) {
	if !x.auditKeeps(p, d.limited) {
		return
	}
	c := p.Counts
	if c == nil { // an Envoy rate limit rule's audit
		c = &x.s.pol.extAudit
	}
	if sh := x.auditLock; sh != nil { // left to the entry, in the lock order (lazyAudit)
		sh.Lock()
		x.auditLock, x.auditHeld = nil, sh
	}
	ak := &x.keys[len(x.keys)-1]
	nowMS := floorDiv(x.clockNS(), 1e6)
	v := ak.lookup(nowMS)
	switch {
	case v != nil && v.Kind != keyspace.KindStream:
		c.AuditWrongType.Add(1)
		return
	case !x.s.ks.CanInsert(): // noeviction over the cap: an entry grows the key
		c.AuditOOM.Add(1)
		return
	}
	var st *stream.Stream
	if v != nil {
		st = v.Obj.(*stream.Stream)
		if st.MemSize() >= maxStreamSize { // at its size cap, as XADD refuses
			c.AuditOOM.Add(1)
			return
		}
	}
	id, ok := auditID(st, nowMS)
	if !ok {
		c.AuditIDExhausted.Add(1)
		return
	}
	// The entry's values, in auditNames' order. Each points to bytes
	// that outlive the append and are not modified: fixed bytes
	// (auditSmall, the decisions), the policy's name and the client's
	// name or address (strings), the decided key, and nb for the numbers
	// not in auditSmall. values and nb stay on the stack: an entry
	// touches as few of the client's cache lines as it can (its cost is
	// mostly memory reads).
	// lp sums their listpack bytes (stream.AppendNamedSized): the
	// numbers' without parsing what strconv wrote.
	var values [auditFields][]byte
	var nb [3 * maxInt64Digits]byte
	values[0], values[1], values[2] = d.key, strBytes(p.Name), decisionName(d.limited, d.shadow)
	values[6] = x.auditClient()
	lp := stream.LPSize(values[0]) + stream.LPSize(values[1]) + stream.LPSize(values[2]) + stream.LPSize(values[6])
	b := nb[:0]
	for i, n := range [3]int64{d.remaining, d.retry, d.quantity} {
		lp += stream.LPIntSize(n)
		if n >= -1 && n < int64(len(auditSmall))-1 {
			values[3+i] = auditSmall[n+1]
			continue
		}
		o := len(b)
		b = strconv.AppendInt(b, n, 10)
		values[3+i] = b[o:len(b):len(b)]
	}
	if st == nil {
		st = stream.New()
		st.AppendNamedSized(id, auditNames, values[:], lp)
		ak.replace(nil, keyspace.Value{Kind: keyspace.KindStream, Obj: st})
	} else {
		st.AppendNamedSized(id, auditNames, values[:], lp)
		if st.Len() > uint64(p.AuditMaxLen) { // else nothing to trim: skip the call
			st.Trim(stream.TrimArgs{MaxLen: p.AuditMaxLen, Approx: true, Limit: 100 * stream.NodeMaxEntries})
		}
		ak.sh.Changed(ak.key, v)
		x.wakeStream(ak) // an entry added, as XADD's
	}
	c.AuditAppended.Add(1)
}

// lazyAudit reports whether runLocked may leave the lock of the audit
// stream's key (the call's last) to the audit, which takes it only for
// a decision whose entry is kept:
//   - when the command can be run again (auditRedoable: CL.APPLY on a
//     policy of one key), auditPrepare tries the lock (TryLock, which
//     cannot deadlock); if it is busy it waits for it when the key's
//     shard comes after every other key's shard in the lock order (which
//     taking it last keeps), else the command stops before storing its
//     decision and runs again with every lock up front (runLocked);
//   - otherwise only when the key's shard comes after the others', and
//     the audit takes it last.
//
// Else (a shard shared with a decided key, a NOLOOP client, which
// publishes the locks it holds before running: client.setHeld;
// sync-replicas, which sums the changes of the shards locked:
// ctx.lockedChanges; persistence, below) the key is locked up front.
func (x *ctx) lazyAudit() bool {
	if x.cl.track.noloop || x.trackChg || x.s.ks.Grouping() {
		// With persistence the decision and its entry are one group of
		// changes (keyspace.BeginGroup), which begins once every lock
		// is held: the audit stream's is taken up front.
		return false
	}
	last := len(x.keys) - 1
	as := x.keys[last].sh
	for i := range x.keys[:last] {
		if x.keys[i].sh == as {
			return false
		}
	}
	return x.auditRedoable || x.auditInOrder()
}

// auditInOrder reports whether the audit stream's key's shard comes after
// every other key's shard in the lock order (the keys are in one
// database: their shards' indexes order them).
func (x *ctx) auditInOrder() bool {
	last := len(x.keys) - 1
	_, a := x.keys[last].sh.Order()
	for i := range x.keys[:last] {
		if _, j := x.keys[i].sh.Order(); j >= a {
			return false
		}
	}
	return true
}

// runAuditLazily is runLocked's run of a command whose audit stream's
// lock is left to the audit (lazyAudit): it locks the other keys' shards
// and runs sp. It returns false when sp stopped because that lock, out of
// the lock order, was busy (auditPrepare): the command is to be run again.
func (x *ctx) runAuditLazily(sp *Spec) bool {
	last := len(x.keys) - 1
	x.auditLock = x.keys[last].sh
	defer x.auditUnlock()
	keys := x.keys[:last]
	if len(keys) == 1 {
		sh := keys[0].sh
		sh.Lock()
		defer sh.Unlock()
	} else {
		x.lockShards(x.keyShards(keys))
		defer x.unlockShards()
	}
	if x.s.migrating(sp) && !x.keysStillServed() {
		return true
	}
	sp.Run(x)
	return !x.auditRedo
}

// auditUnlock releases the audit stream's lock if the audit took it
// (lazyAudit), after the command.
func (x *ctx) auditUnlock() {
	x.auditLock = nil
	if sh := x.auditHeld; sh != nil {
		x.auditHeld = nil
		sh.Unlock()
	}
}

// auditID is the ID XADD * gives a new entry of st (nil: a new stream) at
// nowMS: nowMS-0, or the last ID's successor when that is not older; ok
// is false when the last ID is the greatest possible.
func auditID(st *stream.Stream, nowMS int64) (stream.ID, bool) {
	ms := uint64(max(nowMS, 0))
	if st == nil {
		if ms == 0 { // 0-0 is no valid ID: at or before the epoch, 0-1
			return stream.ID{Seq: 1}, true
		}
		return stream.ID{Ms: ms}, true
	}
	last := st.LastID()
	if ms > last.Ms {
		return stream.ID{Ms: ms}, true
	}
	return last.Incr()
}

// strBytes returns the bytes of s, read only.
func strBytes(s string) []byte { return unsafe.Slice(unsafe.StringData(s), len(s)) }

// maxInt64Digits is the length of the longest int64 in decimal
// (-9223372036854775808).
const maxInt64Digits = 20

// auditClient returns the client field: the CLIENT SETNAME name, else the
// client's address (ip:port), as the bytes of that string (read only:
// stream.AppendNamedSized copies them). The name is read without meta.mu:
// only the client's own commands (CLIENT SETNAME, HELLO SETNAME, RESET)
// write it, and they run one at a time, as this one does; the lock is
// for the other clients' readers (CLIENT LIST, CLIENT INFO).
func (x *ctx) auditClient() []byte {
	s := x.cl.extClient // Local.SendAudited's caller
	if s == "" {
		s = x.cl.meta.name
		if s == "" {
			s = x.c.RemoteAddr()
		}
	}
	return strBytes(s)
}

// addExtAuditKey adds the audit stream's key of the limiter command run
// by Local.SendAudited (x.cl.extAudit) as its last key, so that it is
// locked with the decided key; not in cluster mode (the front door
// refuses a rule's audit there), and only for the single-key limiter
// commands, which append the entry (extAudit).
func (x *ctx) addExtAuditKey(sp *Spec, db *keyspace.DB) {
	if x.s.cluster.on || len(x.keys) != 1 || !sp.extAudits() {
		return
	}
	x.keys = x.keys[:2]
	x.setKey(&x.keys[1], db, x.cl.extAudit.AuditKey())
	x.auditKey = true
}

// extAudits reports whether sp is a limiter command that appends the
// entry of Local.SendAudited's audit.
func (sp *Spec) extAudits() bool {
	switch sp.Name {
	case "cl.fixed", "cl.sliding", "cl.slidinglog", "cl.throttle":
		return true
	}
	return false
}

// extAudit appends the decision of the limiter command run by
// Local.SendAudited to its audit stream (the command's second key, which
// addExtAuditKey added).
func (x *ctx) extAudit(d auditDecision) {
	if p := x.cl.extAudit; p != nil && len(x.keys) == 2 {
		x.audit(p, d)
	}
}

// auditModeErr refuses, in cluster mode, a policy Set with a policy
// that audits: one stream per policy cannot live on the node of every
// key's slot, and an entry written elsewhere would not be atomic with the
// decision. It returns a *policy.Error (one problem per such policy), or
// nil.
func auditModeErr(cluster bool, set *policy.Set) error {
	if !cluster {
		return nil
	}
	var probs []policy.Problem
	for _, p := range set.Policies() {
		if p.Audit != policy.AuditOff {
			probs = append(probs, policy.Problem{Line: p.Line, Policy: p.Name,
				Msg: "audit is not available in cluster mode (the audit stream must be on the node deciding every key)"})
		}
	}
	if len(probs) == 0 {
		return nil
	}
	return &policy.Error{Problems: probs}
}
