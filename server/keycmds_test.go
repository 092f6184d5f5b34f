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

// keyCmds runs RENAME, RENAMENX, COPY (to another database too),
// EXPIREAT and PEXPIREAT (a past time among them: a deletion) on rdb,
// whose clock reads now.
func keyCmds(t *testing.T, rdb *redis.Client, now time.Time) {
	t.Helper()
	ctx := context.Background()
	at := now.Add(time.Hour)
	cmds := [][]any{
		{"SET", "a", "1"}, {"SET", "b", "2"}, {"SET", "gone", "x"}, {"CL.THROTTLE", "lim", "5", "1", "3600"},
		{"RENAME", "a", "a2"}, {"RENAMENX", "b", "b2"}, {"RENAME", "lim", "lim2"},
		{"COPY", "a2", "c"}, {"COPY", "lim2", "lim3", "DB", "3"}, {"COPY", "b2", "a2", "REPLACE"},
		{"EXPIREAT", "c", at.Unix()}, {"PEXPIREAT", "a2", at.UnixMilli()}, {"EXPIREAT", "gone", 1},
	}
	for _, c := range cmds {
		if err := rdb.Do(ctx, c...).Err(); err != nil {
			t.Fatalf("%v: %v", c, err)
		}
	}
}

// The key commands reach replicas as changes: the replica ends with the
// primary's exact state (sameState compares every database's encoded
// values, expiries included).
func TestKeyCommandsReplicated(t *testing.T) {
	primary := startNode(t, server.Config{})
	ph, pp := primary.hostPort()
	replica := startNode(t, server.Config{ReplicaOf: ph + " " + pp})
	waitInSync(t, primary, replica)
	keyCmds(t, primary.rdb, time.Now())
	waitInSync(t, primary, replica)
	if n := sameState(t, primary, replica); n != 5 {
		t.Errorf("%d keys compared, want 5 (a2, b2, c, lim2, and lim3 in database 3)", n)
	}
}

// With a data directory their effects survive a restart.
func TestKeyCommandsPersisted(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s := cellservertest.Run(t, cellservertest.WithConfig(func(c *server.Config) {
		c.DataDir, c.OpenStore, c.Fsync = dir, changelog.Opener(pebblestore.OpenStore, changelog.Options{}), "always"
	}))
	rdb := redis.NewClient(&redis.Options{Addr: s.Addr(), Protocol: 2})
	t.Cleanup(func() { rdb.Close() })
	keyCmds(t, rdb, s.Now())
	cutoff := s.Now().Add(30 * time.Second).UnixMilli()
	want := dump(s.Server().Commands().Keyspace(), cutoff)
	if err := s.Restart(); err != nil {
		t.Fatalf("Restart: %v", err)
	}
	got := dump(s.Server().Commands().Keyspace(), cutoff)
	if len(want) != 5 || len(got) != len(want) {
		t.Fatalf("after restart %d keys, before %d (want 5)", len(got), len(want))
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s after restart: %x, before %x", k, got[k], v)
		}
	}
	if n, err := rdb.Exists(ctx, "a", "b", "gone", "lim").Result(); err != nil || n != 0 {
		t.Errorf("EXISTS of the renamed and deleted keys after restart = %d, %v", n, err)
	}
}
