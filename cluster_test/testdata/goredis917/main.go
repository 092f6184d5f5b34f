// Command goredis917 runs cluster_test's go-redis load with go-redis
// v9.17.x (pinned in this module's go.mod), whose ClusterClient routes a
// command it does not know by argv[1] without asking COMMAND. Three
// ClusterClients, each seeded with one of -seeds, run concurrently over
// keys <prefix>:user:<i>, each calling every key -calls-per-client times,
// and it prints, as JSON, how many keys had how many calls admitted.
package main

import (
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
	flag.Parse()
	limit := int64(*burst + 1)

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
