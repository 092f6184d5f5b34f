package server_test

import (
	"context"
	"testing"
	"time"

	"github.com/cellserver/cellserver/cellservertest"
	"github.com/cellserver/cellserver/persistence/changelog"
	"github.com/cellserver/cellserver/persistence/pebblestore"
	"github.com/cellserver/cellserver/server"
	"github.com/redis/go-redis/v9"
)

// gcraCall runs Redis's draft GCRA command and returns its five integers.
func gcraCall(t *testing.T, n *node, args ...any) []int64 {
	t.Helper()
	v, err := n.rdb.Do(context.Background(), append([]any{"GCRA"}, args...)...).Int64Slice()
	if err != nil || len(v) != 5 {
		t.Fatalf("GCRA %v on %s: %v, %v", args, n.addr, v, err)
	}
	return v
}

// TestGCRAReplicated: the draft GCRA command's state (a string holding
// the TAT in microseconds, with its expiry) reaches a replica exactly,
// and the replica, promoted, limits where the primary would have.
func TestGCRAReplicated(t *testing.T) {
	ctx := context.Background()
	primary := startNode(t, server.Config{})
	ph, pp := primary.hostPort()
	replica := startNode(t, server.Config{ReplicaOf: ph + " " + pp})
	for i := 0; i < 3; i++ {
		if got := gcraCall(t, primary, "g", 2, 1, 3600); got[0] != 0 {
			t.Fatalf("call %d limited: %v", i, got)
		}
	}
	waitInSync(t, primary, replica)
	if n := sameState(t, primary, replica); n != 1 {
		t.Fatalf("%d keys compared, want 1", n)
	}
	want, _ := primary.rdb.Get(ctx, "g").Result()
	if got, err := replica.rdb.Get(ctx, "g").Result(); err != nil || got != want {
		t.Fatalf("replica GET g = %q, %v; primary has %q", got, err, want)
	}
	if err := replica.rdb.Do(ctx, "GCRA", "g", 2, 1, 3600).Err(); err == nil || err.Error() != "READONLY You can't write against a read only replica." {
		t.Fatalf("GCRA on a replica: %v", err)
	}
	if err := replica.rdb.Do(ctx, "REPLICAOF", "NO", "ONE").Err(); err != nil {
		t.Fatal(err)
	}
	if got := gcraCall(t, replica, "g", 2, 1, 3600); got[0] != 1 || got[3] < 3590 {
		t.Fatalf("promoted replica: %v, want limited for about an hour", got)
	}
}

// TestGCRAPersisted: with a data directory the draft GCRA command's
// state survives a restart, TTL included.
func TestGCRAPersisted(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s := cellservertest.Run(t, cellservertest.WithConfig(func(c *server.Config) {
		c.DataDir, c.OpenStore, c.Fsync = dir, changelog.Opener(pebblestore.OpenStore, changelog.Options{}), "always"
	}))
	n := &node{addr: s.Addr()}
	n.rdb = newGCRAClient(t, s.Addr())
	gcraCall(t, n, "p", 1, 1, 3600)
	gcraCall(t, n, "p", 1, 1, 3600)
	before, _ := n.rdb.Get(ctx, "p").Result()
	if err := s.Restart(); err != nil {
		t.Fatalf("Restart: %v", err)
	}
	if after, err := n.rdb.Get(ctx, "p").Result(); err != nil || after != before {
		t.Fatalf("GET p after restart = %q, %v; want %q", after, err, before)
	}
	if ttl, err := n.rdb.PTTL(ctx, "p").Result(); err != nil || ttl < time.Hour {
		t.Fatalf("PTTL p after restart = %v, %v; want about two hours", ttl, err)
	}
	if got := gcraCall(t, n, "p", 1, 1, 3600); got[0] != 1 {
		t.Fatalf("after a restart: %v, want limited (the state survived)", got)
	}
}

func newGCRAClient(t *testing.T, addr string) *redis.Client {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: addr, Protocol: 2})
	t.Cleanup(func() { rdb.Close() })
	return rdb
}
