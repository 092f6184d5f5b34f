package durability

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/cellserver/cellserver/internal/binproc"
)

// TestSlidingLogLoadReloadsIdentical: CL.SLIDINGLOG under load (8
// clients, 100 keys, limit 100000, period 1h: every request is admitted and
// each one grows its key's log by 16 bytes, so the values, and the batches
// the write queue hands to Pebble, grow past the queue's reusable buffer
// sizes), then a clean SIGTERM: the server must start again from the
// directory, and every key must hold exactly the entries the clients were
// told were admitted, with the same oldest and newest timestamps.
// CELLSERVER_SLIDINGLOG_SECONDS sets the load's duration (default 6).
func TestSlidingLogLoadReloadsIdentical(t *testing.T) {
	binproc.Binary(t)
	secs := 6
	if s := os.Getenv("CELLSERVER_SLIDINGLOG_SECONDS"); s != "" {
		fmt.Sscan(s, &secs)
	}
	const clients, keys = 8, 100
	for _, mode := range []string{"everysec", "no"} {
		t.Run(mode, func(t *testing.T) {
			dir := t.TempDir()
			p := startServer(t, "--data-dir", dir, "--fsync", mode)
			rdb := client(p.addr, clients)
			defer rdb.Close()
			ctx, cancel := context.WithTimeout(context.Background(), time.Duration(secs)*time.Second)
			defer cancel()
			var mu sync.Mutex
			admitted := make([]int64, keys)
			var wg sync.WaitGroup
			errc := make(chan error, clients)
			for c := range clients {
				wg.Add(1)
				go func() {
					defer wg.Done()
					n := make([]int64, keys)
					defer func() {
						mu.Lock()
						for k, v := range n {
							admitted[k] += v
						}
						mu.Unlock()
					}()
					for i := c; ; i++ {
						k := (i * 7) % keys
						pipe := rdb.Pipeline()
						cmds := make([]*redisCmd, 0, 16)
						for j := range 16 {
							kj := (k + j) % keys
							cmds = append(cmds, &redisCmd{k: kj, c: pipe.Do(context.Background(), "CL.SLIDINGLOG", fmt.Sprintf("log:%d", kj), 100000, "1h")})
						}
						if ctx.Err() != nil {
							return
						}
						if _, err := pipe.Exec(context.Background()); err != nil {
							errc <- err
							return
						}
						for _, rc := range cmds {
							v, err := rc.c.Slice()
							if err != nil || len(v) == 0 {
								errc <- fmt.Errorf("CL.SLIDINGLOG reply %v, %v", v, err)
								return
							}
							if v[0] == int64(0) {
								n[rc.k]++
							}
						}
					}
				}()
			}
			wg.Wait()
			close(errc)
			for err := range errc {
				t.Fatal(err)
			}
			before := readLogs(t, p.addr, keys)
			var total int64
			for k, n := range admitted {
				total += n
				// Units, not entries: a request whose time is not after the
				// newest entry's (two clients' clocks, read on different
				// event loops, can be a few ns apart) joins that entry.
				if before[k].units != n {
					t.Fatalf("log:%d holds %d units before the restart, clients were told %d were admitted", k, before[k].units, n)
				}
			}
			p.stop(t)
			q := startServer(t, "--data-dir", dir)
			after := readLogs(t, q.addr, keys)
			bad := 0
			for k := range keys {
				if after[k] != before[k] {
					if bad < 5 {
						t.Errorf("log:%d after the restart %+v, before %+v", k, after[k], before[k])
					}
					bad++
				}
			}
			if bad > 0 {
				t.Errorf("%d of %d keys differ after the restart", bad, keys)
			}
			t.Logf("fsync %s: %d requests admitted over %d keys in %ds; largest log %d entries", mode, total, keys, secs, maxEntries(before))
		})
	}
}

type redisCmd struct {
	k int
	c interface{ Slice() ([]any, error) }
}

type logState struct {
	entries, units, oldest, newest int64
}

func maxEntries(s []logState) int64 {
	var m int64
	for _, l := range s {
		m = max(m, l.entries)
	}
	return m
}

// readLogs reads the CL.INFO fields of log:0..n-1 (ttl_ms left out: it
// moves with time).
func readLogs(t *testing.T, addr string, n int) []logState {
	t.Helper()
	rdb := client(addr, 1)
	defer rdb.Close()
	out := make([]logState, n)
	for k := range n {
		v, err := rdb.Do(context.Background(), "CL.INFO", fmt.Sprintf("log:%d", k)).Slice()
		if err != nil {
			t.Fatalf("CL.INFO log:%d: %v", k, err)
		}
		for i := 0; i+1 < len(v); i += 2 {
			x, _ := v[i+1].(int64)
			switch v[i] {
			case "entries":
				out[k].entries = x
			case "units":
				out[k].units = x
			case "oldest_ms":
				out[k].oldest = x
			case "newest_ms":
				out[k].newest = x
			}
		}
	}
	return out
}
