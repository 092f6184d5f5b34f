// Command loadkeys creates N distinct rate-limit keys on a Redis-protocol
// server with pipelined requests, for bench/memory.sh, bench/limiters.sh
// and bench/persistence.sh.
//
//	loadkeys -addr 127.0.0.1:6379 -n 1000000                      # CL.THROTTLE
//	loadkeys -addr 127.0.0.1:6380 -n 1000000 -evalsha <sha>       # EVALSHA <sha> 1 <key> ...
//	loadkeys -addr 127.0.0.1:6379 -n 100000 -cmd CL.FIXED -args "5 1h"  # another limiter
//
// Key i is "<prefix><i>" for i in [0, n); every request is
// CL.THROTTLE <key> <args> (or EVALSHA <sha> 1 <key> <args>) and must be
// answered with an array of 5 integers, else loadkeys exits 1; so it does
// when DBSIZE is below n at the end. It only
// talks to the address it is given; the run is bounded by n and -timeout.
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
	prefix := flag.String("prefix", "mem:key:", "key prefix")
	args := flag.String("args", "15 1 3600", "CL.THROTTLE arguments after the key (default: a TTL of one hour)")
	sha := flag.String("evalsha", "", "run EVALSHA with this script SHA instead of CL.THROTTLE")
	command := flag.String("cmd", "CL.THROTTLE", "the limiter command to send (CL.FIXED, CL.SLIDING, ...); its reply must be 5 integers")
	batch := flag.Int("pipeline", 1000, "commands per pipeline")
	conns := flag.Int("conns", 4, "parallel connections")
	timeout := flag.Duration("timeout", 5*time.Minute, "give up after this long")
	flag.Parse()

	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	rdb := redis.NewClient(&redis.Options{Addr: *addr, Protocol: 2, PoolSize: *conns})
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
					key := *prefix + strconv.Itoa(i)
					var a []any
					if *sha != "" {
						a = append([]any{"EVALSHA", *sha, 1, key}, rest...)
					} else {
						a = append([]any{*command, key}, rest...)
					}
					cmds = append(cmds, pipe.Do(ctx, a...))
				}
				if _, err := pipe.Exec(ctx); err != nil {
					fmt.Fprintf(os.Stderr, "loadkeys: %v\n", err)
					failed.Store(true)
					return
				}
				for _, c := range cmds {
					if v, err := c.Slice(); err != nil || len(v) != 5 {
						fmt.Fprintf(os.Stderr, "loadkeys: %v: reply %v, %v\n", c.Args(), v, err)
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
		fmt.Fprintf(os.Stderr, "loadkeys: DBSIZE %d after writing %d keys (%v)\n", size, *n, err)
		os.Exit(1)
	}
	fmt.Printf("loadkeys: %d keys in %.2fs (%.0f/s), DBSIZE %d\n", *n, el.Seconds(), float64(*n)/el.Seconds(), size)
}
