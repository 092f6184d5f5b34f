// Package repl checks replication between cellserver nodes from the
// outside: real binaries (a primary and two replicas) on 127.0.0.1, driven
// with go-redis, compared key by key with DUMP and PEXPIRETIME.
//
// The harness is generic: every scenario also runs against real Redis 7.0
// (redis-server, when installed) with the commands Redis has, which checks
// the harness itself — process handling, link cuts through a proxy, the
// INFO fields, the SCAN/DUMP comparison — against the reference.
package repl

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sort"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/cellserver/cellserver/internal/binproc"
	"github.com/cellserver/cellserver/internal/testwait"
	"github.com/cellserver/cellserver/tests/internal/harness"
	"github.com/redis/go-redis/v9"
)

func TestMain(m *testing.M) { binproc.Main(m) }

// flavor is the server a scenario runs on: cellserver (the subject) or
// redis-server 7.0 (the reference, to check the harness).
type flavor struct {
	name  string
	redis bool
}

var (
	cellserver = flavor{name: "cellserver"}
	redisRef   = flavor{name: "redis", redis: true}
)

// need skips or fails when the flavor's binary is not available.
func (f flavor) need(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("runs server binaries")
	}
	if f.redis {
		harness.NeedTools(t, "redis-server")
		return
	}
	binproc.Binary(t)
}

// node is one running server process that the test started.
type node struct {
	name string
	addr string
	p    *harness.Proc
	rdb  *redis.Client // db 0
}

// nodeOpts are what a node is started with.
type nodeOpts struct {
	replicaOf string   // "host port", or "" for a primary
	backlog   int      // replication backlog in bytes (0: the default)
	extra     []string // more cellserver options
}

const startTimeout = 30 * time.Second

// start launches a node of flavor f and waits until it answers PING. It is
// killed when the test ends; its log is printed if the test failed.
func (f flavor) start(t *testing.T, name string, o nodeOpts) *node {
	t.Helper()
	n := &node{name: name}
	if f.redis {
		n.startRedis(t, o)
	} else {
		n.startCellserver(t, o)
	}
	t.Cleanup(func() {
		n.kill()
		if t.Failed() {
			t.Logf("--- log of %s (%s):\n%s", n.name, n.addr, n.p.Logs)
		}
	})
	n.rdb = newClient(n.addr, 0)
	t.Cleanup(func() { n.rdb.Close() })
	harness.WaitPing(t, n.p, n.addr, startTimeout)
	return n
}

func (n *node) startCellserver(t *testing.T, o nodeOpts) {
	t.Helper()
	var args []string
	if o.replicaOf != "" {
		args = append(args, "--replicaof", o.replicaOf)
	}
	if o.backlog > 0 {
		args = append(args, "--repl-backlog-size", strconv.Itoa(o.backlog))
	}
	args = append(args, o.extra...)
	n.p, n.addr = harness.ListenCellserver(t, n.name, args...)
}

func (n *node) startRedis(t *testing.T, o nodeOpts) {
	t.Helper()
	port := harness.FreePorts(t, 1)[0]
	n.addr = harness.Addr(port)
	args := []string{"--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "",
		"--appendonly", "no", "--dir", t.TempDir(), "--repl-diskless-sync-delay", "0",
		"--enable-debug-command", "no"}
	if o.replicaOf != "" {
		args = append(args, "--replicaof", o.replicaOf)
	}
	if o.backlog > 0 {
		args = append(args, "--repl-backlog-size", strconv.Itoa(o.backlog))
	}
	n.p = harness.Start(t, n.name, nil, append([]string{"redis-server"}, args...)...)
}

// kill sends SIGKILL to the node's process (only this PID) and waits for it.
func (n *node) kill() { n.p.Kill() }

// hostPort is the node's address as REPLICAOF / --replicaof take it.
func (n *node) hostPort() string {
	h, p, _ := net.SplitHostPort(n.addr)
	return h + " " + p
}

// newClient is a go-redis client on db that never retries and never
// sends CLIENT SETINFO.
func newClient(addr string, db int) *redis.Client {
	return redis.NewClient(&redis.Options{
		Addr: addr, DB: db, Protocol: 2, DisableIdentity: true, MaxRetries: -1,
		PoolSize: 4, DialTimeout: 5 * time.Second,
		ReadTimeout: 20 * time.Second, WriteTimeout: 20 * time.Second,
	})
}

// info returns INFO section's fields.
func (n *node) info(t *testing.T, section string) map[string]string {
	t.Helper()
	m, err := n.infoErr(section)
	if err != nil {
		t.Fatalf("%s: INFO %s: %v", n.name, section, err)
	}
	return m
}

func (n *node) infoErr(section string) (map[string]string, error) {
	s, err := n.rdb.Info(context.Background(), section).Result()
	if err != nil {
		return nil, err
	}
	return harness.InfoFields(s), nil
}

// infoInt reads an integer field of INFO section; a missing or malformed
// field fails the test.
func (n *node) infoInt(t *testing.T, section, field string) int64 {
	t.Helper()
	m := n.info(t, section)
	v, ok := m[field]
	if !ok {
		t.Fatalf("%s: INFO %s has no %s field: %v", n.name, section, field, m)
	}
	i, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		t.Fatalf("%s: INFO %s %s:%q is not an integer", n.name, section, field, v)
	}
	return i
}

// linkUp waits until replica reports master_link_status:up.
func linkUp(t *testing.T, timeout time.Duration, replica *node) {
	t.Helper()
	testwait.For(t, timeout, replica.name+" master_link_status:up", func() (bool, string) {
		m, err := replica.infoErr("replication")
		if err != nil {
			return false, err.Error()
		}
		return m["master_link_status"] == "up", fmt.Sprintf("role:%s master_link_status:%s", m["role"], m["master_link_status"])
	})
}

// linkDown waits until replica reports master_link_status:down.
func linkDown(t *testing.T, timeout time.Duration, replica *node) {
	t.Helper()
	testwait.For(t, timeout, replica.name+" master_link_status:down", func() (bool, string) {
		m, err := replica.infoErr("replication")
		if err != nil {
			return false, err.Error()
		}
		return m["master_link_status"] == "down", "master_link_status:" + m["master_link_status"]
	})
}

// caughtUp waits until every replica's slave_repl_offset equals the
// primary's master_repl_offset, read before and after them (so that the
// primary did not move in between).
func caughtUp(t *testing.T, timeout time.Duration, primary *node, replicas ...*node) {
	t.Helper()
	testwait.For(t, timeout, "replicas at the primary's master_repl_offset", func() (bool, string) {
		off := func(n *node, field string) (string, error) {
			m, err := n.infoErr("replication")
			if err != nil {
				return "", err
			}
			v, ok := m[field]
			if !ok {
				return "", fmt.Errorf("%s: INFO replication has no %s", n.name, field)
			}
			return v, nil
		}
		before, err := off(primary, "master_repl_offset")
		if err != nil {
			return false, err.Error()
		}
		desc := primary.name + "=" + before
		ok := true
		for _, r := range replicas {
			v, err := off(r, "slave_repl_offset")
			if err != nil {
				return false, err.Error()
			}
			desc += " " + r.name + "=" + v
			ok = ok && v == before
		}
		after, err := off(primary, "master_repl_offset")
		if err != nil {
			return false, err.Error()
		}
		return ok && after == before, desc
	})
}

// proxy forwards TCP connections to target; cut closes them all and
// refuses new ones until restore. It cuts a replica's link to its primary
// without touching either process.
type proxy struct {
	ln     net.Listener
	target string

	mu       sync.Mutex // guards refusing, conns
	refusing bool
	conns    map[net.Conn]struct{}
	wg       sync.WaitGroup
}

func startProxy(t *testing.T, target string) *proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.serve()
	t.Cleanup(p.close)
	return p
}

func (p *proxy) hostPort() string {
	a := p.ln.Addr().(*net.TCPAddr)
	return fmt.Sprintf("%s %d", a.IP, a.Port)
}

func (p *proxy) serve() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		if p.refusing {
			p.mu.Unlock()
			c.Close()
			continue
		}
		up, err := net.DialTimeout("tcp", p.target, 5*time.Second)
		if err != nil {
			p.mu.Unlock()
			c.Close()
			continue
		}
		p.conns[c], p.conns[up] = struct{}{}, struct{}{}
		p.wg.Add(2)
		p.mu.Unlock()
		pipe := func(dst, src net.Conn) {
			defer p.wg.Done()
			io.Copy(dst, src)
			dst.Close()
			src.Close()
			p.mu.Lock()
			delete(p.conns, dst)
			delete(p.conns, src)
			p.mu.Unlock()
		}
		go pipe(up, c)
		go pipe(c, up)
	}
}

// cut closes every forwarded connection and refuses new ones.
func (p *proxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.refusing = true
	for c := range p.conns {
		c.Close()
	}
}

// restore accepts connections again.
func (p *proxy) restore() {
	p.mu.Lock()
	p.refusing = false
	p.mu.Unlock()
}

func (p *proxy) close() {
	p.ln.Close()
	p.cut()
	p.wg.Wait()
}

// scanKeys returns db's keys on n, sorted, read with SCAN.
func scanKeys(ctx context.Context, n *node, db int) ([]string, error) {
	c := newClient(n.addr, db)
	defer c.Close()
	seen := map[string]bool{}
	var cursor uint64
	for {
		keys, next, err := c.Scan(ctx, cursor, "*", 1000).Result()
		if err != nil {
			return nil, err
		}
		for _, k := range keys {
			seen[k] = true
		}
		if next == 0 {
			break
		}
		cursor = next
	}
	out := make([]string, 0, len(seen))
	for k := range seen {
		out = append(out, k)
	}
	sort.Strings(out)
	return out, nil
}

// keyState is what the comparison reads of one key on one node.
type keyState struct {
	dump    string // DUMP's payload ("" and missing for nil)
	missing bool
	pexpAt  int64 // PEXPIRETIME
}

// readStates reads DUMP and PEXPIRETIME of keys in db on n (pipelined).
func readStates(ctx context.Context, n *node, db int, keys []string) ([]keyState, error) {
	c := newClient(n.addr, db)
	defer c.Close()
	out := make([]keyState, len(keys))
	const batch = 500
	for i := 0; i < len(keys); i += batch {
		j := min(i+batch, len(keys))
		var dumps []*redis.StringCmd
		var exps []*redis.Cmd
		_, err := c.Pipelined(ctx, func(p redis.Pipeliner) error {
			for _, k := range keys[i:j] {
				dumps = append(dumps, p.Dump(ctx, k))
				exps = append(exps, p.Do(ctx, "PEXPIRETIME", k))
			}
			return nil
		})
		if err != nil && !errors.Is(err, redis.Nil) {
			return nil, err
		}
		for x := range dumps {
			d, err := dumps[x].Result()
			switch {
			case errors.Is(err, redis.Nil):
				out[i+x].missing = true
			case err != nil:
				return nil, fmt.Errorf("DUMP %s: %w", keys[i+x], err)
			}
			out[i+x].dump = d
			e, err := exps[x].Int64()
			if err != nil {
				return nil, fmt.Errorf("PEXPIRETIME %s: %w", keys[i+x], err)
			}
			out[i+x].pexpAt = e
		}
	}
	return out, nil
}

// compareNodes checks that every node holds, in every db below dbs, the
// same key set (SCAN), the same DBSIZE (so that keys a replica only hides
// would show) and for each key the same DUMP payload and PEXPIRETIME as
// the first node. Each difference is reported with t.Errorf (10 at most
// per db and node). It returns how many keys it compared.
func compareNodes(t *testing.T, dbs int, nodes ...*node) int {
	t.Helper()
	compared, diffs, err := diffNodes(context.Background(), dbs, nodes...)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range diffs {
		t.Error(d)
	}
	return compared
}

// diffNodes is compareNodes's work: the differences found, described.
func diffNodes(ctx context.Context, dbs int, nodes ...*node) (compared int, diffs []string, err error) {
	for db := 0; db < dbs; db++ {
		ref, err := scanKeys(ctx, nodes[0], db)
		if err != nil {
			return 0, nil, fmt.Errorf("%s db %d: SCAN: %w", nodes[0].name, db, err)
		}
		refStates, err := readStates(ctx, nodes[0], db, ref)
		if err != nil {
			return 0, nil, fmt.Errorf("%s db %d: %w", nodes[0].name, db, err)
		}
		for i, s := range refStates {
			if s.missing {
				diffs = append(diffs, fmt.Sprintf("%s db %d: SCAN returned %q but DUMP says it is missing", nodes[0].name, db, ref[i]))
			}
		}
		for _, n := range nodes {
			c := newClient(n.addr, db)
			size, err := c.DBSize(ctx).Result()
			c.Close()
			if err != nil {
				return 0, nil, fmt.Errorf("%s db %d: DBSIZE: %w", n.name, db, err)
			}
			if int(size) != len(ref) {
				diffs = append(diffs, fmt.Sprintf("%s db %d: DBSIZE %d, %s's SCAN found %d keys", n.name, db, size, nodes[0].name, len(ref)))
			}
		}
		for _, n := range nodes[1:] {
			keys, err := scanKeys(ctx, n, db)
			if err != nil {
				return 0, nil, fmt.Errorf("%s db %d: SCAN: %w", n.name, db, err)
			}
			if d := diffSorted(ref, keys); d != "" {
				diffs = append(diffs, fmt.Sprintf("db %d: keys of %s vs %s: %s", db, nodes[0].name, n.name, d))
			}
			states, err := readStates(ctx, n, db, ref)
			if err != nil {
				return 0, nil, fmt.Errorf("%s db %d: %w", n.name, db, err)
			}
			bad := 0
			for i, s := range states {
				if s != refStates[i] {
					bad++
					if bad <= 10 {
						diffs = append(diffs, fmt.Sprintf("db %d key %q: %s has DUMP %q PEXPIRETIME %d (missing %v), %s has DUMP %q PEXPIRETIME %d",
							db, ref[i], n.name, s.dump, s.pexpAt, s.missing, nodes[0].name, refStates[i].dump, refStates[i].pexpAt))
					}
				}
			}
			if bad > 10 {
				diffs = append(diffs, fmt.Sprintf("db %d: %d keys differ between %s and %s", db, bad, nodes[0].name, n.name))
			}
		}
		compared += len(ref)
	}
	return compared, diffs, nil
}

// diffSorted describes the difference of two sorted key lists ("" if
// equal), with at most 10 names each way.
func diffSorted(a, b []string) string {
	var onlyA, onlyB []string
	i, j := 0, 0
	for i < len(a) || j < len(b) {
		switch {
		case j == len(b) || (i < len(a) && a[i] < b[j]):
			onlyA = append(onlyA, a[i])
			i++
		case i == len(a) || b[j] < a[i]:
			onlyB = append(onlyB, b[j])
			j++
		default:
			i++
			j++
		}
	}
	if len(onlyA) == 0 && len(onlyB) == 0 {
		return ""
	}
	cut := func(s []string) []string { return s[:min(len(s), 10)] }
	return fmt.Sprintf("%d only in the first %q, %d only in the second %q", len(onlyA), cut(onlyA), len(onlyB), cut(onlyB))
}
