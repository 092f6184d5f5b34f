package repl

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// TestStreamDeltasDuringFullSync: streams written to while a replica
// takes its full copy. The changes made since the copy began arrive
// between the shards' entries, some before their stream's shard is
// copied (the replica holds nothing of it yet): the replica must finish
// the copy at once, not drop the link and start over, and end equal to
// the primary, stream by stream (DUMP).
func TestStreamDeltasDuringFullSync(t *testing.T) {
	cellserver.need(t)
	ctx := context.Background()
	p := cellserver.start(t, "primary", nodeOpts{})
	// Enough keys that the copy takes a while, and 64 streams spread
	// over the shards.
	pipe := p.rdb.Pipeline()
	for i := range 60000 {
		pipe.Set(ctx, fmt.Sprintf("pad:%d", i), "x", 0)
		if i%1000 == 999 {
			if _, err := pipe.Exec(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	const streams = 64
	for i := range streams {
		for j := range 20 {
			pipe.XAdd(ctx, &redis.XAddArgs{Stream: fmt.Sprintf("s:%d", i), Values: []any{"n", j}})
		}
	}
	if _, err := pipe.Exec(ctx); err != nil {
		t.Fatal(err)
	}
	var stop atomic.Bool
	var wg sync.WaitGroup
	var writes atomic.Int64
	for w := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 7))
			for !stop.Load() {
				k := "s:" + strconv.Itoa(rng.IntN(streams))
				if err := p.rdb.XAdd(ctx, &redis.XAddArgs{Stream: k, MaxLen: 50, Approx: true, Values: []any{"w", w}}).Err(); err != nil {
					if !stop.Load() {
						t.Error(err)
					}
					return
				}
				writes.Add(1)
			}
		}()
	}
	t.Cleanup(func() { stop.Store(true); wg.Wait() }) // before the nodes stop
	r := cellserver.start(t, "replica", nodeOpts{replicaOf: "127.0.0.1 " + portOf(p)})
	linkUp(t, 60*time.Second, r)
	stop.Store(true)
	wg.Wait()
	caughtUp(t, 30*time.Second, p, r)
	full := p.infoInt(t, "stats", "sync_full")
	if full != 1 {
		t.Errorf("the primary served %d full syncs, want 1 (the replica dropped the link during its copy)", full)
	}
	keys := compareNodes(t, 1, p, r)
	t.Logf("%d stream writes during the sync; %d keys equal on both nodes after %d full sync(s)", writes.Load(), keys, full)
}
