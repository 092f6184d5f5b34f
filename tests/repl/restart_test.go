package repl

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/cellserver/cellserver/internal/testwait"
)

// TestRestartedPrimaryDropsItsState: a former primary restarted from its
// data directory (holding writes the new primary never saw) and made a
// replica of the new primary takes a full copy and drops its own state,
// in memory and on disk: restarted again from the same directory, it holds
// the new primary's keys and none of its own.
func TestRestartedPrimaryDropsItsState(t *testing.T) {
	cellserver.need(t)
	ctx := context.Background()
	dir := t.TempDir()
	b := cellserver.start(t, "new-primary", nodeOpts{})
	for i := 0; i < 200; i++ {
		if err := b.rdb.Do(ctx, "CL.THROTTLE", fmt.Sprintf("b:%d", i), 5, 10, 3600).Err(); err != nil {
			t.Fatal(err)
		}
	}
	disk := nodeOpts{extra: []string{"--data-dir", dir, "--fsync", "always"}}
	a := cellserver.start(t, "old-primary", disk)
	for i := 0; i < 300; i++ {
		if err := a.rdb.Do(ctx, "SET", fmt.Sprintf("a:%d", i), "only-on-a").Err(); err != nil {
			t.Fatal(err)
		}
	}
	a.kill() // kill -9: fsync always, so every acknowledged SET is on disk
	a = cellserver.start(t, "old-primary-restarted", disk)
	if n, err := a.rdb.DBSize(ctx).Result(); err != nil || n != 300 {
		t.Fatalf("restarted from its data directory: DBSIZE %d, %v; want 300", n, err)
	}
	if err := a.rdb.Do(ctx, "REPLICAOF", "127.0.0.1", portOf(b)).Err(); err != nil {
		t.Fatal(err)
	}
	linkUp(t, 30*time.Second, a)
	caughtUp(t, 30*time.Second, b, a)
	keys := compareNodes(t, 1, b, a)
	// What the link applied is written behind, as any change is: wait
	// for the writer (fsync always syncs each batch it writes).
	testwait.For(t, 30*time.Second, "the replica's changes written to its data directory", func() (bool, string) {
		p := a.info(t, "persistence")["pending_changes"]
		return p == "0", "pending_changes:" + p
	})
	a.kill()
	a = cellserver.start(t, "old-primary-restarted-again", disk)
	if n, err := a.rdb.Exists(ctx, "a:0", "a:299").Result(); err != nil || n != 0 {
		t.Fatalf("its own keys came back from disk: EXISTS a:0 a:299 = %d, %v", n, err)
	}
	if n, err := a.rdb.DBSize(ctx).Result(); err != nil || n != 200 {
		t.Fatalf("restarted again: DBSIZE %d, %v; want the new primary's 200 keys", n, err)
	}
	t.Logf("300 keys of the old primary dropped in memory and on disk; %d keys equal to the new primary's", keys)
}

func portOf(n *node) string {
	_, p, _ := cutLast(n.addr)
	return p
}

func cutLast(addr string) (string, string, bool) {
	for i := len(addr) - 1; i >= 0; i-- {
		if addr[i] == ':' {
			return addr[:i], addr[i+1:], true
		}
	}
	return addr, "", false
}
