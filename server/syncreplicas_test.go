package server_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cellserver/cellserver/internal/resptest"
	"github.com/cellserver/cellserver/internal/testwait"
	"github.com/cellserver/cellserver/internal/topotest"
	"github.com/cellserver/cellserver/keyslot"
	"github.com/cellserver/cellserver/replication"
	"github.com/cellserver/cellserver/server"
)

const noReplicas = "NOREPLICAS Not enough good replicas to write."

// deafReplica is a replica that syncs and reads the stream but never
// acknowledges anything: a replica that stopped (or whose acks are cut)
// while its link stays up.
func deafReplica(t *testing.T, primary string) {
	t.Helper()
	c, err := net.Dial("tcp", primary)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	br := bufio.NewReader(c)
	for _, cmd := range [][]string{
		{"REPLCONF", "capa", replication.Capability, "capa", replication.CapaGetAck},
		{"PSYNC", "?", "-1"},
	} {
		if _, err := c.Write(resptest.AppendCommand(nil, cmd...)); err != nil {
			t.Fatal(err)
		}
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		line, err := br.ReadString('\n')
		if err != nil || line[0] != '+' {
			t.Fatalf("%v: %q, %v", cmd, line, err)
		}
	}
	c.SetReadDeadline(time.Time{})
	go io.Copy(io.Discard, br)
}

// waitDeafOnline waits until the primary counts its (only) replica online.
func waitDeafOnline(t *testing.T, primary *node) {
	t.Helper()
	testwait.For(t, 10*time.Second, "the deaf replica online", func() (bool, string) {
		s := primary.info(t, "slave0")
		return strings.Contains(s, "state=online"), s
	})
}

// syncModes runs f with the replies written by event loops (held while
// other clients are served) and by a goroutine per connection (which
// waits in BeforeWrite).
func syncModes(t *testing.T, f func(t *testing.T, loops int)) {
	for _, loops := range []int{0, -1} {
		name := "event-loops"
		if loops < 0 {
			name = "goroutines"
		}
		t.Run(name, func(t *testing.T) { f(t, loops) })
	}
}

// TestSyncReplicasAcknowledged: with sync-replicas 1, every admission a
// client sees is already applied on the replica (the reply waited for its
// acknowledgement), including inside a pipeline and a transaction.
func TestSyncReplicasAcknowledged(t *testing.T) {
	syncModes(t, func(t *testing.T, loops int) {
		primary := startNode(t, server.Config{SyncReplicas: 1, SyncReplicasTimeout: time.Minute, EventLoops: loops})
		ph, pp := primary.hostPort()
		replica := startNode(t, server.Config{ReplicaOf: ph + " " + pp})
		waitInSync(t, primary, replica)
		rks := replica.srv.Commands().Keyspace()
		onReplica := func(key string) bool {
			sh := rks.DB(0).Shard([]byte(key))
			sh.Lock()
			defer sh.Unlock()
			return sh.Peek([]byte(key), time.Now().UnixMilli()) != nil
		}
		c := resptest.MustDial(t, primary.addr)
		const n = 300
		for i := range n {
			key := "ack:" + strconv.Itoa(i)
			if v := c.MustDo(t, "CL.THROTTLE", key, "5", "10", "60"); len(v.Elems) != 5 || v.Elems[0].Str != "0" {
				t.Fatalf("CL.THROTTLE %s = %v", key, v)
			}
			if !onReplica(key) {
				t.Fatalf("%s: admitted on the primary before the replica had it (write %d of %d)", key, i+1, n)
			}
		}
		// A pipeline: each reply after its own acknowledgement.
		var b []byte
		for i := range 50 {
			b = resptest.AppendCommand(b, "CL.FIXED", "pipe:"+strconv.Itoa(i), "10", "60s")
		}
		if _, err := c.C.Write(b); err != nil {
			t.Fatal(err)
		}
		for i := range 50 {
			v, err := c.Read()
			if err != nil || v.Kind != '*' {
				t.Fatalf("pipelined CL.FIXED %d: %v, %v", i, v, err)
			}
		}
		for i := range 50 {
			if key := "pipe:" + strconv.Itoa(i); !onReplica(key) {
				t.Fatalf("pipelined %s replied before the replica had it", key)
			}
		}
		// EXEC is held as one.
		c.MustDo(t, "MULTI")
		c.MustDo(t, "CL.THROTTLE", "tx:a", "5", "10", "60")
		c.MustDo(t, "CL.THROTTLE", "tx:b", "5", "10", "60")
		if v := c.MustDo(t, "EXEC"); len(v.Elems) != 2 {
			t.Fatalf("EXEC = %v", v)
		}
		if !onReplica("tx:a") || !onReplica("tx:b") {
			t.Fatal("EXEC replied before the replica had its changes")
		}
		if got := primary.info(t, "sync_refused"); got != "0" {
			t.Fatalf("sync_refused:%s with a replica acknowledging", got)
		}
	})
}

// TestSyncReplicasTimeoutAndFence: a replica that never acknowledges.
// Replies of commands that change nothing leave at once; those of changes
// become NOREPLICAS after the timeout, each in its place in a pipeline
// (EXEC's as a whole); then the primary is fenced and refuses writes at
// once, until a replica acknowledges the stream again.
func TestSyncReplicasTimeoutAndFence(t *testing.T) {
	syncModes(t, func(t *testing.T, loops int) {
		ctx := context.Background()
		primary := startNode(t, server.Config{EventLoops: loops})
		deafReplica(t, primary.addr)
		waitDeafOnline(t, primary)
		c := resptest.MustDial(t, primary.addr)
		// Asynchronous: admitted at once. "full" is now at its limit.
		if v := c.MustDo(t, "CL.THROTTLE", "full", "0", "1", "3600"); v.Elems[0].Str != "0" {
			t.Fatalf("first CL.THROTTLE full = %v", v)
		}
		// CONFIG SET at run time.
		c.MustDo(t, "CONFIG", "SET", "sync-replicas", "1", "sync-replicas-timeout", "200")
		if v := c.MustDo(t, "CONFIG", "GET", "sync-replicas*"); v.String() != strconv.Quote("*4\r\n$13\r\nsync-replicas\r\n$1\r\n1\r\n$21\r\nsync-replicas-timeout\r\n$3\r\n200\r\n") {
			t.Fatalf("CONFIG GET sync-replicas* = %v", v)
		}
		// One pipeline: a refused CL.THROTTLE (no change), a read, a
		// change, a read. Only the change's reply becomes NOREPLICAS.
		var b []byte
		b = resptest.AppendCommand(b, "CL.THROTTLE", "full", "0", "1", "3600")
		b = resptest.AppendCommand(b, "PING", "before")
		b = resptest.AppendCommand(b, "CL.THROTTLE", "fresh", "5", "10", "60")
		b = resptest.AppendCommand(b, "CL.PEEK", "fresh", "5", "10", "60")
		if _, err := c.C.Write(b); err != nil {
			t.Fatal(err)
		}
		want := []func(v resptest.Value) bool{
			func(v resptest.Value) bool { return len(v.Elems) == 5 && v.Elems[0].Str == "1" },
			func(v resptest.Value) bool { return v.Str == "before" },
			func(v resptest.Value) bool { return v.Kind == '-' && v.Str == noReplicas },
			func(v resptest.Value) bool { return len(v.Elems) == 5 && v.Elems[2].Str == "5" }, // applied here: 5 of 6 left
		}
		for i, ok := range want {
			v, err := c.Read()
			if err != nil || !ok(v) {
				t.Fatalf("pipeline reply %d: %v, %v", i, v, err)
			}
		}
		// Fenced now: writes refused at once, nothing applied; reads
		// and refusals without a change are served.
		if f := primary.info(t, "sync_fenced"); f != "1" {
			t.Fatalf("sync_fenced:%s after an unacknowledged reply", f)
		}
		if v := c.MustDo(t, "CL.THROTTLE", "fenced", "5", "10", "60"); v.Str != noReplicas {
			t.Fatalf("CL.THROTTLE while fenced = %v", v)
		}
		if n, err := primary.rdb.Exists(ctx, "fenced").Result(); err != nil || n != 0 {
			t.Fatalf("EXISTS fenced = %d, %v: a refused write was applied", n, err)
		}
		// As Redis with min-replicas-to-write: refused as it is queued,
		// which aborts the transaction.
		c.MustDo(t, "MULTI")
		if v := c.MustDo(t, "CL.THROTTLE", "fenced", "5", "10", "60"); v.Str != noReplicas {
			t.Fatalf("CL.THROTTLE queued while fenced = %v", v)
		}
		if v := c.MustDo(t, "EXEC"); v.Kind != '-' || !strings.HasPrefix(v.Str, "EXECABORT") {
			t.Fatalf("EXEC while fenced = %v", v)
		}
		if got, _ := strconv.Atoi(primary.info(t, "sync_refused")); got < 3 {
			t.Fatalf("sync_refused:%d, want at least 3", got)
		}

		// A real replica comes: the fence ends once it acknowledges.
		ph, pp := primary.hostPort()
		replica := startNode(t, server.Config{ReplicaOf: ph + " " + pp})
		testwait.For(t, 20*time.Second, "the fence to end", func() (bool, string) {
			f := primary.info(t, "sync_fenced")
			return f == "0", "sync_fenced:" + f
		})
		// With one acknowledging replica of two (sync-replicas 1), writes
		// succeed; EXEC's reply waits for it as a whole.
		if v := c.MustDo(t, "CL.THROTTLE", "after", "5", "10", "60"); len(v.Elems) != 5 || v.Elems[0].Str != "0" {
			t.Fatalf("CL.THROTTLE after the fence = %v", v)
		}
		c.MustDo(t, "MULTI")
		c.MustDo(t, "CL.THROTTLE", "tx", "5", "10", "60")
		if v := c.MustDo(t, "EXEC"); len(v.Elems) != 1 {
			t.Fatalf("EXEC after the fence = %v", v)
		}
		// sync-replicas 2: the deaf replica is needed: EXEC's whole reply
		// becomes NOREPLICAS.
		c.MustDo(t, "CONFIG", "SET", "sync-replicas", "2")
		c.MustDo(t, "MULTI")
		c.MustDo(t, "CL.THROTTLE", "tx2", "5", "10", "60")
		c.MustDo(t, "GET", "tx2")
		if v := c.MustDo(t, "EXEC"); v.Kind != '-' || v.Str != noReplicas {
			t.Fatalf("EXEC with sync-replicas 2 and one acknowledging replica = %v", v)
		}
		c.MustDo(t, "CONFIG", "SET", "sync-replicas", "0")
		if v := c.MustDo(t, "CL.THROTTLE", "async", "5", "10", "60"); len(v.Elems) != 5 {
			t.Fatalf("CL.THROTTLE after sync-replicas 0 = %v", v)
		}
		_ = replica
	})
}

// TestSyncReplicasReplicaLoss: the only replica goes away; writes are
// refused (NOREPLICAS at once: fewer replicas online than sync-replicas)
// until another one has synced.
func TestSyncReplicasReplicaLoss(t *testing.T) {
	primary := startNode(t, server.Config{SyncReplicas: 1})
	ph, pp := primary.hostPort()
	replica := startNode(t, server.Config{ReplicaOf: ph + " " + pp})
	waitInSync(t, primary, replica)
	c := resptest.MustDial(t, primary.addr)
	if v := c.MustDo(t, "CL.THROTTLE", "k", "5", "10", "60"); v.Elems[0].Str != "0" {
		t.Fatalf("CL.THROTTLE = %v", v)
	}
	if err := replica.rdb.Do(context.Background(), "REPLICAOF", "NO", "ONE").Err(); err != nil {
		t.Fatal(err)
	}
	testwait.For(t, 10*time.Second, "the replica's link to close", func() (bool, string) {
		n := primary.info(t, "connected_slaves")
		return n == "0", "connected_slaves:" + n
	})
	if v := c.MustDo(t, "CL.THROTTLE", "k", "5", "10", "60"); v.Str != noReplicas {
		t.Fatalf("CL.THROTTLE without a replica = %v", v)
	}
	if f := primary.info(t, "sync_fenced"); f != "1" {
		t.Fatalf("sync_fenced:%s without a replica", f)
	}
	if err := replica.rdb.Do(context.Background(), "REPLICAOF", ph, pp).Err(); err != nil {
		t.Fatal(err)
	}
	waitInSync(t, primary, replica)
	testwait.For(t, 10*time.Second, "writes accepted again", func() (bool, string) {
		v := c.MustDo(t, "CL.THROTTLE", "k", "5", "10", "60")
		return len(v.Elems) == 5, v.String()
	})
	if v := c.MustDo(t, "CL.THROTTLE", "k", "5", "10", "60"); len(v.Elems) != 5 || v.Elems[2].Str != fmt.Sprint(6-3) {
		t.Fatalf("CL.THROTTLE after the replica's return = %v, want 3 left (the refused write was not applied)", v)
	}
}

// TestSyncReplicasConfig: CONFIG SET refuses bad values and immutable or
// unknown parameters, and changes nothing when one pair is bad.
func TestSyncReplicasConfig(t *testing.T) {
	primary := startNode(t, server.Config{})
	c := resptest.MustDial(t, primary.addr)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"sync-replicas", "-1"}, "ERR CONFIG SET failed (possibly related to argument 'sync-replicas') - argument must be between 0 and 64"},
		{[]string{"sync-replicas", "x"}, "ERR CONFIG SET failed (possibly related to argument 'sync-replicas') - argument must be between 0 and 64"},
		{[]string{"sync-replicas-timeout", "0"}, "ERR CONFIG SET failed (possibly related to argument 'sync-replicas-timeout') - argument must be a positive number of milliseconds or a duration such as 500ms"},
		{[]string{"sync-replicas", "1", "sync-replicas-timeout", "soon"}, "ERR CONFIG SET failed (possibly related to argument 'sync-replicas-timeout') - argument must be a positive number of milliseconds or a duration such as 500ms"},
		{[]string{"sync-replicas", "1", "SYNC-REPLICAS", "2"}, "ERR CONFIG SET failed (possibly related to argument 'SYNC-REPLICAS') - duplicate parameter"},
		{[]string{"maxclients", "5"}, "ERR CONFIG SET failed (possibly related to argument 'maxclients') - can't set immutable config"},
		{[]string{"no-such-thing", "5"}, "ERR Unknown option or number of arguments for CONFIG SET - 'no-such-thing'"},
		{[]string{"sync-replicas"}, "ERR wrong number of arguments for 'config|set' command"},
	} {
		v := c.MustDo(t, append([]string{"CONFIG", "SET"}, tc.args...)...)
		if v.Kind != '-' || v.Str != tc.want {
			t.Errorf("CONFIG SET %q = %v, want -%s", tc.args, v, tc.want)
		}
	}
	if n := primary.info(t, "sync_replicas"); n != "0" {
		t.Fatalf("sync_replicas:%s after refused CONFIG SETs", n)
	}
	c.MustDo(t, "CONFIG", "SET", "sync-replicas-timeout", "1.5s")
	if got := primary.info(t, "sync_replicas_timeout"); got != "1500" {
		t.Fatalf("sync_replicas_timeout:%s after CONFIG SET 1.5s", got)
	}
}

// TestSyncReplicasLeaseGrant: a lease granted to a CL.ACQUIRE ... WAIT
// waiter by another client's CL.RELEASE is a change made for the waiter:
// its reply, too, leaves only once the replica has the lease.
func TestSyncReplicasLeaseGrant(t *testing.T) {
	primary := startNode(t, server.Config{SyncReplicas: 1, SyncReplicasTimeout: time.Minute})
	ph, pp := primary.hostPort()
	replica := startNode(t, server.Config{ReplicaOf: ph + " " + pp})
	waitInSync(t, primary, replica)
	holder, waiter := resptest.MustDial(t, primary.addr), resptest.MustDial(t, primary.addr)
	rc := resptest.MustDial(t, replica.addr)
	for i := range 30 {
		key := "lease:" + strconv.Itoa(i)
		if v := holder.MustDo(t, "CL.ACQUIRE", key, "1", "30s", "a"); v.Elems[0].Str != "0" {
			t.Fatalf("CL.ACQUIRE a = %v", v)
		}
		if err := waiter.Send("CL.ACQUIRE", key, "1", "30s", "b", "WAIT", "10s"); err != nil {
			t.Fatal(err)
		}
		testwait.For(t, 10*time.Second, "b to wait", func() (bool, string) {
			s, err := primary.rdb.Info(context.Background(), "clients").Result()
			return err == nil && strings.Contains(s, "blocked_clients:1\r\n"), s
		})
		if v := holder.MustDo(t, "CL.RELEASE", key, "a"); v.Str != "1" {
			t.Fatalf("CL.RELEASE = %v", v)
		}
		if v, err := waiter.Read(); err != nil || len(v.Elems) != 5 || v.Elems[0].Str != "0" {
			t.Fatalf("b's CL.ACQUIRE ... WAIT = %v, %v", v, err)
		}
		if v := rc.MustDo(t, "CL.INFO", key); !strings.Contains(v.String(), "$1\\r\\nb\\r\\n") {
			t.Fatalf("b was granted %s before the replica had its lease: the replica's CL.INFO = %v", key, v)
		}
	}
}

// TestSyncReplicasLeaseGrantUnacknowledged: with a replica that never
// acknowledges, a lease granted to a waiter is reported to it as
// NOREPLICAS, as the release that granted it is to its client.
func TestSyncReplicasLeaseGrantUnacknowledged(t *testing.T) {
	primary := startNode(t, server.Config{})
	deafReplica(t, primary.addr)
	waitDeafOnline(t, primary)
	holder, waiter := resptest.MustDial(t, primary.addr), resptest.MustDial(t, primary.addr)
	if v := holder.MustDo(t, "CL.ACQUIRE", "lease", "1", "30s", "a"); v.Elems[0].Str != "0" {
		t.Fatalf("CL.ACQUIRE a = %v", v)
	}
	if err := waiter.Send("CL.ACQUIRE", "lease", "1", "30s", "b", "WAIT", "30s"); err != nil {
		t.Fatal(err)
	}
	testwait.For(t, 10*time.Second, "b to wait", func() (bool, string) {
		s, err := primary.rdb.Info(context.Background(), "clients").Result()
		return err == nil && strings.Contains(s, "blocked_clients:1\r\n"), s
	})
	holder.MustDo(t, "CONFIG", "SET", "sync-replicas", "1", "sync-replicas-timeout", "100")
	if v := holder.MustDo(t, "CL.RELEASE", "lease", "a"); v.Str != noReplicas {
		t.Fatalf("CL.RELEASE = %v, want %s", v, noReplicas)
	}
	if v, err := waiter.Read(); err != nil || v.Str != noReplicas {
		t.Fatalf("b's CL.ACQUIRE ... WAIT = %v, %v; want %s", v, err, noReplicas)
	}
}

// TestSyncReplicasPerShard: in cluster mode each shard's primary holds its
// replies for its own replicas; a shard that loses its replica refuses
// writes while the other shard keeps admitting.
func TestSyncReplicasPerShard(t *testing.T) {
	ctx := context.Background()
	var masters, replicas []*node
	for i := range 2 {
		masters = append(masters, startNode(t, server.Config{ClusterEnabled: true, ClusterNodeID: topotest.ID(fmt.Sprintf("sync-m%d", i)), SyncReplicas: 1, SyncReplicasTimeout: time.Minute}))
		replicas = append(replicas, startNode(t, server.Config{ClusterEnabled: true, ClusterNodeID: topotest.ID(fmt.Sprintf("sync-r%d", i))}))
	}
	ranges := [][2]int{{0, 8191}, {8192, 16383}}
	push(t, topology(t, masters, ranges, map[int][]*node{0: {replicas[0]}, 1: {replicas[1]}}), append(masters, replicas...)...)
	for i := range 2 {
		h, p := masters[i].hostPort()
		if err := replicas[i].rdb.Do(ctx, "REPLICAOF", h, p).Err(); err != nil {
			t.Fatal(err)
		}
		waitInSync(t, masters[i], replicas[i])
	}
	keyOf := func(shard, i int) string {
		for j := i; ; j++ {
			k := "shard:" + strconv.Itoa(j)
			if owner(ranges, keyslot.Of([]byte(k))) == shard {
				return k
			}
		}
	}
	onReplica := func(shard int, key string) bool {
		sh := replicas[shard].srv.Commands().Keyspace().DB(0).Shard([]byte(key))
		sh.Lock()
		defer sh.Unlock()
		return sh.Peek([]byte(key), time.Now().UnixMilli()) != nil
	}
	conns := []*resptest.Conn{resptest.MustDial(t, masters[0].addr), resptest.MustDial(t, masters[1].addr)}
	for i := 0; i < 200; i += 2 {
		for shard := range 2 {
			key := keyOf(shard, i*7)
			if v := conns[shard].MustDo(t, "CL.THROTTLE", key, "5", "10", "60"); len(v.Elems) != 5 {
				t.Fatalf("CL.THROTTLE %s on shard %d = %v", key, shard, v)
			}
			if !onReplica(shard, key) {
				t.Fatalf("%s admitted by shard %d before its replica had it", key, shard)
			}
		}
	}
	// Shard 1 loses its replica: it refuses writes; shard 0 admits.
	if err := replicas[1].rdb.Do(ctx, "REPLICAOF", "NO", "ONE").Err(); err != nil {
		t.Fatal(err)
	}
	testwait.For(t, 10*time.Second, "shard 1 fenced", func() (bool, string) {
		f := masters[1].info(t, "sync_fenced")
		return f == "1", "sync_fenced:" + f
	})
	if v := conns[1].MustDo(t, "CL.THROTTLE", keyOf(1, 5000), "5", "10", "60"); v.Str != noReplicas {
		t.Fatalf("shard 1 without its replica: %v", v)
	}
	if v := conns[0].MustDo(t, "CL.THROTTLE", keyOf(0, 5000), "5", "10", "60"); len(v.Elems) != 5 {
		t.Fatalf("shard 0 while shard 1 is fenced: %v", v)
	}
}
