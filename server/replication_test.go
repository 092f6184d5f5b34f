package server_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cellserver/cellserver/internal/servertest"
	"github.com/cellserver/cellserver/internal/testwait"
	"github.com/cellserver/cellserver/keyspace"
	"github.com/cellserver/cellserver/metrics"
	"github.com/cellserver/cellserver/persistence"
	"github.com/cellserver/cellserver/server"
	"github.com/redis/go-redis/v9"
)

// node is one in-process cellserver of a replication test.
type node struct {
	srv  *server.Server
	addr string
	rdb  *redis.Client
}

func startNode(t *testing.T, cfg server.Config) *node {
	t.Helper()
	srv, addr := servertest.Start(t, cfg)
	rdb := redis.NewClient(&redis.Options{Addr: addr, Protocol: 2, MaxRetries: -1})
	t.Cleanup(func() { rdb.Close() })
	return &node{srv: srv, addr: addr, rdb: rdb}
}

func (n *node) hostPort() (string, string) {
	h, p, _ := strings.Cut(n.addr, ":")
	return h, p
}

// info returns one INFO field.
func (n *node) info(t *testing.T, field string) string {
	t.Helper()
	s, err := n.rdb.Info(context.Background(), "replication", "stats").Result()
	if err != nil {
		t.Fatalf("INFO on %s: %v", n.addr, err)
	}
	for _, l := range strings.Split(s, "\r\n") {
		if v, ok := strings.CutPrefix(l, field+":"); ok {
			return v
		}
	}
	return ""
}

// waitInSync waits until each replica is up and at the primary's offset.
func waitInSync(t *testing.T, primary *node, replicas ...*node) {
	t.Helper()
	for _, r := range replicas {
		testwait.For(t, 20*time.Second, r.addr+" in sync with "+primary.addr, func() (bool, string) {
			link, at, want := r.info(t, "master_link_status"), r.info(t, "slave_repl_offset"), primary.info(t, "master_repl_offset")
			return link == "up" && at == want, fmt.Sprintf("master_link_status:%s slave_repl_offset:%s, primary's master_repl_offset:%s", link, at, want)
		})
	}
	// The replica reports its link up once the full copy's end arrives,
	// which can be before the primary counts it online (sync-replicas
	// counts only online replicas): wait for the primary's view too.
	testwait.For(t, 20*time.Second, primary.addr+" counts its replicas online", func() (bool, string) {
		online := 0
		for i := 0; i < 16; i++ {
			if strings.Contains(primary.info(t, fmt.Sprintf("slave%d", i)), "state=online") {
				online++
			}
		}
		return online >= len(replicas), fmt.Sprintf("%d replicas online, want %d", online, len(replicas))
	})
}

// dump encodes every entry of every database that is still live at
// cutoff (ms): database, key, the persisted encoding of its value (exact
// state, expiry included). Entries that expire before the cutoff are left
// out on both sides: the primary's expiry sweep may delete them between
// two dumps.
func dump(ks *keyspace.Keyspace, cutoff int64) map[string]string {
	out := map[string]string{}
	for d := 0; d < ks.NumDB(); d++ {
		db := ks.DB(d)
		for i := 0; i < db.NumShards(); i++ {
			sh := db.ShardAt(i)
			sh.Lock()
			sh.Range(cutoff, func(key string, v *keyspace.Value) bool {
				out[fmt.Sprintf("%d/%s", d, key)] = string(persistence.EncodeValue(nil, *v))
				return true
			})
			sh.Unlock()
		}
	}
	return out
}

func sameState(t *testing.T, want, got *node) int {
	t.Helper()
	cutoff := time.Now().Add(30 * time.Second).UnixMilli()
	a, b := dump(want.srv.Commands().Keyspace(), cutoff), dump(got.srv.Commands().Keyspace(), cutoff)
	for k, v := range a {
		if w, ok := b[k]; !ok {
			t.Errorf("%s lacks %s", got.addr, k)
		} else if w != v {
			t.Errorf("%s: %s is %x, primary has %x", got.addr, k, w, v)
		}
	}
	for k := range b {
		if _, ok := a[k]; !ok {
			t.Errorf("%s has %s, which %s does not", got.addr, k, want.addr)
		}
	}
	return len(a)
}

// randomWrites applies n random state-changing commands to the primary.
func randomWrites(t *testing.T, rdb *redis.Client, rng *rand.Rand, n int) {
	t.Helper()
	ctx := context.Background()
	for i := 0; i < n; i++ {
		db := rng.IntN(3)
		key := "k" + strconv.Itoa(rng.IntN(200))
		var args [][]any
		switch rng.IntN(12) {
		case 0, 1, 2:
			args = [][]any{{"CL.THROTTLE", key, 5, 10, 60}}
		case 3:
			args = [][]any{{"CL.FIXED", key, 10, "60s"}}
		case 4:
			args = [][]any{{"CL.SLIDING", key, 10, "60s"}}
		case 5:
			args = [][]any{{"CL.SLIDINGLOG", key, 10, "60s"}}
		case 6:
			args = [][]any{{"CL.ACQUIRE", key, 5, "30s", "t" + strconv.Itoa(rng.IntN(8))}}
		case 7:
			args = [][]any{{"SET", key, strconv.Itoa(rng.Int()), "EX", 3600}}
		case 8:
			args = [][]any{{"DEL", key}}
		case 9:
			args = [][]any{{"PEXPIRE", key, 3600000 + rng.IntN(1000)}}
		case 10:
			args = [][]any{{"MULTI"}, {"CL.THROTTLE", key, 1, 1, 1}, {"SET", key + "x", "v"}, {"EXEC"}}
		case 11:
			if rng.IntN(20) == 0 {
				args = [][]any{{"FLUSHDB"}}
			} else {
				args = [][]any{{"UNLINK", key}}
			}
		}
		conn := rdb.Conn()
		if err := conn.Do(ctx, "SELECT", db).Err(); err != nil {
			t.Fatal(err)
		}
		for _, a := range args {
			if err := conn.Do(ctx, a...).Err(); err != nil && err != redis.Nil && !strings.HasPrefix(err.Error(), "WRONGTYPE") {
				t.Fatalf("%v: %v", a, err)
			}
		}
		conn.Close()
	}
}

// TestReplicationInProcess: two replicas follow a primary through random
// writes in several databases, a partial resync, a full resync forced by
// a small backlog, and a promotion; every node ends with the same entries,
// byte for byte.
func TestReplicationInProcess(t *testing.T) {
	ctx := context.Background()
	primary := startNode(t, server.Config{ReplBacklogSize: 64 << 10})
	ph, pp := primary.hostPort()
	a := startNode(t, server.Config{ReplicaOf: ph + " " + pp})
	b := startNode(t, server.Config{})
	if err := b.rdb.Do(ctx, "REPLICAOF", ph, pp).Err(); err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(7, 8))
	ops := 0
	randomWrites(t, primary.rdb, rng, 1500)
	ops += 1500
	waitInSync(t, primary, a, b)
	sameState(t, primary, a)
	sameState(t, primary, b)

	// Writes on a replica are refused, reads served.
	if err := a.rdb.Do(ctx, "SET", "x", "1").Err(); err == nil || err.Error() != "READONLY You can't write against a read only replica." {
		t.Fatalf("SET on a replica: %v", err)
	}
	if err := a.rdb.Do(ctx, "CL.PEEK", "k1", 5, 10, 60).Err(); err != nil {
		t.Fatalf("CL.PEEK on a replica: %v", err)
	}

	// WAIT: both replicas acknowledge a write.
	c := primary.rdb.Conn()
	if err := c.Do(ctx, "CL.THROTTLE", "waited", 5, 10, 60).Err(); err != nil {
		t.Fatal(err)
	}
	if n, err := c.Do(ctx, "WAIT", 2, 5000).Int(); err != nil || n != 2 {
		t.Fatalf("WAIT 2 5000 = %d, %v; want 2", n, err)
	}
	if n, err := c.Do(ctx, "WAIT", 3, 50).Int(); err != nil || n != 2 {
		t.Fatalf("WAIT 3 50 = %d, %v; want 2 after the timeout", n, err)
	}
	c.Close()

	// Partial resync: b follows a primary that is not there (keeping its
	// replication ID and offset), then comes back within the backlog.
	partial0, _ := strconv.Atoi(primary.info(t, "sync_partial_ok"))
	if err := b.rdb.Do(ctx, "REPLICAOF", "127.0.0.1", 1).Err(); err != nil {
		t.Fatal(err)
	}
	randomWrites(t, primary.rdb, rng, 100)
	ops += 100
	if err := b.rdb.Do(ctx, "REPLICAOF", ph, pp).Err(); err != nil {
		t.Fatal(err)
	}
	waitInSync(t, primary, a, b)
	if p, _ := strconv.Atoi(primary.info(t, "sync_partial_ok")); p != partial0+1 {
		t.Fatalf("sync_partial_ok went from %d to %d, want one partial resync", partial0, p)
	}
	sameState(t, primary, b)

	// Full resync: b falls out of the 64 KiB backlog. (a may too, if it
	// lags that far on a loaded machine: then it resyncs in full as well,
	// which is right; what is counted here is b's.)
	full0, _ := strconv.Atoi(primary.info(t, "sync_full"))
	bFull0 := b.srv.Commands().Replication().Stats().FullSyncsReceived
	if err := b.rdb.Do(ctx, "REPLICAOF", "127.0.0.1", 1).Err(); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3000; i++ {
		if err := primary.rdb.Do(ctx, "CL.THROTTLE", "fill"+strconv.Itoa(i), 5, 10, 60).Err(); err != nil {
			t.Fatal(err)
		}
	}
	ops += 3000
	if err := b.rdb.Do(ctx, "REPLICAOF", ph, pp).Err(); err != nil {
		t.Fatal(err)
	}
	waitInSync(t, primary, a, b)
	if f, _ := strconv.Atoi(primary.info(t, "sync_full")); f < full0+1 {
		t.Fatalf("sync_full went from %d to %d, want a full resync", full0, f)
	}
	if got := b.srv.Commands().Replication().Stats().FullSyncsReceived; got != bFull0+1 {
		t.Fatalf("b received %d full copies, want %d", got, bFull0+1)
	}
	sameState(t, primary, a)
	keys := sameState(t, primary, b)

	// Promotion: a becomes the primary; b follows it and continues from
	// a's backlog (same history), then takes a's new writes.
	if err := a.rdb.Do(ctx, "REPLICAOF", "NO", "ONE").Err(); err != nil {
		t.Fatal(err)
	}
	if got := a.info(t, "master_replid2"); got != primary.info(t, "master_replid") {
		t.Fatalf("promoted replica's master_replid2 %s, want the old primary's ID %s", got, primary.info(t, "master_replid"))
	}
	ah, ap := a.hostPort()
	if err := b.rdb.Do(ctx, "REPLICAOF", ah, ap).Err(); err != nil {
		t.Fatal(err)
	}
	randomWrites(t, a.rdb, rng, 300)
	ops += 300
	waitInSync(t, a, b)
	// b continues from a's backlog, unless a keepalive reached b and not
	// a before the promotion (b is then ahead, and takes a full copy).
	if p, f := a.info(t, "sync_partial_ok"), a.info(t, "sync_full"); p+f != "10" && p+f != "01" {
		t.Fatalf("the new primary served sync_partial_ok %s, sync_full %s: want one resync", p, f)
	}
	sameState(t, a, b)
	t.Logf("%d random operations; %d entries compared byte for byte on each replica after the full resync", ops, keys)
}

// TestReplicationMetrics: a primary with a replica reports its role, the
// replica attached and the full resync it served; the replica reports its
// link up and the full copy it received.
func TestReplicationMetrics(t *testing.T) {
	psrv, paddr := servertest.Start(t, server.Config{MetricsAddr: "127.0.0.1:0", Metrics: metrics.ServerHandler})
	h, p, _ := strings.Cut(paddr, ":")
	rsrv, _ := servertest.Start(t, server.Config{MetricsAddr: "127.0.0.1:0", Metrics: metrics.ServerHandler, ReplicaOf: h + " " + p})
	want := map[*server.Server][]string{
		psrv: {"cellserver_replication_replica 0", "cellserver_replication_connected_replicas 1",
			"cellserver_replication_full_resyncs_total 1", "cellserver_replication_link_up 1"},
		rsrv: {"cellserver_replication_replica 1", "cellserver_replication_connected_replicas 0",
			"cellserver_replication_full_resyncs_received_total 1", "cellserver_replication_link_up 1",
			"cellserver_replication_link_down_seconds 0"},
	}
	for srv, lines := range want {
		base := "http://" + srv.MetricsAddr().String()
		testwait.For(t, 20*time.Second, "replication metrics on "+base, func() (bool, string) {
			_, body := get(t, base+"/metrics")
			for _, l := range lines {
				if !strings.Contains(body, l+"\n") {
					return false, "no line " + l
				}
			}
			return true, ""
		})
	}
}
