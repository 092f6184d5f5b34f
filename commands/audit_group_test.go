package commands_test

import (
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cellserver/cellserver/commands"
	"github.com/cellserver/cellserver/internal/servertest"
	"github.com/cellserver/cellserver/keyspace"
	"github.com/cellserver/cellserver/resp"
)

// groupLog is a batching journal (keyspace.Grouper) that writes down the
// groups and the changes in the order it is told of them.
type groupLog struct {
	mu     sync.Mutex
	events []string
}

func (g *groupLog) add(e string) { g.mu.Lock(); g.events = append(g.events, e); g.mu.Unlock() }

func (g *groupLog) Put(db int, key []byte, v *keyspace.Value) { g.add("put " + string(key)) }
func (g *groupLog) Delete(db int, key []byte)                 { g.add("del " + string(key)) }
func (g *groupLog) DeleteDB(int)                              {}
func (g *groupLog) DeleteAll()                                {}
func (g *groupLog) BeginGroup()                               { g.add("begin") }
func (g *groupLog) EndGroup()                                 { g.add("end") }

// TestAuditEntryGroupedWithItsDecision: with a journal that writes in
// batches (persistence), an audited decision and its entry are told
// inside one group, whichever side of the audit stream's shard the
// decided key's falls on, and so are MSET's two keys.
func TestAuditEntryGroupedWithItsDecision(t *testing.T) {
	set := mustPolicies(t, "policies:\n  - {name: p, algorithm: fixed, limit: 1, period: 1m, audit: all}\n")
	// A keyspace's hash seed is random: servers are made until the
	// keys' shards fall on both sides of the audit stream's.
	var log *groupLog
	var srv *commands.Service
	clk := servertest.NewClock(auditT0)
	for try := 0; srv == nil; try++ {
		if try == 100 {
			t.Fatal("100 servers, none with keys' shards on both sides of the audit stream's")
		}
		log = &groupLog{}
		ks, err := keyspace.New(keyspace.Config{Journal: log})
		if err != nil {
			t.Fatal(err)
		}
		s, err := commands.New(commands.Config{Keyspace: ks, Policies: set, Clock: clk.Now, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		if err != nil {
			t.Fatal(err)
		}
		before, after := 0, 0
		for i := range 64 {
			if commands.ShardAfter(s, fmt.Sprintf("k%d", i), "audit:p") {
				after++
			} else {
				before++
			}
		}
		if before > 0 && after > 0 {
			srv = s
		}
	}
	conn := new(resp.Conn)
	srv.Open(conn)
	do := func(args ...string) {
		b := make([][]byte, len(args))
		for i, a := range args {
			b[i] = []byte(a)
		}
		srv.ServeRESP(conn, b)
	}
	before, after := 0, 0
	for i := range 64 {
		key := fmt.Sprintf("k%d", i)
		if commands.ShardAfter(srv, key, "audit:p") {
			after++
		} else {
			before++
		}
		log.mu.Lock()
		log.events = nil
		log.mu.Unlock()
		do("CL.APPLY", key, "p")
		got := strings.Join(log.events, ", ")
		if want := "begin, put " + key + ", put audit:p, end"; got != want {
			t.Fatalf("CL.APPLY %s told the journal %q, want %q", key, got, want)
		}
	}
	if before == 0 || after == 0 {
		t.Fatalf("%d keys' shards before the audit stream's and %d after: want both", before, after)
	}
	log.mu.Lock()
	log.events = nil
	log.mu.Unlock()
	do("MSET", "a", "1", "b", "2")
	if got, want := strings.Join(log.events, ", "), "begin, put a, put b, end"; got != want {
		t.Fatalf("MSET of two keys told the journal %q, want %q", got, want)
	}
}

// TestAuditEdges: at the Unix epoch the first entry of a new audit
// stream is 0-1 (0-0 is no valid ID; Append would refuse it), and an
// audit stream at its size cap takes no more entries, counted as dropped,
// while the decisions go on.
func TestAuditEdges(t *testing.T) {
	clk := servertest.NewClock(time.Unix(0, 0))
	d := newDirect(t, commands.Config{Policies: mustPolicies(t, "policies:\n  - {name: p, algorithm: fixed, limit: 1000, period: 1m, audit: all}\n"), Clock: clk.Now})
	d.do("CL.APPLY", "k", "p")
	if es := entries(t, d.srv, "audit:p"); len(es) != 1 || !strings.HasPrefix(es[0], "0-1 ") {
		t.Fatalf("the first entry at the epoch: %q, want ID 0-1", es)
	}
	defer commands.SetMaxStreamSize(1 << 10)()
	for range 100 {
		if out := d.do("CL.APPLY", "k", "p"); !strings.HasPrefix(out, "*") {
			t.Fatalf("CL.APPLY with the audit stream at its cap answered %q", out)
		}
	}
	n := len(entries(t, d.srv, "audit:p"))
	if n >= 100 || n < 3 {
		t.Fatalf("%d entries after 101 calls with a 1 KiB cap, want the stream to stop near it", n)
	}
	if info := d.do("INFO", "policies"); !strings.Contains(info, fmt.Sprintf("dropped_oom=%d", 101-n)) {
		t.Fatalf("INFO policies does not count the %d entries dropped at the cap:\n%s", 101-n, info)
	}
}
