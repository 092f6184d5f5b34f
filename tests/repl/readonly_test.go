package repl

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

const (
	msgReadOnly  = "READONLY You can't write against a read only replica."
	msgExecAbort = "EXECABORT Transaction discarded because of previous errors."
)

// TestReplicaReadOnly: on a replica, every write is refused with Redis's
// READONLY error (inside MULTI too, which makes EXEC abort) and changes
// nothing, while the read-only commands are served with the primary's
// state.
func TestReplicaReadOnly(t *testing.T) { runReadOnly(t, cellserver) }

// TestReplicaReadOnlyHarnessOnRedis runs the generic part on real Redis 7.0.
func TestReplicaReadOnlyHarnessOnRedis(t *testing.T) { runReadOnly(t, redisRef) }

func runReadOnly(t *testing.T, f flavor) {
	f.need(t)
	ctx := context.Background()
	primary := f.start(t, "primary", nodeOpts{})
	replica := f.start(t, "replica", nodeOpts{replicaOf: primary.hostPort()})
	linkUp(t, 60*time.Second, replica)

	setup := [][]any{{"SET", "s", "v", "EX", 3600}, {"SET", "p", "forever"}}
	if !f.redis {
		setup = append(setup,
			[]any{"CL.THROTTLE", "g", 10, 5, 3600},
			[]any{"CL.FIXED", "f", 5, "87600h"},
			[]any{"CL.SLIDING", "w", 5, "87600h"},
			[]any{"CL.SLIDINGLOG", "l", 5, "2h"},
			[]any{"CL.ACQUIRE", "c", 3, "2h", "tok"})
	}
	for _, a := range setup {
		if err := primary.rdb.Do(ctx, a...).Err(); err != nil {
			t.Fatalf("primary %q: %v", a, err)
		}
	}
	caughtUp(t, 60*time.Second, primary, replica)
	before := compareNodes(t, 1, primary, replica)

	// Writes: refused, nothing changes.
	writes := [][]any{
		{"SET", "s", "x"}, {"SET", "new", "x"}, {"DEL", "s"}, {"UNLINK", "p"},
		{"EXPIRE", "s", 10}, {"PEXPIRE", "s", 10000}, {"PERSIST", "s"},
		{"FLUSHDB"}, {"FLUSHALL"},
	}
	if !f.redis {
		writes = append(writes,
			[]any{"CL.THROTTLE", "g", 10, 5, 3600}, []any{"CL.THROTTLE", "newg", 10, 5, 3600},
			[]any{"CL.FIXED", "f", 5, "87600h"}, []any{"CL.SLIDING", "w", 5, "87600h"},
			[]any{"CL.SLIDINGLOG", "l", 5, "2h"}, []any{"CL.ACQUIRE", "c", 3, "2h", "tok2"},
			[]any{"CL.RELEASE", "c", "tok"},
			[]any{"CL.ALL", "CL.THROTTLE", "g", 10, 5, 3600, 1, "CL.FIXED", "f", 5, "87600h", 1})
	}
	for _, a := range writes {
		err := replica.rdb.Do(ctx, a...).Err()
		if err == nil || err.Error() != msgReadOnly {
			t.Errorf("replica %q: %v, want %s", a, err, msgReadOnly)
		}
	}
	// Inside MULTI: the write is refused when queued, EXEC aborts.
	for _, a := range writes[:3] {
		conn := replica.rdb.Conn()
		var queued []redis.Cmder
		_, err := conn.TxPipelined(ctx, func(p redis.Pipeliner) error {
			queued = append(queued, p.Get(ctx, "s"), p.Do(ctx, a...))
			return nil
		})
		conn.Close()
		if err == nil || err.Error() != msgExecAbort {
			t.Errorf("replica MULTI GET %q EXEC: %v, want %s", a, err, msgExecAbort)
		}
	}
	// Raw, to see each reply of MULTI / write / EXEC.
	replies := rawExchange(t, replica.addr, "MULTI", "SET s y", "EXEC", "GET s")
	want := []string{"+OK", "-" + msgReadOnly, "-" + msgExecAbort, "$1"}
	if !reflect.DeepEqual(replies, want) {
		t.Errorf("replica MULTI / SET / EXEC / GET: %q, want %q", replies, want)
	}

	// Reads: served, with the primary's state.
	reads := [][]any{{"GET", "s"}, {"GET", "p"}, {"EXISTS", "s", "p", "nokey"}, {"TYPE", "s"}, {"TYPE", "nokey"},
		{"DBSIZE"}, {"TTL", "p"}, {"PTTL", "nokey"}, {"KEYS", "*"}}
	if !f.redis {
		reads = append(reads, []any{"TYPE", "f"}, []any{"TYPE", "c"}, []any{"EXISTS", "g", "f", "w", "l", "c"})
	}
	for _, a := range reads {
		pr, perr := primary.rdb.Do(ctx, a...).Result()
		rr, rerr := replica.rdb.Do(ctx, a...).Result()
		if rerr != nil && rerr != redis.Nil {
			t.Errorf("replica %q: %v", a, rerr)
			continue
		}
		if s, ok := pr.([]any); ok {
			sortAny(s)
			sortAny(rr.([]any))
		}
		if !reflect.DeepEqual(pr, rr) || (perr == nil) != (rerr == nil) {
			t.Errorf("%q: replica %v (%v), primary %v (%v)", a, rr, rerr, pr, perr)
		}
	}
	// TTL and PTTL move with time: within a few seconds of the primary's.
	for _, k := range []string{"s", "g", "f"} {
		if f.redis && k != "s" {
			continue
		}
		p, _ := primary.rdb.PTTL(ctx, k).Result()
		r, err := replica.rdb.PTTL(ctx, k).Result()
		if err != nil || r <= 0 || (p-r).Abs() > 5*time.Second {
			t.Errorf("PTTL %s: replica %v (%v), primary %v", k, r, err, p)
		}
		if s, err := replica.rdb.TTL(ctx, k).Result(); err != nil || s <= 0 {
			t.Errorf("TTL %s on the replica: %v %v", k, s, err)
		}
	}
	pk, err1 := scanKeys(ctx, primary, 0)
	rk, err2 := scanKeys(ctx, replica, 0)
	if err1 != nil || err2 != nil || !reflect.DeepEqual(pk, rk) {
		t.Errorf("SCAN: replica %q (%v), primary %q (%v)", rk, err2, pk, err1)
	}
	if m := replica.info(t, "replication"); m["role"] != "slave" {
		t.Errorf("replica INFO replication role:%s", m["role"])
	}
	if !f.redis {
		for _, k := range []string{"g", "f", "w", "l", "c"} {
			if err := replica.rdb.Do(ctx, "CL.INFO", k).Err(); err != nil {
				t.Errorf("replica CL.INFO %s: %v", k, err)
			}
		}
		// CL.PEEK reads with the replica's clock: same state, nearly the
		// same instant, so the same limited/limit/remaining.
		pp, err1 := primary.rdb.Do(ctx, "CL.PEEK", "g", 10, 5, 3600).Slice()
		rp, err2 := replica.rdb.Do(ctx, "CL.PEEK", "g", 10, 5, 3600).Slice()
		if err1 != nil || err2 != nil || len(rp) != 5 || !reflect.DeepEqual(pp[:3], rp[:3]) {
			t.Errorf("CL.PEEK: replica %v (%v), primary %v (%v)", rp, err2, pp, err1)
		}
	}

	// Nothing changed anywhere, and the replica still follows the primary.
	after := compareNodes(t, 1, primary, replica)
	if after != before {
		t.Errorf("keys before the refused writes %d, after %d", before, after)
	}
	if err := primary.rdb.Set(ctx, "later", "x", time.Hour).Err(); err != nil {
		t.Fatal(err)
	}
	caughtUp(t, 60*time.Second, primary, replica)
	if v, err := replica.rdb.Get(ctx, "later").Result(); err != nil || v != "x" {
		t.Errorf("replica GET later: %q %v", v, err)
	}
	t.Logf("%d writes refused (and %d inside MULTI), %d reads served, %d keys compared", len(writes), 4, len(reads)+8, after)
}

func sortAny(s []any) {
	sort.Slice(s, func(i, j int) bool { return fmt.Sprint(s[i]) < fmt.Sprint(s[j]) })
}

// rawExchange sends each command (space-separated words) on one new raw
// connection and returns the first line of each reply (a bulk string's
// content line is consumed). go-redis would drop a connection that got
// -READONLY, so MULTI is driven by hand here.
func rawExchange(t *testing.T, addr string, cmds ...string) []string {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(20 * time.Second))
	br := bufio.NewReader(c)
	var out []string
	for _, line := range cmds {
		words := strings.Fields(line)
		req := fmt.Sprintf("*%d\r\n", len(words))
		for _, w := range words {
			req += fmt.Sprintf("$%d\r\n%s\r\n", len(w), w)
		}
		if _, err := c.Write([]byte(req)); err != nil {
			t.Fatal(err)
		}
		reply, err := br.ReadString('\n')
		if err != nil {
			t.Fatalf("%s: %v", line, err)
		}
		reply = strings.TrimSuffix(reply, "\r\n")
		if n, err := strconv.Atoi(strings.TrimPrefix(reply, "$")); strings.HasPrefix(reply, "$") && err == nil && n >= 0 {
			if _, err := io.ReadFull(br, make([]byte, n+2)); err != nil {
				t.Fatal(err)
			}
		}
		out = append(out, reply)
	}
	return out
}
