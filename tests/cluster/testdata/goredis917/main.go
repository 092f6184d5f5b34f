// Command goredis917 runs tests/cluster's go-redis load with go-redis
// v9.17.x (pinned in this module's go.mod), whose ClusterClient routes a
// command it does not know by argv[1] without asking COMMAND. Three
// ClusterClients, each seeded with one of -seeds, run concurrently over
// keys <prefix>:user:<i>, each calling every key -calls-per-client times,
// and it prints, as JSON, how many keys had how many calls admitted.
//
// With -follow it takes part in tests/cluster's node loss instead: one
// ClusterClient seeded with every node calls each key once and prints
// {"phase":"ready"}; on the line "killed <addr>" from stdin every key whose
// master (in its slot map) is alive must be served and the first 2 of the
// dead node's fail ({"phase":"killed",...}); on "pushed" it calls
// ReloadState and retries the dead node's keys until all are served, 15 s
// at most ({"phase":"followed",...}).
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

func main() {
	seeds := flag.String("seeds", "", "comma-separated node addresses, one client per address")
	prefix := flag.String("prefix", "gr917", "key prefix")
	n := flag.Int("n", 10000, "keys")
	mode := flag.String("mode", "throttle", "throttle (CL.THROTTLE key burst 1 3600) or incr (INCR key)")
	burst := flag.Int("burst", 4, "max_burst; a key admits burst+1 calls")
	per := flag.Int("calls-per-client", 2, "calls on each key by each client")
	workers := flag.Int("workers", 4, "goroutines per client")
	followMode := flag.Bool("follow", false, "node-loss mode driven over stdin (see the package comment)")
	flag.Parse()
	limit := int64(*burst + 1)
	if *followMode {
		follow(strings.Split(*seeds, ","), *prefix, *n, *mode, *burst)
		return
	}

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	admitted := make([]int32, *n)
	var errs atomic.Int64
	var mu sync.Mutex
	var firstErrs []string
	addrs := strings.Split(*seeds, ",")
	var wg sync.WaitGroup
	start := time.Now()
	for j, a := range addrs {
		cl := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{a},
			DialTimeout: time.Second, ReadTimeout: 5 * time.Second, WriteTimeout: 5 * time.Second})
		defer cl.Close()
		for w := 0; w < *workers; w++ {
			wg.Add(1)
			go func(j, w int) {
				defer wg.Done()
				for idx := w; idx < *n; idx += *workers {
					i := (idx + j**n/len(addrs)) % *n
					key := fmt.Sprintf("%s:user:%d", *prefix, i)
					for c := 0; c < *per; c++ {
						var args []any
						if *mode == "incr" {
							args = []any{"INCR", key}
						} else {
							args = []any{"CL.THROTTLE", key, *burst, 1, 3600}
						}
						v, err := cl.Do(ctx, args...).Result()
						if err == nil {
							switch r := v.(type) {
							case int64:
								if *mode == "incr" && r <= limit {
									atomic.AddInt32(&admitted[i], 1)
								}
							case []any:
								if d, ok := r[0].(int64); ok && len(r) == 5 && *mode == "throttle" {
									if d == 0 {
										atomic.AddInt32(&admitted[i], 1)
									}
								} else {
									err = fmt.Errorf("reply %#v", v)
								}
							default:
								err = fmt.Errorf("reply %#v", v)
							}
						}
						if err != nil {
							errs.Add(1)
							mu.Lock()
							if len(firstErrs) < 5 {
								firstErrs = append(firstErrs, key+": "+err.Error())
							}
							mu.Unlock()
						}
					}
				}
			}(j, w)
		}
	}
	wg.Wait()
	hist := map[string]int{}
	for _, a := range admitted {
		hist[fmt.Sprint(a)]++
	}
	out := map[string]any{
		"client": "go-redis", "version": redis.Version(), "hist": hist, "errors": errs.Load(),
		"firstErrors": firstErrs, "calls": len(addrs) * *per * *n, "ms": time.Since(start).Milliseconds(),
		"note": fmt.Sprintf("(%d clients x %d workers)", len(addrs), *workers),
	}
	if err := json.NewEncoder(os.Stdout).Encode(out); err != nil {
		os.Exit(1)
	}
}

func emit(v map[string]any) {
	if err := json.NewEncoder(os.Stdout).Encode(v); err != nil {
		os.Exit(1)
	}
}

func follow(seeds []string, prefix string, n int, mode string, burst int) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cl := redis.NewClusterClient(&redis.ClusterOptions{Addrs: seeds,
		DialTimeout: 500 * time.Millisecond, ReadTimeout: 2 * time.Second, WriteTimeout: 2 * time.Second,
		MaxRedirects: 1, DialerRetries: 1, MinRetryBackoff: -1, MaxRetryBackoff: -1})
	defer cl.Close()
	call := func(key string) error {
		args := []any{"CL.THROTTLE", key, burst, 1, 3600}
		if mode == "incr" {
			args = []any{"INCR", key}
		}
		return cl.Do(ctx, args...).Err()
	}
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("%s:user:%d", prefix, i)
		if err := call(keys[i]); err != nil {
			fmt.Fprintln(os.Stderr, keys[i], err)
			os.Exit(1)
		}
	}
	emit(map[string]any{"phase": "ready", "n": n})
	in := bufio.NewScanner(os.Stdin)
	in.Scan()
	dead := strings.TrimPrefix(in.Text(), "killed ")
	var deadKeys []string
	liveOk := 0
	var liveErrors []string
	for _, k := range keys {
		m, err := cl.MasterForKey(ctx, k)
		if err != nil {
			fmt.Fprintln(os.Stderr, k, err)
			os.Exit(1)
		}
		if m.Options().Addr == dead {
			deadKeys = append(deadKeys, k)
			continue
		}
		if err := call(k); err != nil {
			if len(liveErrors) < 5 {
				liveErrors = append(liveErrors, k+": "+err.Error())
			}
		} else {
			liveOk++
		}
	}
	deadFailed, firstDead := 0, ""
	tried := min(2, len(deadKeys))
	for _, k := range deadKeys[:tried] {
		if err := call(k); err != nil {
			deadFailed++
			if firstDead == "" {
				firstDead = err.Error()
			}
		}
	}
	emit(map[string]any{"phase": "killed", "liveOk": liveOk, "liveErrors": liveErrors, "deadKeys": len(deadKeys),
		"deadTried": tried, "deadFailed": deadFailed, "firstDeadError": firstDead})
	in.Scan()
	start := time.Now()
	cl.ReloadState(ctx) // asynchronous: the first calls may still go to the dead node
	pending, errs, last := deadKeys, 0, ""
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for len(pending) > 0 && time.Since(start) < 15*time.Second {
		var still []string
		for _, k := range pending {
			if err := call(k); err != nil {
				errs++
				last = err.Error()
				still = append(still, k)
			}
		}
		pending = still
		if len(pending) > 0 {
			<-tick.C
		}
	}
	emit(map[string]any{"phase": "followed", "ms": time.Since(start).Milliseconds(), "pending": len(pending),
		"errors": errs, "lastError": last, "served": len(deadKeys) - len(pending)})
}
