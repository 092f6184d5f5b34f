// Command persistload fills a Redis-protocol server with N distinct
// rate-limit keys using pipelined requests, for bench/persistence.sh (the
// startup load time of a data directory holding N keys).
//
//	persistload -addr 127.0.0.1:6379 -n 1000000
//
// Key i is "<prefix><i>" for i in [0, n); each gets one
// "CL.THROTTLE <key> <args>" (default "15 1 3600": a one-hour TTL, so that
// nothing expires before the restart), which must be answered with an
// array of 5 integers, else persistload exits 1. At the end it checks that
// DBSIZE is at least n. It only talks to the address it is given and stops
// after n keys or -timeout.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:6379", "server `address`")
	n := flag.Int("n", 1000000, "number of distinct keys")
	prefix := flag.String("prefix", "load:key:", "key prefix")
	args := flag.String("args", "15 1 3600", "CL.THROTTLE arguments after the key")
	batch := flag.Int("pipeline", 1000, "commands per pipeline")
	conns := flag.Int("conns", 4, "parallel connections")
	timeout := flag.Duration("timeout", 5*time.Minute, "give up after this long")
	flag.Parse()

	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	rdb := redis.NewClient(&redis.Options{Addr: *addr, Protocol: 2, DisableIdentity: true,
		PoolSize: *conns, MaxRetries: -1, ReadTimeout: time.Minute, WriteTimeout: time.Minute})
	defer rdb.Close()

	var rest []any
	for _, a := range strings.Fields(*args) {
		rest = append(rest, a)
	}
	var next atomic.Int64
	var failed atomic.Bool
	var wg sync.WaitGroup
	start := time.Now()
	for range *conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !failed.Load() {
				lo := int(next.Add(int64(*batch))) - *batch
				if lo >= *n {
					return
				}
				hi := min(lo+*batch, *n)
				pipe := rdb.Pipeline()
				cmds := make([]*redis.Cmd, 0, hi-lo)
				for i := lo; i < hi; i++ {
					a := append([]any{"CL.THROTTLE", *prefix + strconv.Itoa(i)}, rest...)
					cmds = append(cmds, pipe.Do(ctx, a...))
				}
				if _, err := pipe.Exec(ctx); err != nil {
					fmt.Fprintf(os.Stderr, "persistload: %v\n", err)
					failed.Store(true)
					return
				}
				for _, c := range cmds {
					if v, err := c.Slice(); err != nil || len(v) != 5 {
						fmt.Fprintf(os.Stderr, "persistload: %v: reply %v, %v\n", c.Args(), v, err)
						failed.Store(true)
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	if failed.Load() {
		os.Exit(1)
	}
	el := time.Since(start)
	size, err := rdb.DBSize(ctx).Result()
	if err != nil || size < int64(*n) {
		fmt.Fprintf(os.Stderr, "persistload: DBSIZE %d after writing %d keys (%v)\n", size, *n, err)
		os.Exit(1)
	}
	fmt.Printf("persistload: %d keys in %.2fs (%.0f/s), DBSIZE %d\n", *n, el.Seconds(), float64(*n)/el.Seconds(), size)
}
