// Package streams checks consumer groups from the outside: real server
// processes on 127.0.0.1 and three real clients (go-redis in this
// process, redis-py and ioredis as driver scripts the test feeds one
// operation at a time), with at-least-once delivery across a kill -9 and
// restart (restart_test.go) and across a Sentinel failover
// (failover_test.go). A ledger (ledger_test.go) records every delivery
// and every acknowledgement a client saw and checks the invariants: an
// entry acknowledged by XACK (reply 1, durable) is never delivered to the
// group again, every entry is delivered, a pending one is redelivered.
//
// Every scenario runs against Debian's redis-server 7.0 (the control: it
// proves the scenario and the checks) and against cellserver; see
// cellserverStreams for the switch of the cellserver subtests.
package streams

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/cellserver/cellserver/internal/binproc"
	"github.com/cellserver/cellserver/internal/syncbuf"
	"github.com/cellserver/cellserver/tests/internal/harness"
)

func TestMain(m *testing.M) { binproc.Main(m) }

// cellserverStreams is the switch of the cellserver subtests: on since
// cellserver's consumer groups persist and replicate (streams' deltas in
// the change log and the replication stream); every scenario passes
// through the three clients.
const cellserverStreams = true

// inject, for showing that the checks can fail, breaks a scenario on
// purpose:
//
//   - "setid" rewinds the group's last delivered ID to 0 (XGROUP SETID)
//     after the restart or the failover, so that ">" delivers again
//     entries already acknowledged;
//   - "async" runs the failover scenario with asynchronous replication
//     (cellserver --sync-replicas 0; redis-server without WAIT) while
//     the ledger still takes every reply as durable: a write the killed
//     primary answered but had not sent to its replicas is lost, which
//     the checks see when it happens (cellserver: in 13 of 18 runs over
//     the three clients; redis-server, which sends its replication
//     stream at once on loopback: in none of 9).
//
// The test must then fail.
var inject = flag.String("inject", "", `break the scenario on purpose to see the checks fail: "setid" or "async"`)

// Names of the stream and the group every scenario uses.
const (
	streamKey = "orders"
	groupName = "workers"
)

// server is the implementation the data nodes run.
type server struct {
	name  string
	redis bool
}

var (
	redisServer = server{name: "redis-server", redis: true}
	cellserver  = server{name: "cellserver"}
)

// eachServer runs f as a subtest per server: redis-server 7.0, then
// cellserver (skipped while cellserverStreams is false).
func eachServer(t *testing.T, f func(t *testing.T, srv server)) {
	for _, srv := range []server{redisServer, cellserver} {
		t.Run(srv.name, func(t *testing.T) {
			if srv.redis {
				harness.NeedProcesses(t, "redis-server")
			} else {
				if testing.Short() {
					t.Skip("starts processes (cellserver)")
				}
				if !cellserverStreams {
					t.Skip("cellserver subtests off until consumer groups persist and replicate (tests/streams: cellserverStreams)")
				}
			}
			f(t, srv)
		})
	}
}

// clientKind is one of the clients under test.
type clientKind string

const (
	goRedis clientKind = "go-redis"
	redisPy clientKind = "redis-py"
	ioredis clientKind = "ioredis"
)

// eachClient runs f as a subtest per client; a client whose runtime is
// missing skips (redis-py: Debian python3-redis; ioredis: Node.js and npm,
// installed by harness.NodeModules).
func eachClient(t *testing.T, f func(t *testing.T, ck clientKind)) {
	for _, ck := range []clientKind{goRedis, redisPy, ioredis} {
		t.Run(string(ck), func(t *testing.T) { f(t, ck) })
	}
}

// request is one consumer-group operation a driver runs:
//
//	ping                      PING
//	xadd i                    XADD stream * i <i>
//	read consumer id count    XREADGROUP GROUP group consumer COUNT count STREAMS stream id
//	ack id                    XACK stream group id
//	pending                   XPENDING stream group - + 100000
//	claim consumer ids        XCLAIM stream group consumer 0 ids...
//	autoclaim consumer start count
//	                          XAUTOCLAIM stream group consumer 0 start COUNT count
//
// With wait, every write (all but ping and pending) is followed by WAIT 1
// 1000 on the same connection, whose answer is response.Waited.
type request struct {
	Op       string   `json:"op"`
	I        int      `json:"i"`
	Consumer string   `json:"consumer,omitempty"`
	ID       string   `json:"id,omitempty"`
	Count    int      `json:"count,omitempty"`
	IDs      []string `json:"ids,omitempty"`
	Start    string   `json:"start,omitempty"`
}

// response is a driver's answer; Err is set when the operation failed
// (connection lost, an error reply, ...).
type response struct {
	Err     string      `json:"err,omitempty"`
	ID      string      `json:"id,omitempty"`      // xadd
	N       int64       `json:"n"`                 // ack
	Waited  int64       `json:"waited"`            // replicas WAIT counted, -1 without wait
	Entries []entry     `json:"entries,omitempty"` // read, claim, autoclaim
	Next    string      `json:"next,omitempty"`    // autoclaim
	Pending []pendingPE `json:"pending,omitempty"` // pending
}

// entry is a delivered entry: its ID and the value of its field i (the
// producer's sequence number; "" for a deleted entry).
type entry struct{ ID, I string }

func (e *entry) UnmarshalJSON(b []byte) error {
	var a []*string
	if err := json.Unmarshal(b, &a); err != nil || len(a) != 2 || a[0] == nil {
		return fmt.Errorf("entry %s: want [id, value]", b)
	}
	e.ID = *a[0]
	if a[1] != nil {
		e.I = *a[1]
	}
	return nil
}

func (e entry) MarshalJSON() ([]byte, error) { return json.Marshal([]string{e.ID, e.I}) }

// pendingPE is one XPENDING row: ID, consumer, delivery count.
type pendingPE struct {
	ID       string
	Consumer string
	Count    int64
}

func (p *pendingPE) UnmarshalJSON(b []byte) error {
	var a []any
	if err := json.Unmarshal(b, &a); err != nil || len(a) != 3 {
		return fmt.Errorf("pending row %s: want [id, consumer, count]", b)
	}
	id, ok1 := a[0].(string)
	c, ok2 := a[1].(string)
	n, ok3 := a[2].(float64)
	if !ok1 || !ok2 || !ok3 {
		return fmt.Errorf("pending row %s: want [id, consumer, count]", b)
	}
	*p = pendingPE{id, c, int64(n)}
	return nil
}

func (p pendingPE) MarshalJSON() ([]byte, error) {
	return json.Marshal([]any{p.ID, p.Consumer, p.Count})
}

// driver runs requests through one client.
type driver interface {
	call(req request) response
	close()
	// version is the client and its version, for the log.
	version() string
}

// target is where a driver connects: one address, or sentinels and the
// master's name.
type target struct {
	Addr      string   `json:"addr,omitempty"`
	Sentinels []string `json:"sentinels,omitempty"`
	Master    string   `json:"master,omitempty"`
	Stream    string   `json:"stream"`
	Group     string   `json:"group"`
	Wait      bool     `json:"wait"`
}

// newDriver starts a driver of client ck on tg, or skips t when the
// client's runtime is missing.
func newDriver(t *testing.T, ck clientKind, tg target) driver {
	t.Helper()
	tg.Stream, tg.Group = streamKey, groupName
	var d driver
	switch ck {
	case goRedis:
		d = newGoDriver(tg)
	case redisPy:
		py := harness.Python("redis")
		if py == "" {
			t.Skip("redis-py not installed (Debian python3-redis; scripts/ensure-tools.sh installs it)")
		}
		d = startProcDriver(t, "redis-py", "", py, filepath.Join(testdataDir(), "groupdriver.py"), tg)
	case ioredis:
		dir, why := harness.NodeModules()
		if why != "" {
			t.Skip("ioredis: " + why)
		}
		d = startProcDriver(t, "ioredis", dir, "node", "streamgroup.js", tg)
	}
	t.Cleanup(d.close)
	t.Logf("client %s", d.version())
	return d
}

func testdataDir() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "testdata")
}

// goDriver is go-redis in this process: a Client, or a FailoverClient
// through the sentinels, each with its defaults but for the timeouts.
type goDriver struct {
	tg target
	c  *redis.Client
}

func newGoDriver(tg target) *goDriver {
	var c *redis.Client
	if tg.Sentinels != nil {
		c = redis.NewFailoverClient(&redis.FailoverOptions{MasterName: tg.Master, SentinelAddrs: tg.Sentinels,
			DialTimeout: time.Second, ReadTimeout: 3 * time.Second, WriteTimeout: 3 * time.Second})
	} else {
		c = redis.NewClient(&redis.Options{Addr: tg.Addr,
			DialTimeout: time.Second, ReadTimeout: 3 * time.Second, WriteTimeout: 3 * time.Second})
	}
	return &goDriver{tg: tg, c: c}
}

func (d *goDriver) version() string { return "go-redis " + redis.Version() }
func (d *goDriver) close()          { d.c.Close() }

func (d *goDriver) call(req request) response {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	r, err := d.run(ctx, req)
	if err != nil && !errors.Is(err, redis.Nil) {
		return response{Err: err.Error()}
	}
	return r
}

// write runs the command f adds and, with wait, WAIT 1 1000 in the same
// pipeline (the same connection); it returns WAIT's answer, -1 without.
func (d *goDriver) write(ctx context.Context, f func(p redis.Cmdable)) (int64, error) {
	if !d.tg.Wait {
		f(d.c)
		return -1, nil
	}
	var w *redis.IntCmd
	_, err := d.c.Pipelined(ctx, func(p redis.Pipeliner) error {
		f(p)
		w = redis.NewIntCmd(ctx, "WAIT", 1, 1000)
		p.Process(ctx, w)
		return nil
	})
	return w.Val(), err
}

func goEntries(msgs []redis.XMessage) []entry {
	out := []entry{}
	for _, m := range msgs {
		v, _ := m.Values["i"].(string)
		out = append(out, entry{m.ID, v})
	}
	return out
}

func (d *goDriver) run(ctx context.Context, req request) (response, error) {
	s, g := d.tg.Stream, d.tg.Group
	var r response
	var err error
	switch req.Op {
	case "ping":
		return r, d.c.Ping(ctx).Err()
	case "xadd":
		var cmd *redis.StringCmd
		r.Waited, err = d.write(ctx, func(p redis.Cmdable) {
			cmd = p.XAdd(ctx, &redis.XAddArgs{Stream: s, Values: []any{"i", strconv.Itoa(req.I)}})
		})
		if err == nil {
			r.ID, err = cmd.Result()
		}
	case "read":
		var cmd *redis.XStreamSliceCmd
		r.Waited, err = d.write(ctx, func(p redis.Cmdable) {
			// Block -1: no BLOCK argument (go-redis sends BLOCK 0, forever, for 0).
			cmd = p.XReadGroup(ctx, &redis.XReadGroupArgs{Group: g, Consumer: req.Consumer,
				Streams: []string{s, req.ID}, Count: int64(req.Count), Block: -1})
		})
		if err == nil || errors.Is(err, redis.Nil) {
			var ss []redis.XStream
			ss, err = cmd.Result()
			r.Entries = []entry{}
			for _, x := range ss {
				r.Entries = append(r.Entries, goEntries(x.Messages)...)
			}
		}
	case "ack":
		var cmd *redis.IntCmd
		r.Waited, err = d.write(ctx, func(p redis.Cmdable) { cmd = p.XAck(ctx, s, g, req.ID) })
		if err == nil {
			r.N, err = cmd.Result()
		}
	case "pending":
		var rows []redis.XPendingExt
		rows, err = d.c.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: s, Group: g, Start: "-", End: "+", Count: 100000}).Result()
		for _, x := range rows {
			r.Pending = append(r.Pending, pendingPE{x.ID, x.Consumer, x.RetryCount})
		}
	case "claim":
		var cmd *redis.XMessageSliceCmd
		r.Waited, err = d.write(ctx, func(p redis.Cmdable) {
			cmd = p.XClaim(ctx, &redis.XClaimArgs{Stream: s, Group: g, Consumer: req.Consumer, Messages: req.IDs})
		})
		if err == nil {
			var msgs []redis.XMessage
			msgs, err = cmd.Result()
			r.Entries = goEntries(msgs)
		}
	case "autoclaim":
		var cmd *redis.XAutoClaimCmd
		r.Waited, err = d.write(ctx, func(p redis.Cmdable) {
			cmd = p.XAutoClaim(ctx, &redis.XAutoClaimArgs{Stream: s, Group: g, Consumer: req.Consumer,
				Start: req.Start, Count: int64(req.Count)})
		})
		if err == nil {
			var msgs []redis.XMessage
			msgs, r.Next, err = cmd.Result()
			r.Entries = goEntries(msgs)
		}
	default:
		err = fmt.Errorf("unknown op %q", req.Op)
	}
	return r, err
}

// procDriver is a driver script (redis-py, ioredis) fed one JSON request
// per line on its stdin, answering one JSON line each on its stdout.
type procDriver struct {
	t      *testing.T
	name   string
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	lines  chan string
	stderr *syncbuf.Buffer
	ver    string
	once   sync.Once
}

// callTimeout bounds one request of a driver script; the scripts bound
// each command (socket or command timeouts of a few seconds) well below.
const callTimeout = 30 * time.Second

func startProcDriver(t *testing.T, name, dir, prog, script string, tg target) *procDriver {
	t.Helper()
	cfg, err := json.Marshal(tg)
	if err != nil {
		t.Fatal(err)
	}
	d := &procDriver{t: t, name: name, lines: make(chan string, 1), stderr: &syncbuf.Buffer{}}
	d.cmd = exec.Command(prog, script, string(cfg))
	d.cmd.Dir = dir
	d.cmd.Stderr = d.stderr
	if d.stdin, err = d.cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	stdout, err := d.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := d.cmd.Start(); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	go func() {
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 1<<20), 16<<20)
		for sc.Scan() {
			d.lines <- sc.Text()
		}
		close(d.lines)
	}()
	var hello struct{ Client, Version string }
	if err := json.Unmarshal([]byte(d.next("start")), &hello); err != nil {
		t.Fatalf("%s: first line: %v\n%s", name, err, d.stderr)
	}
	d.ver = hello.Client + " " + hello.Version
	return d
}

// next returns the script's next line, failing the test if it exits or
// says nothing within callTimeout.
func (d *procDriver) next(what string) string {
	select {
	case line, ok := <-d.lines:
		if !ok {
			d.t.Fatalf("%s exited during %s: %v\n%s", d.name, what, d.cmd.Wait(), d.stderr)
		}
		return line
	case <-time.After(callTimeout):
		d.t.Fatalf("%s: no answer to %s within %v\n%s", d.name, what, callTimeout, d.stderr)
	}
	return ""
}

func (d *procDriver) call(req request) response {
	b, _ := json.Marshal(req)
	if _, err := d.stdin.Write(append(b, '\n')); err != nil {
		d.t.Fatalf("%s: write %s: %v\n%s", d.name, b, err, d.stderr)
	}
	line := d.next(string(b))
	var r response
	r.Waited = -1
	if err := json.Unmarshal([]byte(line), &r); err != nil {
		d.t.Fatalf("%s: answer %q to %s: %v", d.name, line, b, err)
	}
	return r
}

func (d *procDriver) version() string { return d.ver }

func (d *procDriver) close() {
	d.once.Do(func() {
		d.stdin.Close()
		done := make(chan error, 1)
		go func() { done <- d.cmd.Wait() }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			d.cmd.Process.Kill()
			<-done
		}
	})
}

// admin is a plain go-redis client for the test's own commands (XGROUP
// CREATE, the injected faults): RESP2, no retries.
func admin(t *testing.T, addr string) *redis.Client {
	c := harness.Client(addr)
	t.Cleanup(func() { c.Close() })
	return c
}

// mustDo runs args on c and fails t on an error.
func mustDo(t *testing.T, c *redis.Client, args ...any) any {
	t.Helper()
	v, err := c.Do(context.Background(), args...).Result()
	if err != nil {
		t.Fatalf("%v: %v", args, err)
	}
	return v
}
