// Command reservepairs measures admitting requests whose cost is known
// afterwards, two ways, for bench/reserve.sh:
//
//	reservepairs -mode reserve   # CL.RESERVE k THROTTLE <args> q ttl, then CL.SETTLE k id actual
//	reservepairs -mode throttle  # CL.THROTTLE k <args> q, then CL.THROTTLE k <args> -(q-actual)
//
// Each of -clients connections runs -pairs/-clients pairs one after the
// other on keys "<prefix><i>", i drawn at random in [0, -keys); the
// second command is sent only when the first admitted the request. It
// prints one line: mode, pairs, admitted, seconds, pairs/s, and the
// p50/p99 latency of a pair in µs. Any error reply or malformed reply
// makes it exit 1. It only talks to the address it is given; the run is
// bounded by -pairs and -timeout.
package main

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:6379", "server `address`")
	mode := flag.String("mode", "reserve", "reserve (CL.RESERVE + CL.SETTLE) or throttle (two CL.THROTTLE)")
	pairs := flag.Int("pairs", 100000, "pairs in all")
	clients := flag.Int("clients", 50, "parallel connections")
	keys := flag.Int("keys", 100000, "distinct keys")
	prefix := flag.String("prefix", "res:", "key prefix")
	args := flag.String("args", "15 30 60", "CL.THROTTLE arguments between the key and the quantity")
	q := flag.Int64("q", 10, "units reserved")
	actual := flag.Int64("actual", 4, "units used (settled with)")
	ttl := flag.String("ttl", "30s", "reservation ttl")
	timeout := flag.Duration("timeout", 5*time.Minute, "give up after this long")
	flag.Parse()
	if *mode != "reserve" && *mode != "throttle" {
		fmt.Fprintln(os.Stderr, "reservepairs: -mode must be reserve or throttle")
		os.Exit(2)
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	rdb := redis.NewClient(&redis.Options{Addr: *addr, Protocol: 2, PoolSize: *clients, MaxRetries: -1})
	defer rdb.Close()
	var rest []any
	for _, a := range strings.Fields(*args) {
		rest = append(rest, a)
	}
	per := *pairs / *clients
	lat := make([][]time.Duration, *clients)
	admitted := make([]int, *clients)
	errs := make(chan error, *clients)
	var wg sync.WaitGroup
	start := time.Now()
	for c := range *clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(c), 1))
			lat[c] = make([]time.Duration, 0, per)
			for range per {
				k := *prefix + fmt.Sprint(r.IntN(*keys))
				t := time.Now()
				var first []any
				if *mode == "reserve" {
					first = append(append([]any{"CL.RESERVE", k, "THROTTLE"}, rest...), *q, *ttl)
				} else {
					first = append(append([]any{"CL.THROTTLE", k}, rest...), *q)
				}
				v, err := rdb.Do(ctx, first...).Int64Slice()
				if err != nil || len(v) < 5 {
					errs <- fmt.Errorf("%v: %v %v", first, v, err)
					return
				}
				if v[0] == 0 {
					admitted[c]++
					var second []any
					if *mode == "reserve" {
						second = []any{"CL.SETTLE", k, v[5], *actual}
					} else {
						second = append(append([]any{"CL.THROTTLE", k}, rest...), *actual-*q)
					}
					if err := rdb.Do(ctx, second...).Err(); err != nil {
						errs <- fmt.Errorf("%v: %v", second, err)
						return
					}
				}
				lat[c] = append(lat[c], time.Since(t))
			}
		}()
	}
	wg.Wait()
	secs := time.Since(start).Seconds()
	close(errs)
	for err := range errs {
		fmt.Fprintln(os.Stderr, "reservepairs:", err)
		os.Exit(1)
	}
	var all []time.Duration
	n := 0
	for c := range lat {
		all = append(all, lat[c]...)
		n += admitted[c]
	}
	slices.Sort(all)
	pct := func(p float64) float64 { return float64(all[int(p*float64(len(all)-1))].Microseconds()) }
	fmt.Printf("%s pairs=%d admitted=%d seconds=%.3f pairs_per_s=%.0f p50_us=%.0f p99_us=%.0f\n",
		*mode, len(all), n, secs, float64(len(all))/secs, pct(0.5), pct(0.99))
}
