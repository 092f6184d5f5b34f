package commands_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cellserver/cellserver/cluster"
	"github.com/cellserver/cellserver/commands"
	"github.com/cellserver/cellserver/internal/servertest"
	"github.com/cellserver/cellserver/internal/testwait"
	"github.com/cellserver/cellserver/persistence"
	"github.com/cellserver/cellserver/policy"
	"github.com/cellserver/cellserver/resp"
	"github.com/cellserver/cellserver/server"
	"github.com/redis/go-redis/v9"
)

// Issue #31, part 2: an audit stream per policy.

// auditT0 is the audit tests' clock: 1767225600000 ms.
var auditT0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func mustPolicies(t testing.TB, src string) *policy.Set {
	t.Helper()
	set, err := policy.Parse([]byte(src))
	if err != nil {
		t.Fatal(err)
	}
	return set
}

// auditDirect is a direct harness on the policies src, its clock pinned
// at auditT0.
func auditDirect(t testing.TB, src string) (*direct, *servertest.Clock) {
	t.Helper()
	clk := servertest.NewClock(auditT0)
	return newDirect(t, commands.Config{Policies: mustPolicies(t, src), Clock: clk.Now}), clk
}

func entries(t testing.TB, srv *commands.Service, key string) []string {
	t.Helper()
	kind, es := commands.StreamEntries(srv, key)
	if kind != "stream" && kind != "" {
		t.Fatalf("%s is a %s, not a stream", key, kind)
	}
	return es
}

func wantEntries(t testing.TB, srv *commands.Service, key string, want ...string) {
	t.Helper()
	have := entries(t, srv, key)
	if strings.Join(have, "\n") != strings.Join(want, "\n") {
		t.Fatalf("%s holds\n%s\nwant\n%s", key, strings.Join(have, "\n"), strings.Join(want, "\n"))
	}
}

// TestAuditEntryFields: with audit: all, every decision of CL.APPLY is
// one entry, its ID the clock's ms as XADD * makes it (ms-0, then ms-1 in
// the same ms, ms'-0 once the clock moves), its fields key, policy,
// decision, remaining, retry_after_ms, quantity, client in that order;
// the client is the CLIENT SETNAME name. The reply is unchanged. The
// audit stream's default key is audit:<policy>.
func TestAuditEntryFields(t *testing.T) {
	d, clk := auditDirect(t, `policies:
  - {name: api, algorithm: gcra, burst: 1, count: 1, period: 1s, audit: all}
  - {name: win, algorithm: fixed, limit: 2, period: 1m, audit: all, audit_stream: "log:win"}
`)
	d.want("+OK", "CLIENT", "SETNAME", "svc-a")
	d.want("*5\r\n:0\r\n:2\r\n:1\r\n:-1\r\n:1\r\n", "CL.APPLY", "u:1", "api")
	d.want("*5\r\n:0\r\n:2\r\n:0\r\n:-1\r\n:2\r\n", "CL.APPLY", "u:1", "api")
	clk.Advance(3 * time.Millisecond)
	d.want("*5\r\n:1\r\n:2\r\n:0\r\n:1\r\n:2\r\n", "CL.APPLY", "u:1", "api")
	d.want("*5\r\n:1\r\n:2\r\n:0\r\n:997\r\n:1997\r\n", "CL.APPLY", "u:1", "api", "MS")
	wantEntries(t, d.srv, "audit:api",
		"1767225600000-0 key u:1 policy api decision allowed remaining 1 retry_after_ms -1 quantity 1 client svc-a",
		"1767225600000-1 key u:1 policy api decision allowed remaining 0 retry_after_ms -1 quantity 1 client svc-a",
		"1767225600003-0 key u:1 policy api decision limited remaining 0 retry_after_ms 997 quantity 1 client svc-a",
		"1767225600003-1 key u:1 policy api decision limited remaining 0 retry_after_ms 997 quantity 1 client svc-a")
	// Quantity, another algorithm, another stream key.
	d.want("*5\r\n:0\r\n:2\r\n:0\r\n", "CL.APPLY", "w", "win", "2")
	d.want("*5\r\n:1\r\n:2\r\n:0\r\n:60\r\n", "CL.APPLY", "w", "win")
	wantEntries(t, d.srv, "log:win",
		"1767225600003-0 key w policy win decision allowed remaining 0 retry_after_ms -1 quantity 2 client svc-a",
		"1767225600003-1 key w policy win decision limited remaining 0 retry_after_ms 59997 quantity 1 client svc-a")
	// The clock going back (a pinned clock set earlier) keeps IDs rising,
	// as XADD * does.
	clk.Set(auditT0.Add(-time.Hour))
	d.want("*5\r\n:0\r\n", "CL.APPLY", "w2", "win")
	if es := entries(t, d.srv, "log:win"); !strings.HasPrefix(es[2], "1767225600003-2 key w2 policy win decision allowed remaining 1 retry_after_ms -1 quantity 1 ") {
		t.Fatalf("entry after the clock went back: %q", es[2])
	}
}

// TestAuditClientAddress: a client without a name is recorded by its
// address (ip:port), as CLIENT INFO shows it, over a real connection.
func TestAuditClientAddress(t *testing.T) {
	dir := t.TempDir()
	file := dir + "/p.yaml"
	writeFile(t, file, "policies:\n  - {name: p, algorithm: fixed, limit: 5, period: 1m, audit: all}\n")
	clk := servertest.NewClock(auditT0)
	srv, addr := servertest.Start(t, server.Config{Clock: clk.Now, Policies: file})
	rdb := redis.NewClient(&redis.Options{Addr: addr, Protocol: 2, PoolSize: 1})
	defer rdb.Close()
	ctx := context.Background()
	info, err := rdb.Do(ctx, "CLIENT", "INFO").Text()
	if err != nil {
		t.Fatal(err)
	}
	var caddr string
	for _, f := range strings.Fields(info) {
		if a, ok := strings.CutPrefix(f, "addr="); ok {
			caddr = a
		}
	}
	if caddr == "" {
		t.Fatalf("CLIENT INFO: %q", info)
	}
	if err := rdb.Do(ctx, "CL.APPLY", "k", "p").Err(); err != nil {
		t.Fatal(err)
	}
	wantEntries(t, srv.Commands(), "audit:p",
		"1767225600000-0 key k policy p decision allowed remaining 4 retry_after_ms -1 quantity 1 client "+caddr)
}

// TestAuditLimitedAndShadow: audit: limited appends the refusals only;
// a shadow policy's refusal (replied allowed) is appended as
// shadow_limited with the retry it would have had. audit: off (the
// default) appends nothing and creates no key.
func TestAuditLimitedAndShadow(t *testing.T) {
	d, _ := auditDirect(t, `policies:
  - {name: lim, algorithm: fixed, limit: 2, period: 1m, audit: limited}
  - {name: sh, algorithm: sliding_log, limit: 1, period: 10s, shadow: true, audit: limited}
  - {name: quiet, algorithm: fixed, limit: 1, period: 1m}
`)
	d.want("+OK", "CLIENT", "SETNAME", "c")
	for range 5 {
		d.do("CL.APPLY", "k", "lim")
	}
	wantEntries(t, d.srv, "audit:lim",
		"1767225600000-0 key k policy lim decision limited remaining 0 retry_after_ms 60000 quantity 1 client c",
		"1767225600000-1 key k policy lim decision limited remaining 0 retry_after_ms 60000 quantity 1 client c",
		"1767225600000-2 key k policy lim decision limited remaining 0 retry_after_ms 60000 quantity 1 client c")
	d.want("*5\r\n:0\r\n:1\r\n:0\r\n:-1\r\n", "CL.APPLY", "s", "sh")
	d.want("*5\r\n:0\r\n:1\r\n:0\r\n:-1\r\n", "CL.APPLY", "s", "sh") // refused, replied allowed
	wantEntries(t, d.srv, "audit:sh",
		"1767225600000-0 key s policy sh decision shadow_limited remaining 0 retry_after_ms 10000 quantity 1 client c")
	d.do("CL.APPLY", "q", "quiet")
	d.do("CL.APPLY", "q", "quiet")
	d.want(":0\r\n", "EXISTS", "audit:quiet")
}

// TestAuditHierarchy: a hierarchy that audits appends one entry per call
// for its own decision (its members' audit settings apply only when
// CL.APPLY names them), with the reply's remaining and, when refused, the
// refusing member's retry.
func TestAuditHierarchy(t *testing.T) {
	d, _ := auditDirect(t, `policies:
  - {name: a, algorithm: fixed, limit: 3, period: 1m, audit: all}
  - {name: b, algorithm: fixed, limit: 1, period: 10s}
  - name: h
    audit: all
    all:
      - {policy: a, key: "a:${key}"}
      - {policy: b, key: "b:${key}"}
`)
	d.want("+OK", "CLIENT", "SETNAME", "c")
	d.want("*5\r\n:0\r\n:1\r\n:0\r\n", "CL.APPLY", "k", "h")
	d.want("*5\r\n:1\r\n:1\r\n:0\r\n:10\r\n", "CL.APPLY", "k", "h")
	wantEntries(t, d.srv, "audit:h",
		"1767225600000-0 key k policy h decision allowed remaining 0 retry_after_ms -1 quantity 1 client c",
		"1767225600000-1 key k policy h decision limited remaining 0 retry_after_ms 10000 quantity 1 client c")
	d.want(":0\r\n", "EXISTS", "audit:a")
}

// TestAuditSample: audit_sample s keeps a decision when the draw is below
// s * 2^64: with draws alternating 0 and 2^64-1 and s = 0.5, every other
// decision; with s = 1 no draw is taken.
func TestAuditSample(t *testing.T) {
	d, _ := auditDirect(t, `policies:
  - {name: half, algorithm: fixed, limit: 100, period: 1m, audit: all, audit_sample: 0.5}
  - {name: whole, algorithm: fixed, limit: 100, period: 1m, audit: all}
`)
	draws := 0
	commands.SetAuditRand(d.srv, func() uint64 {
		draws++
		if draws%2 == 1 {
			return 0
		}
		return ^uint64(0)
	})
	for range 10 {
		d.do("CL.APPLY", "k", "half")
	}
	es := entries(t, d.srv, "audit:half")
	if len(es) != 5 || draws != 10 {
		t.Fatalf("sample 0.5: %d entries, %d draws, want 5 and 10", len(es), draws)
	}
	for i, e := range es { // the 1st, 3rd, ... decisions: remaining 99, 97, ...
		if want := fmt.Sprintf(" remaining %d ", 99-2*i); !strings.Contains(e, want) {
			t.Fatalf("entry %d: %q, want %q", i, e, want)
		}
	}
	for range 10 {
		d.do("CL.APPLY", "k2", "whole")
	}
	if es := entries(t, d.srv, "audit:whole"); len(es) != 10 || draws != 10 {
		t.Fatalf("sample 1: %d entries, %d draws, want 10 and no more draws", len(es), draws)
	}
}

// TestAuditSampleFraction: with the real generator, audit_sample 0.1
// keeps about a tenth of 20000 decisions (within 5 standard deviations).
func TestAuditSampleFraction(t *testing.T) {
	d, _ := auditDirect(t, `policies:
  - {name: p, algorithm: fixed, limit: 100000, period: 1m, audit: all, audit_sample: 0.1}
`)
	const n = 20000
	for range n {
		d.do("CL.APPLY", "k", "p")
	}
	got := len(entries(t, d.srv, "audit:p"))
	if got < 1788 || got > 2212 { // 2000 +- 5*sqrt(n*0.1*0.9)
		t.Fatalf("%d of %d kept, want about %d", got, n, n/10)
	}
}

// TestAuditAtomic: many clients call CL.APPLY on one fixed-window key
// (the clock pinned: one window) with audit: all. The entries, in ID
// order, are exactly the decisions in the order they were made: remaining
// limit-1, limit-2, ..., 0, then refusals; as many entries as calls, as
// many limited entries as limited replies. An entry written outside the
// decision's lock could land out of order.
func TestAuditAtomic(t *testing.T) {
	const workers, calls, limit = 8, 250, 1500
	set := mustPolicies(t, fmt.Sprintf("policies:\n  - {name: p, algorithm: fixed, limit: %d, period: 1m, audit: all}\n", limit))
	clk := servertest.NewClock(auditT0)
	srv, err := commands.New(commands.Config{Policies: set, Clock: clk.Now, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	limited := 0
	args := [][]byte{[]byte("CL.APPLY"), []byte("k"), []byte("p")}
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			conn := new(resp.Conn)
			srv.Open(conn)
			defer srv.Close(conn)
			n := 0
			for range calls {
				conn.Out = conn.Out[:0]
				srv.ServeRESP(conn, args)
				if strings.HasPrefix(string(conn.Out), "*5\r\n:1\r\n") {
					n++
				}
			}
			mu.Lock()
			limited += n
			mu.Unlock()
		}()
	}
	wg.Wait()
	es := entries(t, srv, "audit:p")
	if len(es) != workers*calls || limited != workers*calls-limit {
		t.Fatalf("%d entries, %d limited replies; want %d and %d", len(es), limited, workers*calls, workers*calls-limit)
	}
	nlim := 0
	for i, e := range es {
		f := strings.Fields(e)
		if want := fmt.Sprintf("1767225600000-%d", i); f[0] != want {
			t.Fatalf("entry %d: id %s, want %s", i, f[0], want)
		}
		rem, _ := strconv.Atoi(f[8])
		switch {
		case i < limit && (f[6] != "allowed" || rem != limit-1-i):
			t.Fatalf("entry %d: %q, want allowed with remaining %d", i, e, limit-1-i)
		case i >= limit && f[6] != "limited":
			t.Fatalf("entry %d: %q, want limited", i, e)
		}
		if f[6] == "limited" {
			nlim++
		}
	}
	if nlim != limited {
		t.Fatalf("%d limited entries, %d limited replies", nlim, limited)
	}
}

// TestAuditWrongTypeDropped: an audit key holding another type does not
// fail the decision: the entry is dropped and counted (INFO policies).
func TestAuditWrongTypeDropped(t *testing.T) {
	d, _ := auditDirect(t, "policies:\n  - {name: p, algorithm: fixed, limit: 1, period: 1m, audit: all}\n")
	d.want("+OK", "SET", "audit:p", "not a stream")
	d.want("*5\r\n:0\r\n:1\r\n:0\r\n", "CL.APPLY", "k", "p")
	d.want("*5\r\n:1\r\n:1\r\n:0\r\n", "CL.APPLY", "k", "p")
	d.want("$12\r\nnot a stream\r\n", "GET", "audit:p")
	info := d.do("INFO", "policies")
	if want := "policy_audit_p:stream=audit:p,appended=0,dropped_wrongtype=2,dropped_oom=0,dropped_id=0"; !strings.Contains(info, want) {
		t.Fatalf("INFO policies: %q, want %q", info, want)
	}
	if !strings.Contains(info, "policy_p:allowed=1,limited=1,shadow_limited=0") {
		t.Fatalf("INFO policies: %q: decisions not counted", info)
	}
}

// TestAuditOOMDropped: under maxmemory noeviction over the cap, the
// decision on an existing key goes on and the entry is dropped and
// counted; below the cap entries are appended again.
func TestAuditOOMDropped(t *testing.T) {
	dir := t.TempDir()
	file := dir + "/p.yaml"
	writeFile(t, file, "policies:\n  - {name: p, algorithm: gcra, burst: 1000000, count: 1, period: 1s, audit: all}\n")
	clk := servertest.NewClock(auditT0)
	const limit = 256 << 10
	srv, addr := servertest.Start(t, server.Config{Clock: clk.Now, Policies: file, MaxMemory: limit, MaxMemoryPolicy: "noeviction"})
	rdb := redis.NewClient(&redis.Options{Addr: addr, Protocol: 2, PoolSize: 1})
	defer rdb.Close()
	ctx := context.Background()
	if err := rdb.Do(ctx, "CL.APPLY", "k", "p").Err(); err != nil {
		t.Fatal(err)
	}
	// Fill memory past the cap with another key.
	for i := 0; ; i++ {
		if err := rdb.Set(ctx, fmt.Sprint("fill:", i), strings.Repeat("x", 4096), 0).Err(); err != nil {
			if !strings.HasPrefix(err.Error(), "OOM") {
				t.Fatal(err)
			}
			break
		}
	}
	for range 3 {
		v, err := rdb.Do(ctx, "CL.APPLY", "k", "p").Int64Slice()
		if err != nil || v[0] != 0 {
			t.Fatalf("CL.APPLY over the cap: %v, %v; want allowed", v, err)
		}
	}
	c := srv.Commands().Policies().Lookup([]byte("p")).Counts
	if c.AuditOOM.Load() != 3 || c.AuditAppended.Load() != 1 {
		t.Fatalf("appended %d, dropped_oom %d; want 1 and 3", c.AuditAppended.Load(), c.AuditOOM.Load())
	}
	if err := rdb.FlushAll(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.Do(ctx, "CL.APPLY", "k", "p").Err(); err != nil {
		t.Fatal(err)
	}
	if c.AuditAppended.Load() != 2 {
		t.Fatalf("appended %d after the flush, want 2", c.AuditAppended.Load())
	}
}

// TestAuditTrimmed: the stream is trimmed as XADD MAXLEN ~ audit_maxlen:
// whole nodes of 100 entries, never below audit_maxlen.
func TestAuditTrimmed(t *testing.T) {
	d, _ := auditDirect(t, "policies:\n  - {name: p, algorithm: fixed, limit: 1000000, period: 1m, audit: all, audit_maxlen: 250}\n")
	for i := range 1000 {
		d.do("CL.APPLY", "k", "p")
		n := len(entries(t, d.srv, "audit:p"))
		if n < min(i+1, 250) || n > 349 {
			t.Fatalf("after %d entries the stream holds %d, want within 250 and 349", i+1, n)
		}
	}
	es := entries(t, d.srv, "audit:p")
	if !strings.Contains(es[len(es)-1], "remaining 999000 ") {
		t.Fatalf("last entry %q", es[len(es)-1])
	}
	t.Logf("%d entries kept of 1000 with audit_maxlen 250", len(es))
}

// TestAuditRefusedInCluster: a policy that audits is refused in cluster
// mode, at start and at reload, with a clear error.
func TestAuditRefusedInCluster(t *testing.T) {
	st, err := cluster.New(cluster.Config{NodeID: id("m1")})
	if err != nil {
		t.Fatal(err)
	}
	_, err = commands.New(commands.Config{Cluster: st, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Policies: mustPolicies(t, "policies:\n  - {name: p, algorithm: fixed, limit: 1, period: 1m, audit: limited}\n")})
	const want = `policy: invalid policy file, 1 problem: line 2: policy "p": audit is not available in cluster mode (the audit stream must be on the node deciding every key)`
	if err == nil || err.Error() != want {
		t.Fatalf("New: %v, want %s", err, want)
	}
	// Without audit the same policies load.
	if _, err := commands.New(commands.Config{Cluster: st, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Policies: mustPolicies(t, "policies:\n  - {name: p, algorithm: fixed, limit: 1, period: 1m}\n")}); err != nil {
		t.Fatal(err)
	}
}

// TestAuditPolicyGet: CL.POLICY GET shows the audit fields of a policy
// that audits (and none for one that does not).
func TestAuditPolicyGet(t *testing.T) {
	d, _ := auditDirect(t, `policies:
  - {name: p, algorithm: fixed, limit: 1, period: 1m, audit: limited, audit_maxlen: 500, audit_sample: 0.25}
  - {name: q, algorithm: fixed, limit: 1, period: 1m}
`)
	got := d.do("CL.POLICY", "GET", "p")
	for _, want := range []string{"$5\r\naudit\r\n$7\r\nlimited\r\n", "$12\r\naudit_stream\r\n$7\r\naudit:p\r\n",
		"$12\r\naudit_maxlen\r\n$3\r\n500\r\n", "$12\r\naudit_sample\r\n$4\r\n0.25\r\n"} {
		if !strings.Contains(got, want) {
			t.Fatalf("CL.POLICY GET p: %q, want %q", got, want)
		}
	}
	if got := d.do("CL.POLICY", "GET", "q"); strings.Contains(got, "audit") {
		t.Fatalf("CL.POLICY GET q: %q", got)
	}
}

func writeFile(t testing.TB, name, s string) {
	t.Helper()
	if err := os.WriteFile(name, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestAuditOverTheWire: the audit stream is a stream like any other: a
// client blocked in XREAD BLOCK on it is woken by the CL.APPLY that
// appends an entry in place (the stream exists) and gets the entry;
// XRANGE, XLEN and TYPE see both entries. The IDs are the pinned clock's
// ms.
func TestAuditOverTheWire(t *testing.T) {
	dir := t.TempDir()
	file := dir + "/p.yaml"
	writeFile(t, file, "policies:\n  - {name: p, algorithm: fixed, limit: 1, period: 1m, audit: all}\n")
	clk := servertest.NewClock(auditT0)
	_, addr := servertest.Start(t, server.Config{Clock: clk.Now, Policies: file})
	ctx := context.Background()
	reader := redis.NewClient(&redis.Options{Addr: addr, Protocol: 2, PoolSize: 1})
	defer reader.Close()
	rdb := redis.NewClient(&redis.Options{Addr: addr, Protocol: 2, PoolSize: 1, ClientName: "svc-b"})
	defer rdb.Close()
	if v, err := rdb.Do(ctx, "CL.APPLY", "k", "p").Int64Slice(); err != nil || v[0] != 0 {
		t.Fatalf("first call: %v %v", v, err)
	}
	got := make(chan []redis.XStream, 1)
	errc := make(chan error, 1)
	go func() {
		res, err := reader.XRead(ctx, &redis.XReadArgs{Streams: []string{"audit:p", "$"}, Block: 5 * time.Second}).Result()
		errc <- err
		got <- res
	}()
	testwait.For(t, 10*time.Second, "the reader blocked", func() (bool, string) {
		info, _ := rdb.Info(ctx, "clients").Result()
		return strings.Contains(info, "blocked_clients:1\r\n"), info
	})
	clk.Advance(5 * time.Millisecond)
	if v, err := rdb.Do(ctx, "CL.APPLY", "k", "p").Int64Slice(); err != nil || v[0] != 1 {
		t.Fatalf("second call: %v %v", v, err)
	}
	if err := <-errc; err != nil {
		t.Fatalf("XREAD BLOCK: %v (not woken by the entry)", err)
	}
	res := <-got
	want := map[string]any{"key": "k", "policy": "p", "decision": "limited", "remaining": "0",
		"retry_after_ms": "59995", "quantity": "1", "client": "svc-b"}
	if len(res) != 1 || len(res[0].Messages) != 1 || res[0].Messages[0].ID != "1767225600005-0" ||
		fmt.Sprint(res[0].Messages[0].Values) != fmt.Sprint(want) {
		t.Fatalf("XREAD BLOCK: %+v, want the entry 1767225600005-0 %v", res, want)
	}
	if typ := rdb.Type(ctx, "audit:p").Val(); typ != "stream" {
		t.Fatalf("TYPE audit:p: %q", typ)
	}
	if n := rdb.XLen(ctx, "audit:p").Val(); n != 2 {
		t.Fatalf("XLEN audit:p: %d", n)
	}
	msgs, err := rdb.XRange(ctx, "audit:p", "-", "+").Result()
	if err != nil || len(msgs) != 2 || msgs[0].ID != "1767225600000-0" || msgs[0].Values["decision"] != "allowed" {
		t.Fatalf("XRANGE: %v %v", msgs, err)
	}
}

// TestAuditExecAndCompanion: inside MULTI/EXEC (the keys resolved when
// queued and again when run) each CL.APPLY appends its entry; a policy
// with a shadow companion audits its own decision while the companion is
// still evaluated on its key (the audit key comes after it).
func TestAuditExecAndCompanion(t *testing.T) {
	d, _ := auditDirect(t, `policies:
  - {name: p, algorithm: fixed, limit: 1, period: 1m, audit: all, shadow_companion: cand}
  - {name: cand, algorithm: fixed, limit: 5, period: 1m}
`)
	d.want("+OK", "CLIENT", "SETNAME", "c")
	d.want("+OK", "MULTI")
	d.want("+QUEUED", "CL.APPLY", "k", "p")
	d.want("+QUEUED", "CL.APPLY", "k", "p")
	d.want("*2\r\n*5\r\n:0\r\n:1\r\n:0\r\n:-1\r\n:60\r\n*5\r\n:1\r\n:1\r\n:0\r\n:60\r\n:60\r\n", "EXEC")
	wantEntries(t, d.srv, "audit:p",
		"1767225600000-0 key k policy p decision allowed remaining 0 retry_after_ms -1 quantity 1 client c",
		"1767225600000-1 key k policy p decision limited remaining 0 retry_after_ms 60000 quantity 1 client c")
	d.want("*5\r\n:0\r\n:5\r\n:2\r\n", "CL.FIXED", "k:shadow:cand", "5", "60") // the companion charged twice, then this
	info := d.do("INFO", "policies")
	if !strings.Contains(info, "policy_cand:allowed=2,") {
		t.Fatalf("INFO policies: %q: the companion's verdicts not counted", info)
	}
}

// TestAuditLazyLock: with keys whose shards come before the audit
// stream's (its lock, busy, is waited for) and after it (only tried, and
// the call run again when busy), the stream's lock taken only for an
// entry, once the decision is known, many clients decide on them while
// others take the audit stream's lock with other keys' (EXISTS) and alone
// (XLEN). Every decision has its entry, and each key's entries, in ID
// order, are its decisions in the order they were made (remaining
// limit-1, ..., 0, then refusals): the entry stays atomic with the
// decision either way. A lock waited for out of order would deadlock
// (the test's budget fails it).
func TestAuditLazyLock(t *testing.T) {
	const workers, rounds, limit, nkeys = 6, 12, 8, 48
	set := mustPolicies(t, fmt.Sprintf("policies:\n  - {name: p, algorithm: fixed, limit: %d, period: 1m, audit: all}\n", limit))
	clk := servertest.NewClock(auditT0)
	keys := make([]string, nkeys)
	for i := range keys {
		keys[i] = "k" + strconv.Itoa(i)
	}
	srv := auditServerWhere(t, set, clk, "keys' shards on both sides of the audit stream's", func(srv *commands.Service) bool {
		after := 0
		for _, k := range keys {
			if commands.ShardAfter(srv, k, "audit:p") {
				after++
			}
		}
		return after > 0 && after < nkeys
	})
	serve := func(conn *resp.Conn, args ...string) string {
		b := make([][]byte, len(args))
		for i, a := range args {
			b[i] = []byte(a)
		}
		conn.Out = conn.Out[:0]
		srv.ServeRESP(conn, b)
		return string(conn.Out)
	}
	done := make(chan struct{})
	var wg, others sync.WaitGroup
	others.Add(1)
	go func() { // the audit stream's lock with other keys', and alone
		defer others.Done()
		conn := new(resp.Conn)
		srv.Open(conn)
		defer srv.Close(conn)
		for i := 0; ; i++ {
			select {
			case <-done:
				return
			default:
			}
			serve(conn, "EXISTS", keys[i%nkeys], "audit:p", keys[(i*7+3)%nkeys])
			serve(conn, "XLEN", "audit:p")
		}
	}()
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			conn := new(resp.Conn)
			srv.Open(conn)
			defer srv.Close(conn)
			for r := range rounds {
				for i := range keys {
					k := keys[(i+w*5+r)%nkeys]
					if out := serve(conn, "CL.APPLY", k, "p"); !strings.HasPrefix(out, "*5\r\n") {
						t.Errorf("CL.APPLY %s p: %q", k, out)
						return
					}
				}
			}
		}()
	}
	finished := make(chan struct{})
	go func() { wg.Wait(); close(finished) }()
	testwait.Until(t, 30*time.Second, "the clients' calls (a deadlock?)", func() bool {
		select {
		case <-finished:
			return true
		default:
			return false
		}
	})
	close(done)
	others.Wait()
	es := entries(t, srv, "audit:p")
	if len(es) != workers*rounds*nkeys {
		t.Fatalf("%d entries, want %d", len(es), workers*rounds*nkeys)
	}
	seen := map[string]int{}
	for _, e := range es {
		f := strings.Fields(e)
		k, n := f[2], seen[f[2]]
		seen[k]++
		rem, _ := strconv.Atoi(f[8])
		switch {
		case n < limit && (f[6] != "allowed" || rem != limit-1-n):
			t.Fatalf("%s's entry %d: %q, want allowed with remaining %d", k, n, e, limit-1-n)
		case n >= limit && f[6] != "limited":
			t.Fatalf("%s's entry %d: %q, want limited", k, n, e)
		}
	}
}

// TestAuditRedoWhenBusy: a key whose shard comes after the audit
// stream's in the lock order is decided under its own lock alone; the
// audit stream's lock is then only tried, and when it is busy the call
// stops before storing anything, releases the key's lock and runs again
// with both locks taken in order. The test holds the audit stream's
// shard: the call must wait without holding the key's lock and without
// having stored its decision, and complete once the shard is released,
// with one entry, decided and stamped at the clock's reading once both
// locks are held.
func TestAuditRedoWhenBusy(t *testing.T) {
	set := mustPolicies(t, "policies:\n  - {name: p, algorithm: fixed, limit: 5, period: 1m, audit: all}\n")
	clk := servertest.NewClock(auditT0)
	srv, key := auditServerKeyAfter(t, set, clk)
	serve := func(args ...string) string {
		conn := new(resp.Conn)
		srv.Open(conn)
		defer srv.Close(conn)
		b := make([][]byte, len(args))
		for i, a := range args {
			b[i] = []byte(a)
		}
		srv.ServeRESP(conn, b)
		return string(conn.Out)
	}
	unlock := commands.LockKeyShard(srv, "audit:p")
	reply := make(chan string, 1)
	go func() { reply <- serve("CL.APPLY", key, "p") }()
	testwait.Until(t, 10*time.Second, "the call run again", func() bool { return commands.AuditRedos(srv) == 1 })
	if !commands.KeyShardFree(srv, key) {
		unlock()
		t.Fatalf("the call waits for the audit stream's lock holding %s's", key)
	}
	if got := serve("EXISTS", key); got != ":0\r\n" {
		unlock()
		t.Fatalf("EXISTS %s while the call waits: %q, want :0 (nothing stored)", key, got)
	}
	select {
	case got := <-reply:
		unlock()
		t.Fatalf("the call replied %q with the audit stream's lock held", got)
	default:
	}
	clk.Advance(5 * time.Second) // the call decides at the time it gets both locks
	unlock()
	if got := <-reply; got != "*5\r\n:0\r\n:5\r\n:4\r\n:-1\r\n:55\r\n" {
		t.Fatalf("CL.APPLY %s p: %q (want reset_after 55: decided 5 s into the window)", key, got)
	}
	es := entries(t, srv, "audit:p")
	if len(es) != 1 || !strings.HasPrefix(es[0], "1767225605000-0 key "+key+" ") || commands.AuditRedos(srv) != 1 {
		t.Fatalf("entries %q, %d calls run again; want one entry of %s, one call", es, commands.AuditRedos(srv), key)
	}
}

// auditServerWhere returns a server of set on clk for which ok holds,
// trying new servers: a keyspace's hash seed is random, so where the
// audit stream's shard falls in the lock order (near one of its ends,
// say, with few keys on one side) differs from server to server.
func auditServerWhere(t *testing.T, set *policy.Set, clk *servertest.Clock, what string, ok func(*commands.Service) bool) *commands.Service {
	t.Helper()
	for range 100 {
		srv, err := commands.New(commands.Config{Policies: set, Clock: clk.Now, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		if err != nil {
			t.Fatal(err)
		}
		if ok(srv) {
			return srv
		}
	}
	t.Fatalf("100 servers, none with %s", what)
	return nil
}

// TestAuditRedoKeepsTheSampleDraw: a call run again because the audit
// stream's lock was busy keeps its audit_sample draw. Drawn again, an
// entry kept by the first draw could be dropped by the second, and keys
// whose shards come after the stream's would be sampled below the rate.
func TestAuditRedoKeepsTheSampleDraw(t *testing.T) {
	set := mustPolicies(t, "policies:\n  - {name: p, algorithm: fixed, limit: 5, period: 1m, audit: all, audit_sample: 0.5}\n")
	clk := servertest.NewClock(auditT0)
	srv, key := auditServerKeyAfter(t, set, clk)
	var draws atomic.Int64
	commands.SetAuditRand(srv, func() uint64 {
		if draws.Add(1) == 1 {
			return 0 // kept
		}
		return ^uint64(0) // dropped
	})
	unlock := commands.LockKeyShard(srv, "audit:p")
	reply := make(chan string, 1)
	go func() {
		conn := new(resp.Conn)
		srv.Open(conn)
		defer srv.Close(conn)
		srv.ServeRESP(conn, [][]byte{[]byte("CL.APPLY"), []byte(key), []byte("p")})
		reply <- string(conn.Out)
	}()
	testwait.Until(t, 10*time.Second, "the call run again", func() bool { return commands.AuditRedos(srv) == 1 })
	unlock()
	if got := <-reply; !strings.HasPrefix(got, "*5\r\n:0\r\n") {
		t.Fatalf("CL.APPLY %s p: %q", key, got)
	}
	if es := entries(t, srv, "audit:p"); len(es) != 1 || draws.Load() != 1 {
		t.Fatalf("%d draws, entries %q; want one draw and its entry", draws.Load(), es)
	}
	conn := new(resp.Conn)
	srv.Open(conn)
	defer srv.Close(conn)
	srv.ServeRESP(conn, [][]byte{[]byte("INFO"), []byte("policies")})
	if !strings.Contains(string(conn.Out), "audit_calls_rerun:1\r\n") {
		t.Fatalf("INFO policies: %q, want audit_calls_rerun:1", conn.Out)
	}
}

// auditServerKeyAfter returns a server of set on clk (auditServerWhere)
// and a key whose shard comes after the audit stream's (audit:p) in the
// lock order: CL.APPLY on it only tries the stream's lock.
func auditServerKeyAfter(t *testing.T, set *policy.Set, clk *servertest.Clock) (*commands.Service, string) {
	t.Helper()
	key := ""
	srv := auditServerWhere(t, set, clk, "a key's shard after the audit stream's", func(srv *commands.Service) bool {
		for i := range 1000 {
			if k := "k" + strconv.Itoa(i); commands.ShardAfter(srv, "audit:p", k) {
				key = k
				return true
			}
		}
		return false
	})
	return srv, key
}

// TestAuditNodesCountedAsXADDs: an audit entry counts toward its stream
// node's bounds (Redis's listpack bytes, which place the node boundaries
// that approximate trimming and XINFO see) as the same entry XADDed
// would: the audit counts its numbers by value (stream.AppendNamedSized).
// A stream given the audit stream's entries by XADD, with their IDs, must
// DUMP alike (DUMP's encoding holds the nodes). The entries vary each
// field's listpack form: keys and client names that read as integers and
// others, numbers of every size and sign.
func TestAuditNodesCountedAsXADDs(t *testing.T) {
	clk := servertest.NewClock(auditT0)
	d := newDirect(t, commands.Config{Clock: clk.Now, DumpValue: persistence.EncodeValue, Policies: mustPolicies(t, `policies:
  - {name: p, algorithm: fixed, limit: 4000000000, period: 1h, audit: all, audit_maxlen: 1000000}
`)})
	rng := rand.New(rand.NewPCG(7, 8))
	digits := func() string { return strconv.FormatInt(rng.Int64N(1<<uint(rng.IntN(40))), 10) }
	const n = 800
	for i := range n {
		if i%200 == 0 {
			d.want("+OK", "CLIENT", "SETNAME", []string{"42", "svc-a", "-7", "9223372036854775807"}[i/200])
		}
		key := digits()
		if rng.IntN(2) == 0 {
			key = "u:" + key
		}
		d.want("*5\r\n", "CL.APPLY", key, "p", digits()) // refused once past the limit
		clk.Advance(time.Duration(rng.IntN(2)) * time.Millisecond)
	}
	es := entries(t, d.srv, "audit:p")
	if len(es) != n {
		t.Fatalf("%d entries, want %d", len(es), n)
	}
	limited := 0
	for _, e := range es {
		f := strings.Fields(e)
		limited += strings.Count(e, " decision limited ")
		d.want("$", append([]string{"XADD", "copy"}, f...)...)
	}
	if limited == 0 || limited == n {
		t.Fatalf("%d of %d entries limited: want both decisions", limited, n)
	}
	if a, b := streamBody(t, d.do("DUMP", "audit:p")), streamBody(t, d.do("DUMP", "copy")); !bytes.Equal(a, b) {
		t.Fatalf("the audit stream and a stream of its entries XADDed encode differently (%d and %d bytes): its nodes were not counted as XADD counts them", len(a), len(b))
	}
}

// streamBody is the part of a stream's DUMP reply that two streams of the
// same entries, nodes and counters share: the stream's encoding without
// its identity (a random incarnation and a version), the value's header
// and DUMP's trailer (persistence.EncodeValue, stream.AppendBinary).
func streamBody(t *testing.T, reply string) []byte {
	t.Helper()
	_, p, ok := strings.Cut(reply, "\r\n")
	const header, trailer = 26, 10 // format, kind, exp, N, M; version and CRC
	if !ok || reply[0] != '$' || len(p) < header+trailer+3 {
		t.Fatalf("DUMP: %.100q", reply)
	}
	// After the stream's encoding version: its incarnation and version.
	b := []byte(p[header+1 : len(p)-2-trailer])
	for range 2 {
		_, n := binary.Uvarint(b)
		if n <= 0 {
			t.Fatalf("DUMP: %.100q", reply)
		}
		b = b[n:]
	}
	return b
}
