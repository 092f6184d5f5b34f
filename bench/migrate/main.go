// Command migrate measures a slot migration with state (issue #29): it
// makes two running cluster-mode nodes a two-shard topology (ids set with
// CELLCLUSTER MYID), loads -keys limiter keys (CL.THROTTLE) into slots
// 0..4095 of the source, then moves those slots to the target with a
// declared migration while -probes connections keep sending CL.THROTTLE
// to the source's other slots (4096..8191), and prints:
//
//   - the migration's time (the opening topology pushed to FINISHED on
//     the source), keys/s, and MB/s of commands the target read (INFO
//     stats total_net_input_bytes);
//
//   - the handover's pause of the migrating slots' writes (INFO
//     migrations migration_last_handover_us);
//
//   - the probes' p50/p99/max before the migration (for as long as it
//     ran) and during it.
//
//     go run ./bench/migrate -source 127.0.0.1:7001 -target 127.0.0.1:7002 -keys 1000000
//
// Both servers must be started with --cluster-enabled yes on this machine,
// and hold no other keys.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/cellserver/cellserver/cluster"
	"github.com/cellserver/cellserver/keyslot"
)

func main() {
	src := flag.String("source", "127.0.0.1:7001", "source node")
	dst := flag.String("target", "127.0.0.1:7002", "target node")
	keys := flag.Int("keys", 1000000, "keys to migrate")
	probes := flag.Int("probes", 4, "connections probing the source's other slots")
	flag.Parse()
	if err := run(*src, *dst, *keys, *probes); err != nil {
		fmt.Fprintln(os.Stderr, "migrate:", err)
		os.Exit(1)
	}
}

func node(ctx context.Context, c *redis.Client, id string) (cluster.Node, error) {
	if err := c.Do(ctx, "CELLCLUSTER", "MYID", id).Err(); err != nil {
		return cluster.Node{}, err
	}
	host, port, err := net.SplitHostPort(c.Options().Addr)
	if err != nil {
		return cluster.Node{}, err
	}
	p, _ := strconv.Atoi(port)
	return cluster.Node{ID: id, IP: host, Port: p}, nil
}

func push(ctx context.Context, shards []cluster.Shard, cs ...*redis.Client) error {
	b, err := json.Marshal(shards)
	if err != nil {
		return err
	}
	for _, c := range cs {
		if err := c.Do(ctx, "CELLCLUSTER", "CONFIG", string(b)).Err(); err != nil {
			return fmt.Errorf("CELLCLUSTER CONFIG on %s: %w", c.Options().Addr, err)
		}
	}
	return nil
}

func infoField(ctx context.Context, c *redis.Client, section, field string) int64 {
	s, _ := c.Info(ctx, section).Result()
	for _, l := range strings.Split(s, "\r\n") {
		if v, ok := strings.CutPrefix(l, field+":"); ok {
			n, _ := strconv.ParseInt(v, 10, 64)
			return n
		}
	}
	return 0
}

func run(srcAddr, dstAddr string, nkeys, nprobes int) error {
	ctx := context.Background()
	sc := redis.NewClient(&redis.Options{Addr: srcAddr, Protocol: 2, PoolSize: nprobes + 4})
	dc := redis.NewClient(&redis.Options{Addr: dstAddr, Protocol: 2})
	defer sc.Close()
	defer dc.Close()
	a, err := node(ctx, sc, strings.Repeat("a", 40))
	if err != nil {
		return err
	}
	b, err := node(ctx, dc, strings.Repeat("b", 40))
	if err != nil {
		return err
	}
	shards := []cluster.Shard{
		{SlotRanges: []cluster.SlotRange{{Start: 0, End: 8191}}, Master: a, Replicas: []cluster.Node{}},
		{SlotRanges: []cluster.SlotRange{{Start: 8192, End: 16383}}, Master: b, Replicas: []cluster.Node{}},
	}
	if err := push(ctx, shards, sc, dc); err != nil {
		return err
	}
	// Load: keys whose slot is below 4096 (one in four of "k:<i>"), in
	// pipelines.
	t0 := time.Now()
	var moved []string
	for i := 0; len(moved) < nkeys; i++ {
		if k := "k:" + strconv.Itoa(i); keyslot.Of([]byte(k)) < 4096 {
			moved = append(moved, k)
		}
	}
	for i := 0; i < len(moved); i += 10000 {
		p := sc.Pipeline()
		for _, k := range moved[i:min(i+10000, len(moved))] {
			p.Do(ctx, "CL.THROTTLE", k, 9, 10, 86400)
		}
		if _, err := p.Exec(ctx); err != nil {
			return err
		}
	}
	mem := infoField(ctx, sc, "memory", "used_memory")
	fmt.Printf("loaded %d keys into slots 0..4095 of %s in %v (source used_memory %d MB)\n", len(moved), srcAddr, time.Since(t0).Round(time.Millisecond), mem>>20)

	// Probes on the source's other slots.
	var probeKeys []string
	for i := 0; len(probeKeys) < 10000; i++ {
		if k := "p:" + strconv.Itoa(i); s(k) >= 4096 && s(k) < 8192 {
			probeKeys = append(probeKeys, k)
		}
	}
	var mu sync.Mutex
	var phase atomic.Int32 // 0: before, 1: during, 2: after
	lat := [3][]time.Duration{}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var perrs atomic.Int64
	for g := range nprobes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var mine [3][]time.Duration
			for i := g; ; i += nprobes {
				select {
				case <-stop:
					mu.Lock()
					for p := range mine {
						lat[p] = append(lat[p], mine[p]...)
					}
					mu.Unlock()
					return
				default:
				}
				ph := phase.Load()
				start := time.Now()
				if err := sc.Do(ctx, "CL.THROTTLE", probeKeys[i%len(probeKeys)], 1000, 1000, 1).Err(); err != nil {
					perrs.Add(1)
				}
				mine[ph] = append(mine[ph], time.Since(start))
			}
		}()
	}
	time.Sleep(2 * time.Second) // the probes' baseline
	in0 := infoField(ctx, dc, "stats", "total_net_input_bytes")
	open := append([]cluster.Shard(nil), shards...)
	open[0].Migrations = []cluster.Migration{{SlotRanges: []cluster.SlotRange{{Start: 0, End: 4095}}, NodeID: b.ID, IP: b.IP, Port: b.Port}}
	phase.Store(1)
	start := time.Now()
	if err := push(ctx, open, sc, dc); err != nil {
		return err
	}
	var status string
	for {
		v, err := sc.Do(ctx, "CELLCLUSTER", "SLOT-MIGRATION-STATUS").Slice()
		if err != nil {
			return err
		}
		if len(v) == 1 {
			f := v[0].([]any)
			status = fmt.Sprintf("%v", f)
			if f[2] == cluster.MigFinished {
				break
			}
			if f[2] == cluster.MigFatal {
				return fmt.Errorf("migration failed: %v", f)
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
	took := time.Since(start)
	phase.Store(2)
	in1 := infoField(ctx, dc, "stats", "total_net_input_bytes")
	pause := infoField(ctx, sc, "migrations", "migration_last_handover_us")
	closing := append([]cluster.Shard(nil), shards...)
	closing[0].SlotRanges = []cluster.SlotRange{{Start: 4096, End: 8191}}
	closing[1].SlotRanges = []cluster.SlotRange{{Start: 0, End: 4095}, {Start: 8192, End: 16383}}
	if err := push(ctx, closing, sc, dc); err != nil {
		return err
	}
	close(stop)
	wg.Wait()
	n := dc.DBSize(ctx).Val()
	fmt.Printf("migration of slots 0..4095 (%d keys): %v to FINISHED (%s)\n", len(moved), took.Round(time.Millisecond), status)
	fmt.Printf("  %.0f keys/s, %.1f MB/s of commands read by the target (%d bytes), handover pause %d µs; target now holds %d keys\n",
		float64(len(moved))/took.Seconds(), float64(in1-in0)/took.Seconds()/1e6, in1-in0, pause, n)
	for p, name := range []string{"before", "during"} {
		d := lat[p]
		sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
		if len(d) == 0 {
			continue
		}
		q := func(f float64) time.Duration { return d[min(len(d)-1, int(f*float64(len(d))))] }
		fmt.Printf("  probes (slots 4096..8191 of the source) %s: %d calls, p50 %v p99 %v max %v\n", name, len(d), q(0.5), q(0.99), d[len(d)-1])
	}
	if e := perrs.Load(); e > 0 {
		fmt.Printf("  probe errors: %d\n", e)
	}
	return nil
}

func s(k string) uint16 { return keyslot.Of([]byte(k)) }
