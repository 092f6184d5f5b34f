package hostile

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/cellserver/cellserver/internal/binproc"
)

// The soak: many clients run a mixed workload of every limiter command
// (CL.THROTTLE, CL.PEEK, CL.FIXED, CL.SLIDING, CL.SLIDINGLOG,
// CL.ACQUIRE/CL.RELEASE, CL.ALL, CL.INFO) and GET, SET, DEL, EXPIRE, TTL,
// EXISTS, TYPE, SCAN, INFO, DBSIZE and MULTI/EXEC against the real binary
// with the real clock, while the invariants below are checked every 2 s
// and at the end:
//
//   - No over-admission per key. The server decides at an instant between
//     the client's send and receive times (same machine, same clock), so
//     each admitted request is known to lie in [send, recv]:
//   - CL.FIXED (limit per period-aligned window): admitted units are
//     summed per window and compared with the limit. The window is the
//     one holding both send and recv or, when they straddle a boundary,
//     the one whose end the reply's reset_after (MS) points at (the end
//     lies in (send + reset - 1 ms, recv + reset]); a request neither
//     attributes is counted as unattributed (reported; expected ~0).
//   - CL.SLIDING: its count in the current aligned window never exceeds
//     the limit either (the weighted estimate includes it), checked for
//     requests whose send and recv share a window.
//   - CL.SLIDINGLOG (at most limit units in any period): every set of
//     admitted requests that starts (send) and ends (recv) within less
//     than a period holds at most limit units.
//   - CL.THROTTLE (GCRA, burst b, emission interval T): admitted requests
//     within [t1, t2] number at most b + 1 + (t2 - t1) / T.
//   - CL.ACQUIRE: a lease is surely held from the acquire's recv until the
//     release's send (or its expiry, counted from the acquire's send);
//     those intervals never overlap more than limit deep. A release sent
//     and answered within the lease must report 1 (the lease was live).
//   - CL.ALL counts for every key it names when all its checks are
//     admitted, and for none otherwise.
//   - No error but the expected ones: WRONGTYPE and the Cell stored-value
//     error on the keys mixed on purpose (soak:mixed:*), and the exact
//     errors of deliberately bad commands. A client reads its own writes
//     (soak:own:<n>); MULTI/EXEC replies in full; SCAN terminates.
//
// Limiter keys are never written by anything but their own command (no
// SET, DEL or EXPIRE), and the server has no maxmemory (an evicted limiter
// key would start afresh, which is over-admission by design).

// limKind is a limiter key's command.
type limKind int

const (
	kGCRA limKind = iota
	kFixed
	kSliding
	kLog
	kLease
)

var kindName = [...]string{"CL.THROTTLE", "CL.FIXED", "CL.SLIDING", "CL.SLIDINGLOG", "CL.ACQUIRE"}

// admission is one admitted request: its units, the client's send and
// receive times (Unix ns), and for CL.FIXED the reply's reset_after in ms.
type admission struct {
	send, recv, units, resetMS int64
}

// hold is the interval (Unix ns) during which a lease was surely held.
type hold struct{ from, to int64 }

// limKey is one limiter key of the soak and what was admitted on it.
type limKey struct {
	name      string
	kind      limKind
	limit     int64 // GCRA: max_burst
	count     int64 // GCRA: count per period
	period    time.Duration
	periodArg string

	mu    sync.Mutex
	adm   []admission
	holds []hold
	tried int64
}

func soakKeys() []*limKey {
	return []*limKey{
		{name: "soak:gcra:0", kind: kGCRA, limit: 4, count: 20, period: time.Second, periodArg: "1"},
		{name: "soak:gcra:1", kind: kGCRA, limit: 9, count: 100, period: time.Second, periodArg: "1"},
		{name: "soak:fixed:0", kind: kFixed, limit: 10, period: time.Second, periodArg: "1s"},
		{name: "soak:fixed:1", kind: kFixed, limit: 25, period: 500 * time.Millisecond, periodArg: "500ms"},
		{name: "soak:fixed:2", kind: kFixed, limit: 1000, period: time.Second, periodArg: "1"},
		{name: "soak:sliding:0", kind: kSliding, limit: 20, period: time.Second, periodArg: "1s"},
		{name: "soak:sliding:1", kind: kSliding, limit: 200, period: 2 * time.Second, periodArg: "2s"},
		{name: "soak:log:0", kind: kLog, limit: 10, period: time.Second, periodArg: "1s"},
		{name: "soak:log:1", kind: kLog, limit: 50, period: 2 * time.Second, periodArg: "2s"},
		{name: "soak:lease:0", kind: kLease, limit: 3, period: 2 * time.Second, periodArg: "2s"},
		{name: "soak:lease:1", kind: kLease, limit: 1, period: time.Second, periodArg: "1s"},
	}
}

// args returns the check's arguments after the command name, as standalone
// command and as a CL.ALL check (with an explicit quantity).
func (k *limKey) args(q int64, token string) []any {
	switch k.kind {
	case kGCRA:
		return []any{k.name, k.limit, k.count, k.periodArg, q}
	case kLease:
		return []any{k.name, k.limit, k.periodArg, token, "MS"}
	}
	return []any{k.name, k.limit, k.periodArg, q, "MS"}
}

// limitField is the limit a reply reports.
func (k *limKey) limitField() int64 {
	if k.kind == kGCRA {
		return k.limit + 1
	}
	return k.limit
}

func (k *limKey) record(a admission) {
	k.mu.Lock()
	k.adm = append(k.adm, a)
	k.mu.Unlock()
}

// soakStats are the soak's counters.
type soakStats struct {
	ops, admitted, limited, expectedErrs, allOps, allAdmitted, multiOps, scans, leaseCycles, peekLimited atomic.Int64
}

// soak is one run.
type soak struct {
	t     *testing.T
	addr  string
	keys  []*limKey
	stats soakStats

	mu         sync.Mutex
	problems   []string // unexpected errors and violations, first 20
	nProblems  int
	seen       map[string]bool
	unattrib   map[string]int64 // per CL.FIXED key: admissions no window could be assigned to
	maxOverlap map[string]int64 // per lease key: most leases surely held at once
}

func (s *soak) problem(format string, a ...any) {
	msg := fmt.Sprintf(format, a...)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.seen[msg] {
		return
	}
	s.seen[msg] = true
	s.nProblems++
	if len(s.problems) < 20 {
		s.problems = append(s.problems, msg)
	}
}

func nowNS() int64 { return time.Now().UnixNano() }

// tupleOK validates a limiter reply's shape for key k.
func (s *soak) tupleOK(k *limKey, cmd string, v []int64) bool {
	if len(v) != 5 || (v[0] != 0 && v[0] != 1) || v[1] != k.limitField() || v[2] < 0 || v[2] > v[1] {
		s.problem("%s %s: malformed reply %v", cmd, k.name, v)
		return false
	}
	if v[0] == 0 && v[3] != -1 {
		s.problem("%s %s: admitted with retry_after %d", cmd, k.name, v[3])
		return false
	}
	return true
}

func toInts(x any) []int64 {
	a, ok := x.([]any)
	if !ok {
		return nil
	}
	out := make([]int64, len(a))
	for i, e := range a {
		n, ok := e.(int64)
		if !ok {
			return nil
		}
		out[i] = n
	}
	return out
}

// worker is one client's loop.
type worker struct {
	s     *soak
	id    int
	rdb   *redis.Client
	r     *rand.Rand
	token string
	own   string
	ctx   context.Context
}

func (w *worker) unexpected(what string, err error) {
	w.s.problem("client %d: %s: unexpected error: %v", w.id, what, err)
}

// limiter runs one standalone limiter command on a random non-lease key.
func (w *worker) limiter() {
	var k *limKey
	for k == nil || k.kind == kLease {
		k = w.s.keys[w.r.IntN(len(w.s.keys))]
	}
	q := int64(1)
	if k.kind != kGCRA && w.r.IntN(4) == 0 {
		q = 2
	}
	cmd := kindName[k.kind]
	send := nowNS()
	res, err := w.rdb.Do(w.ctx, append([]any{cmd}, k.args(q, "")...)...).Result()
	recv := nowNS()
	if err != nil {
		w.unexpected(cmd+" "+k.name, err)
		return
	}
	v := toInts(res)
	if !w.s.tupleOK(k, cmd, v) {
		return
	}
	k.mu.Lock()
	k.tried++
	k.mu.Unlock()
	if v[0] == 0 {
		w.s.stats.admitted.Add(1)
		k.record(admission{send: send, recv: recv, units: q, resetMS: v[4]})
	} else {
		w.s.stats.limited.Add(1)
	}
}

// all runs CL.ALL over 2 or 3 distinct non-lease keys; half the time only
// keys with high limits, so that many calls are admitted.
func (w *worker) all() {
	var ks []*limKey
	highOnly := w.r.IntN(2) == 0
	n := 2 + w.r.IntN(2)
	for _, i := range w.r.Perm(len(w.s.keys)) {
		k := w.s.keys[i]
		if k.kind != kLease && len(ks) < n && (!highOnly || k.limit >= 25) {
			ks = append(ks, k)
		}
	}
	args := []any{"CL.ALL"}
	qs := make([]int64, len(ks))
	for i, k := range ks {
		qs[i] = 1 + int64(w.r.IntN(2))
		if k.kind == kGCRA {
			qs[i] = 1
		}
		args = append(args, strings.ToLower(kindName[k.kind]))
		args = append(args, k.args(qs[i], "")...)
	}
	send := nowNS()
	res, err := w.rdb.Do(w.ctx, args...).Result()
	recv := nowNS()
	w.s.stats.allOps.Add(1)
	if err != nil {
		w.unexpected(fmt.Sprint(args), err)
		return
	}
	arr, ok := res.([]any)
	if !ok || len(arr) != len(ks) {
		w.s.problem("CL.ALL %v: reply %v", args, res)
		return
	}
	tuples := make([][]int64, len(ks))
	admitted := true
	for i, k := range ks {
		tuples[i] = toInts(arr[i])
		if !w.s.tupleOK(k, "CL.ALL", tuples[i]) {
			return
		}
		admitted = admitted && tuples[i][0] == 0
	}
	if !admitted {
		return
	}
	w.s.stats.allAdmitted.Add(1)
	for i, k := range ks {
		k.record(admission{send: send, recv: recv, units: qs[i], resetMS: tuples[i][4]})
	}
}

// lease takes a lease, does a few other things while holding it and
// releases it.
func (w *worker) lease() {
	var k *limKey
	for k == nil || k.kind != kLease {
		k = w.s.keys[w.r.IntN(len(w.s.keys))]
	}
	sendAcq := nowNS()
	res, err := w.rdb.Do(w.ctx, append([]any{"CL.ACQUIRE"}, k.args(1, w.token)...)...).Result()
	recvAcq := nowNS()
	if err != nil {
		w.unexpected("CL.ACQUIRE "+k.name, err)
		return
	}
	v := toInts(res)
	if !w.s.tupleOK(k, "CL.ACQUIRE", v) {
		return
	}
	if v[0] != 0 {
		w.s.stats.limited.Add(1)
		return
	}
	w.s.stats.admitted.Add(1)
	w.s.stats.leaseCycles.Add(1)
	for n := 1 + w.r.IntN(3); n > 0; n-- {
		w.strings()
	}
	sendRel := nowNS()
	released, err := w.rdb.Do(w.ctx, "CL.RELEASE", k.name, w.token).Int64()
	recvRel := nowNS()
	if err != nil {
		w.unexpected("CL.RELEASE "+k.name, err)
		return
	}
	end := min(sendRel, sendAcq+int64(k.period))
	if end > recvAcq {
		k.mu.Lock()
		k.holds = append(k.holds, hold{recvAcq, end})
		k.mu.Unlock()
	}
	if released != 1 && recvRel < sendAcq+int64(k.period) {
		w.s.problem("CL.RELEASE %s %s within its lease (%v after the acquire was sent) replied %d, want 1",
			k.name, w.token, time.Duration(recvRel-sendAcq), released)
	}
}

// multi runs MULTI / SET own / CL.FIXED / GET own / EXEC.
func (w *worker) multi() {
	var k *limKey
	for k == nil || k.kind != kFixed {
		k = w.s.keys[w.r.IntN(len(w.s.keys))]
	}
	val := strconv.FormatUint(w.r.Uint64(), 36)
	var fixed *redis.Cmd
	var get *redis.StringCmd
	send := nowNS()
	_, err := w.rdb.TxPipelined(w.ctx, func(p redis.Pipeliner) error {
		p.Set(w.ctx, w.own, val, 0)
		fixed = p.Do(w.ctx, append([]any{"CL.FIXED"}, k.args(1, "")...)...)
		get = p.Get(w.ctx, w.own)
		return nil
	})
	recv := nowNS()
	w.s.stats.multiOps.Add(1)
	if err != nil {
		w.unexpected("MULTI/EXEC", err)
		return
	}
	if get.Val() != val {
		w.s.problem("MULTI/EXEC: GET %s = %q after SET %q in the same transaction", w.own, get.Val(), val)
	}
	v := toInts(fixed.Val())
	if !w.s.tupleOK(k, "CL.FIXED in EXEC", v) {
		return
	}
	if v[0] == 0 {
		w.s.stats.admitted.Add(1)
		k.record(admission{send: send, recv: recv, units: 1, resetMS: v[4]})
	}
}

// strings runs one string command on the shared string keys or the
// client's own key.
func (w *worker) strings() {
	key := "soak:str:" + strconv.Itoa(w.r.IntN(64))
	ctx := w.ctx
	var err error
	switch w.r.IntN(9) {
	case 0:
		err = w.rdb.Set(ctx, key, strconv.Itoa(w.r.IntN(1000)), time.Duration(w.r.IntN(3))*time.Second).Err()
	case 1:
		err = w.rdb.Get(ctx, key).Err()
		if errors.Is(err, redis.Nil) {
			err = nil
		}
	case 2:
		err = w.rdb.Del(ctx, key).Err()
	case 3:
		err = w.rdb.Expire(ctx, key, time.Duration(1+w.r.IntN(5))*time.Second).Err()
	case 4:
		err = w.rdb.TTL(ctx, key).Err()
	case 5:
		err = w.rdb.Exists(ctx, key, "soak:str:0").Err()
	case 6:
		err = w.rdb.Type(ctx, key).Err()
	default: // read your own writes
		val := strconv.FormatUint(w.r.Uint64(), 36)
		if err = w.rdb.Set(ctx, w.own, val, 0).Err(); err == nil {
			got, gerr := w.rdb.Get(ctx, w.own).Result()
			if gerr != nil {
				err = gerr
			} else if got != val {
				w.s.problem("client %d: GET %s = %q right after SET %q", w.id, w.own, got, val)
			}
		}
	}
	if err != nil {
		w.unexpected("string command on "+key, err)
	}
}

// mixed runs any command on the keys mixed on purpose; WRONGTYPE and the
// Cell stored-value error are expected there.
func (w *worker) mixed() {
	key := "soak:mixed:" + strconv.Itoa(w.r.IntN(8))
	var args []any
	switch w.r.IntN(9) {
	case 0:
		args = []any{"SET", key, "text"}
	case 1:
		args = []any{"GET", key}
	case 2:
		args = []any{"CL.THROTTLE", key, 5, 10, 1}
	case 3:
		args = []any{"CL.FIXED", key, 5, "1s"}
	case 4:
		args = []any{"CL.SLIDINGLOG", key, 5, "1s"}
	case 5:
		args = []any{"CL.ACQUIRE", key, 2, "1s", w.token}
	case 6:
		args = []any{"DEL", key}
	case 7:
		args = []any{"CL.INFO", key}
	default:
		args = []any{"CL.PEEK", key, 5, 10, 1}
	}
	err := w.rdb.Do(w.ctx, args...).Err()
	if err == nil || errors.Is(err, redis.Nil) {
		return
	}
	if msg := err.Error(); strings.HasPrefix(msg, "WRONGTYPE ") || msg == "Cell error: Store error: Stored value is not an unsigned integer" {
		w.s.stats.expectedErrs.Add(1)
		return
	}
	w.unexpected(fmt.Sprint(args), err)
}

// bad sends a deliberately wrong command and requires its exact error.
func (w *worker) bad() {
	cases := []struct {
		args []any
		want string
	}{
		{[]any{"CL.FIXED", "soak:bad", 0, "1s"}, "ERR limit must be a positive integer"},
		{[]any{"CL.SLIDINGLOG", "soak:bad", 5, "1s", -1}, "ERR quantity must not be negative for CL.SLIDINGLOG"},
		{[]any{"CL.ALL", "cl.fixed", "soak:bad", 5, "1s", 1, "cl.fixed", "soak:bad", 5, "1s", 1}, "ERR CL.ALL checks must use distinct keys"},
		{[]any{"CL.ACQUIRE", "soak:bad", 2, "forever", "t"}, "ERR lease must be a positive number of seconds or a duration such as 250ms, 1.5s, 10m, 1h, at most 10 years"},
		{[]any{"EXEC"}, "ERR EXEC without MULTI"},
		{[]any{"EXPIRE", "soak:bad", "soon"}, "ERR value is not an integer or out of range"},
	}
	c := cases[w.r.IntN(len(cases))]
	err := w.rdb.Do(w.ctx, c.args...).Err()
	if err == nil || err.Error() != c.want {
		w.s.problem("%v: got %v, want the error %q", c.args, err, c.want)
		return
	}
	w.s.stats.expectedErrs.Add(1)
}

// read runs a read-only or server command.
func (w *worker) read() {
	ctx := w.ctx
	switch c := w.r.IntN(12); {
	case c == 0: // a full SCAN, bounded
		var cursor uint64
		for i := 0; ; i++ {
			if i == 10000 {
				w.s.problem("SCAN did not finish in 10000 calls")
				return
			}
			keys, next, err := w.rdb.Scan(ctx, cursor, "soak:*", 50).Result()
			if err != nil {
				w.unexpected("SCAN", err)
				return
			}
			_ = keys
			if cursor = next; cursor == 0 {
				break
			}
		}
		w.s.stats.scans.Add(1)
	case c <= 2:
		s, err := w.rdb.Info(ctx).Result()
		if err != nil {
			w.unexpected("INFO", err)
		} else if !strings.Contains(s, "connected_clients:") || !strings.Contains(s, "keyspace_memory:") {
			w.s.problem("INFO lacks fields: %.200q", s)
		}
	case c <= 4:
		if err := w.rdb.DBSize(ctx).Err(); err != nil {
			w.unexpected("DBSIZE", err)
		}
	case c <= 7: // CL.PEEK on a GCRA key: never changes anything
		// What CL.THROTTLE ... 0 would answer: never limited, since no
		// admission leaves the TAT beyond now + the tolerance, and every
		// command reads the clock under its shard lock (so a peek never
		// sees an admission decided at a later time than its own).
		k := w.s.keys[w.r.IntN(2)]
		v, err := w.rdb.Do(ctx, "CL.PEEK", k.name, k.limit, k.count, k.periodArg).Slice()
		n := toInts(v)
		switch {
		case err != nil:
			w.unexpected("CL.PEEK", err)
		case len(n) != 5 || n[1] != k.limit+1 || n[2] < 0 || n[2] > n[1] || n[0] == 0 && n[3] != -1:
			w.s.problem("CL.PEEK %s: %v", k.name, v)
		case n[0] == 1:
			w.s.stats.peekLimited.Add(1)
			w.s.problem("CL.PEEK %s: limited: %v", k.name, v)
		}
	case c <= 9: // CL.INFO on a limiter key
		k := w.s.keys[w.r.IntN(len(w.s.keys))]
		if err := w.rdb.Do(ctx, "CL.INFO", k.name).Err(); err != nil && !errors.Is(err, redis.Nil) {
			w.unexpected("CL.INFO "+k.name, err)
		}
	default:
		if err := w.rdb.Ping(ctx).Err(); err != nil {
			w.unexpected("PING", err)
		}
	}
}

func (w *worker) run(deadline time.Time, maxOps int) {
	for n := 0; n < maxOps && time.Now().Before(deadline); n++ {
		w.s.stats.ops.Add(1)
		switch p := w.r.IntN(100); {
		case p < 25:
			w.limiter()
		case p < 30:
			w.lease()
		case p < 36:
			w.all()
		case p < 39:
			w.multi()
		case p < 64:
			w.strings()
		case p < 76:
			w.mixed()
		case p < 78:
			w.bad()
		default:
			w.read()
		}
	}
}

// check runs every invariant over what has been recorded so far.
func (s *soak) check() {
	for _, k := range s.keys {
		k.mu.Lock()
		adm := slices.Clone(k.adm)
		holds := slices.Clone(k.holds)
		k.mu.Unlock()
		switch k.kind {
		case kFixed:
			s.checkWindows(k, adm, true)
		case kSliding:
			s.checkWindows(k, adm, false)
		case kLog:
			s.checkLog(k, adm)
		case kGCRA:
			s.checkGCRA(k, adm)
		case kLease:
			s.checkLeases(k, holds)
		}
	}
}

// checkWindows sums admitted units per period-aligned window.
func (s *soak) checkWindows(k *limKey, adm []admission, useReset bool) {
	p := int64(k.period)
	per := map[int64]int64{}
	var unattributed int64
	for _, a := range adm {
		w := int64(-1)
		if a.send/p == a.recv/p {
			w = a.send / p
		} else if useReset && a.resetMS > 0 {
			// The window's end lies in (send + (reset-1) ms, recv + reset ms].
			lo := a.send + (a.resetMS-1)*int64(time.Millisecond)
			hi := a.recv + a.resetMS*int64(time.Millisecond)
			first := lo/p + 1 // the first multiple of p above lo
			if first*p <= hi && (first+1)*p > hi {
				w = first - 1
			}
		}
		if w < 0 {
			unattributed++
			continue
		}
		per[w] += a.units
	}
	for w, n := range per {
		if n > k.limit {
			s.problem("%s %s: %d units admitted in the window starting %s, limit %d",
				kindName[k.kind], k.name, n, time.Unix(0, w*p).UTC().Format("15:04:05.000"), k.limit)
		}
	}
	s.mu.Lock()
	s.unattrib[k.name] = unattributed
	s.mu.Unlock()
}

// checkLog: any admitted requests whose send-to-recv span is under a
// period hold at most limit units.
func (s *soak) checkLog(k *limKey, adm []admission) {
	sort.Slice(adm, func(i, j int) bool { return adm[i].send < adm[j].send })
	p := int64(k.period)
	for i := range adm {
		var units int64
		for j := i; j < len(adm) && adm[j].send < adm[i].send+p; j++ {
			if adm[j].recv < adm[i].send+p {
				units += adm[j].units
			}
		}
		if units > k.limit {
			s.problem("CL.SLIDINGLOG %s: %d units admitted within %v from %s, limit %d",
				k.name, units, k.period, time.Unix(0, adm[i].send).UTC().Format("15:04:05.000"), k.limit)
		}
	}
}

// checkGCRA: admitted requests within [t1, t2] number at most
// burst + 1 + (t2 - t1) / T (+1 for rounding).
func (s *soak) checkGCRA(k *limKey, adm []admission) {
	sort.Slice(adm, func(i, j int) bool { return adm[i].send < adm[j].send })
	T := int64(k.period) / k.count
	horizon := 3 * int64(time.Second)
	for i := range adm {
		var recvs []int64
		for j := i; j < len(adm) && adm[j].send <= adm[i].send+horizon; j++ {
			if adm[j].recv <= adm[i].send+horizon {
				recvs = append(recvs, adm[j].recv)
			}
		}
		slices.Sort(recvs)
		var units int64
		for j, r := range recvs {
			units = int64(j + 1)
			if allowed := k.limit + 1 + (r-adm[i].send)/T + 1; units > allowed {
				s.problem("CL.THROTTLE %s: %d admitted within %v from %s, at most %d allowed",
					k.name, units, time.Duration(r-adm[i].send), time.Unix(0, adm[i].send).UTC().Format("15:04:05.000"), allowed)
				break
			}
		}
	}
}

// checkLeases: the surely-held intervals never overlap more than limit.
func (s *soak) checkLeases(k *limKey, holds []hold) {
	type ev struct {
		at    int64
		delta int64
	}
	evs := make([]ev, 0, 2*len(holds))
	for _, h := range holds {
		evs = append(evs, ev{h.from, 1}, ev{h.to, -1})
	}
	sort.Slice(evs, func(i, j int) bool {
		if evs[i].at != evs[j].at {
			return evs[i].at < evs[j].at
		}
		return evs[i].delta < evs[j].delta // ends before starts at the same instant
	})
	var cur, peak int64
	for _, e := range evs {
		cur += e.delta
		peak = max(peak, cur)
	}
	if peak > k.limit {
		s.problem("CL.ACQUIRE %s: %d leases surely held at once, limit %d", k.name, peak, k.limit)
	}
	s.mu.Lock()
	s.maxOverlap[k.name] = max(s.maxOverlap[k.name], peak)
	s.mu.Unlock()
}

// runSoak runs the soak for dur with the given number of clients and
// returns a summary.
func runSoak(t *testing.T, dur time.Duration, clients int, seed uint64) string {
	p := startServer(t)
	s := &soak{t: t, addr: p.addr, keys: soakKeys(), seen: map[string]bool{},
		unattrib: map[string]int64{}, maxOverlap: map[string]int64{}}
	rss0 := p.rss()
	deadline := time.Now().Add(dur)
	var wg sync.WaitGroup
	for i := 0; i < clients; i++ {
		w := &worker{s: s, id: i, rdb: newGoRedis(p.addr, 1), r: rand.New(rand.NewPCG(seed, uint64(i))),
			token: "w" + strconv.Itoa(i), own: "soak:own:" + strconv.Itoa(i), ctx: context.Background()}
		defer w.rdb.Close()
		wg.Add(1)
		go func() {
			defer wg.Done()
			w.run(deadline, 50_000_000)
		}()
	}
	stop := make(chan struct{})
	checked := make(chan int)
	go func() {
		n := 0
		tick := time.NewTicker(2 * time.Second)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				checked <- n
				return
			case <-tick.C:
				s.check()
				p.requireAlive(t)
				n++
			}
		}
	}()
	start := time.Now()
	wg.Wait()
	elapsed := time.Since(start)
	close(stop)
	rounds := <-checked
	s.check()
	rssEnd, hwm := p.rss(), p.hwm()
	p.stop(t)

	var b strings.Builder
	st := &s.stats
	fmt.Fprintf(&b, "soak: %d clients, %v, seed %d: %d operations (%.0f/s); limiter decisions %d admitted, %d limited; CL.ALL %d (%d admitted); MULTI/EXEC %d; lease cycles %d; full SCANs %d; expected errors %d; CL.PEEK limited by a later-started admission %d; invariant checks: %d rounds during the run + 1 at the end\n",
		clients, elapsed.Round(time.Millisecond), seed, st.ops.Load(), float64(st.ops.Load())/elapsed.Seconds(),
		st.admitted.Load(), st.limited.Load(), st.allOps.Load(), st.allAdmitted.Load(), st.multiOps.Load(),
		st.leaseCycles.Load(), st.scans.Load(), st.expectedErrs.Load(), st.peekLimited.Load(), rounds)
	fmt.Fprintf(&b, "server RSS %s at start, %s at the end, peak %s\n", mb(rss0), mb(rssEnd), mb(hwm))
	for _, k := range s.keys {
		k.mu.Lock()
		var units int64
		for _, a := range k.adm {
			units += a.units
		}
		if k.kind == kLease {
			fmt.Fprintf(&b, "  %-14s %-13s limit %-4d lease %-6s %6d leases held and released, at most %d surely held at once",
				k.name, kindName[k.kind], k.limit, k.period, len(k.holds), s.maxOverlap[k.name])
		} else {
			fmt.Fprintf(&b, "  %-14s %-13s limit %-4d per %-6s admitted %6d requests (%d units); %d standalone calls",
				k.name, kindName[k.kind], k.limit, k.period, len(k.adm), units, k.tried)
		}
		s.mu.Lock()
		if n, ok := s.unattrib[k.name]; ok {
			fmt.Fprintf(&b, "; %d not attributable to a window", n)
		}
		s.mu.Unlock()
		k.mu.Unlock()
		b.WriteByte('\n')
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.nProblems > 0 {
		t.Errorf("soak: %d problems (unexpected errors or invariant violations), e.g.:\n  %s", s.nProblems, strings.Join(s.problems, "\n  "))
	}
	fmt.Fprintf(&b, "problems: %d", s.nProblems)
	return b.String()
}

// TestSoakShort is the CI version of the soak: 10 s, 12 clients.
func TestSoakShort(t *testing.T) {
	binproc.Binary(t)
	t.Log(runSoak(t, 10*time.Second, 12, 1))
}

// TestSoak is the long soak, run by bench/soak.sh: only with SOAK=1.
// SOAK_DURATION (a Go duration or seconds; default 60s), SOAK_CLIENTS
// (default 32) and SOAK_SEED (default 1) configure it.
func TestSoak(t *testing.T) {
	if os.Getenv("SOAK") != "1" {
		t.Skip("set SOAK=1 (or run bench/soak.sh) for the long soak; TestSoakShort runs a 10 s version")
	}
	binproc.Binary(t)
	dur := 60 * time.Second
	if v := os.Getenv("SOAK_DURATION"); v != "" {
		if n, err := strconv.Atoi(v); err == nil {
			dur = time.Duration(n) * time.Second
		} else if d, err := time.ParseDuration(v); err == nil {
			dur = d
		} else {
			t.Fatalf("SOAK_DURATION %q: not a duration", v)
		}
	}
	clients := 32
	if v := os.Getenv("SOAK_CLIENTS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("SOAK_CLIENTS %q: not a positive integer", v)
		}
		clients = n
	}
	seed := uint64(1)
	if v := os.Getenv("SOAK_SEED"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("SOAK_SEED %q: not an integer", v)
		}
		seed = n
	}
	t.Log(runSoak(t, dur, clients, seed))
}

// TestSoakCheckers feeds the soak's invariant checks made-up histories:
// each must accept one at its limit and report one past it, so a soak
// that reports no problem has really checked something.
func TestSoakCheckers(t *testing.T) {
	keys := soakKeys()
	byName := map[string]*limKey{}
	for _, k := range keys {
		byName[k.name] = k
	}
	sec := int64(time.Second)
	msec := int64(time.Millisecond)
	base := 1_800_000_000 * sec // a whole second
	// spaced returns n admissions of units, sent step apart from at, each
	// answered 1 ms after it was sent.
	spaced := func(n int, at, step, units int64) []admission {
		var a []admission
		for i := 0; i < n; i++ {
			a = append(a, admission{send: at + int64(i)*step, recv: at + int64(i)*step + msec, units: units, resetMS: 1})
		}
		return a
	}
	same := func(n int, at, units int64) []admission { return spaced(n, at, msec, units) }
	cases := []struct {
		name    string
		key     string
		adm     []admission
		holds   []hold
		violate bool
	}{
		{"fixed at the limit", "soak:fixed:0", same(10, base+100*msec, 1), nil, false},
		{"fixed over the limit", "soak:fixed:0", same(11, base+100*msec, 1), nil, true},
		{"fixed: limit in each of two windows", "soak:fixed:0", append(same(10, base+100*msec, 1), same(10, base+sec+100*msec, 1)...), nil, false},
		// A request straddling the boundary into base+sec, whose reset (999 ms)
		// places it in the window ending at base+sec: the 11th unit there.
		{"fixed: straddler attributed by reset_after", "soak:fixed:0",
			append(same(10, base+100*msec, 1), admission{send: base + sec - msec, recv: base + sec + msec, units: 1, resetMS: 1}), nil, true},
		{"fixed: straddler attributed to the next window", "soak:fixed:0",
			append(same(10, base+100*msec, 1), admission{send: base + sec - msec, recv: base + sec + msec, units: 1, resetMS: 999}), nil, false},
		{"sliding over the limit", "soak:sliding:0", same(21, base, 1), nil, true},
		{"sliding log at the limit over a period", "soak:log:0", append(same(5, base, 2), same(10, base+sec+10*msec, 1)...), nil, false},
		{"sliding log over the limit within a period", "soak:log:0", append(same(5, base, 2), same(1, base+900*msec, 1)...), nil, true},
		{"gcra burst", "soak:gcra:0", same(6, base, 1), nil, false},
		{"gcra over the burst", "soak:gcra:0", same(7, base, 1), nil, true},
		// 20 per second: one every 50 ms after the burst of 5.
		{"gcra at the rate", "soak:gcra:0", append(same(5, base, 1), spaced(20, base+50*msec, 50*msec, 1)...), nil, false},
		{"gcra over the rate", "soak:gcra:0", append(same(5, base, 1), spaced(20, base+50*msec, 25*msec, 1)...), nil, true},
		{"leases at the limit", "soak:lease:0", nil, []hold{{0, 10}, {1, 10}, {2, 10}, {10, 20}}, false},
		{"leases over the limit", "soak:lease:0", nil, []hold{{0, 10}, {1, 10}, {2, 10}, {9, 20}}, true},
	}
	for _, c := range cases {
		s := &soak{t: t, keys: []*limKey{byName[c.key]}, seen: map[string]bool{}, unattrib: map[string]int64{}, maxOverlap: map[string]int64{}}
		k := byName[c.key]
		k.adm, k.holds = c.adm, c.holds
		s.check()
		if got := s.nProblems > 0; got != c.violate {
			t.Errorf("%s: reported %v (%v), want a violation: %v", c.name, got, s.problems, c.violate)
		}
	}
}
