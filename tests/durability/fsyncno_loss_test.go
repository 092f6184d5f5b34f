package durability

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/cellserver/cellserver/internal/binproc"
)

// TestFsyncNoLossWindow is a measurement, not a pass/fail test: it runs
// only with CELLSERVER_FSYNCNO_LOSS=<rounds> (bench/fsyncno-loss.sh). Each
// round starts the binary with --fsync no on 127.0.0.1, lets 8 clients SET
// their own counter key as fast as they can (CELLSERVER_FSYNCNO_PIPELINE
// commands at a time, default 1, each reply recorded with the time it
// arrived; CELLSERVER_FSYNCNO_MODE picks another fsync policy), kills the process with SIGKILL
// after 0.5-1.5 s, restarts it and reads the counters back. A client's loss
// is the time between the reply of the last write that survived and the
// reply of its last acknowledged write, and the number of acknowledged
// writes missing. It prints every round and the distribution.
func TestFsyncNoLossWindow(t *testing.T) {
	rounds, _ := strconv.Atoi(os.Getenv("CELLSERVER_FSYNCNO_LOSS"))
	if rounds <= 0 {
		t.Skip("a measurement: set CELLSERVER_FSYNCNO_LOSS=<rounds> (bench/fsyncno-loss.sh)")
	}
	binproc.Binary(t)
	mode := os.Getenv("CELLSERVER_FSYNCNO_MODE")
	if mode == "" {
		mode = "no"
	}
	const clients = 8
	pipeline, _ := strconv.Atoi(os.Getenv("CELLSERVER_FSYNCNO_PIPELINE"))
	pipeline = max(pipeline, 1)
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 1))
	var lossMS []float64
	var lostOps []int
	for r := range rounds {
		dir := t.TempDir()
		p := startServer(t, "--data-dir", dir, "--fsync", mode)
		acks := make([][]time.Time, clients) // acks[c][n-1]: reply to SET c n
		var wg sync.WaitGroup
		stop := make(chan struct{})
		for c := range clients {
			wg.Add(1)
			go func() {
				defer wg.Done()
				rdb := client(p.addr, 1)
				defer rdb.Close()
				key := fmt.Sprintf("counter:%d", c)
				for n := 1; ; n += pipeline {
					select {
					case <-stop:
						return
					default:
					}
					pipe := rdb.Pipeline()
					for i := range pipeline {
						pipe.Set(context.Background(), key, n+i, 0)
					}
					if _, err := pipe.Exec(context.Background()); err != nil {
						return // the server is gone
					}
					now := time.Now()
					for range pipeline {
						acks[c] = append(acks[c], now)
					}
				}
			}()
		}
		time.Sleep(500*time.Millisecond + time.Duration(rng.IntN(1000))*time.Millisecond) // a benchmark: a random kill instant
		p.kill(t)
		close(stop)
		wg.Wait()
		q := startServer(t, "--data-dir", dir)
		rdb := client(q.addr, 1)
		var roundMax float64
		roundLost := 0
		for c := range clients {
			got, err := rdb.Get(context.Background(), fmt.Sprintf("counter:%d", c)).Int()
			if err == redis.Nil {
				got = 0
			} else if err != nil {
				t.Fatalf("GET counter:%d: %v", c, err)
			}
			acked := len(acks[c])
			if acked == 0 {
				continue
			}
			lost := max(acked-got, 0)
			ms := 0.0
			if lost > 0 {
				from := acks[c][0].Add(-time.Millisecond) // nothing survived: count from the first
				if got > 0 {
					from = acks[c][got-1]
				}
				ms = float64(acks[c][acked-1].Sub(from).Microseconds()) / 1000
			}
			lossMS = append(lossMS, ms)
			lostOps = append(lostOps, lost)
			roundMax = max(roundMax, ms)
			roundLost += lost
		}
		rdb.Close()
		q.stop(t)
		t.Logf("round %d: %d acknowledged writes lost over %d clients; largest window %.1f ms", r+1, roundLost, clients, roundMax)
	}
	slices.Sort(lossMS)
	slices.Sort(lostOps)
	pct := func(p float64) float64 { return lossMS[min(len(lossMS)-1, int(p*float64(len(lossMS))))] }
	t.Logf("fsync %s, pipeline %d, kill -9, %d rounds x %d clients: acknowledged state lost per client: median %.1f ms, p90 %.1f ms, max %.1f ms; lost writes per client: median %d, max %d",
		mode, pipeline, rounds, clients, pct(0.5), pct(0.9), lossMS[len(lossMS)-1], lostOps[len(lostOps)/2], lostOps[len(lostOps)-1])
}
