package durability

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/cellserver/cellserver/internal/binproc"
)

// TestCrashUnderBackpressure is TestCrashRecovery's rounds (always and
// everysec) with the write path saturated: --persist-max-pending-bytes
// 4096 and flood clients pipelining SETs of 512-byte values into database
// 1, so that write commands keep waiting for the writer. Each SIGKILL
// comes once INFO persistence shows both that write commands waited
// (backpressure_waits grew by 50 since the round began) and that the
// queue is over its cap at that moment. After the restart every checked
// key must hold a state it really had, and with always its last
// acknowledged one (or its in-flight write's).
func TestCrashUnderBackpressure(t *testing.T) {
	binproc.Binary(t)
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	for mi, mode := range []string{"always", "everysec"} {
		t.Run(mode, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, uint64(10+mi)))
			crashMode(t, mode, rng, &saturation{
				args:     []string{"--persist-max-pending-bytes", strconv.Itoa(satCap)},
				flooders: 4,
			})
		})
	}
}

const (
	satCap       = 4096 // --persist-max-pending-bytes
	satDB        = 1    // the flood's database (the checked keys are in 0)
	satKeys      = 64   // distinct keys per flood client
	satPipeline  = 32
	satMinWaits  = 50 // backpressure waits in a round before the kill
	satDeadline  = 30 * time.Second
	satValueSize = 512
)

// saturation is what crashMode adds to saturate the write path.
type saturation struct {
	args     []string // more server flags
	flooders int      // flood clients
}

func satClient(addr string) *redis.Client {
	return redis.NewClient(&redis.Options{
		Addr: addr, Protocol: 2, DisableIdentity: true, MaxRetries: -1, DB: satDB,
		PoolSize: 1, DialTimeout: 5 * time.Second, ReadTimeout: 15 * time.Second, WriteTimeout: 15 * time.Second,
	})
}

// flood pipelines SETs into database satDB until stop is set; it returns
// the first error (a network error once the server is killed).
func (s *saturation) flood(p *proc, i int, stop *atomic.Bool) error {
	ctx := context.Background()
	rdb := satClient(p.addr)
	defer rdb.Close()
	value := strings.Repeat(strconv.Itoa(i), satValueSize)
	for n := 0; !stop.Load(); {
		pipe := rdb.Pipeline()
		for range satPipeline {
			pipe.Set(ctx, fmt.Sprintf("flood:%d:%d", i, n%satKeys), value, 0)
			n++
		}
		if _, err := pipe.Exec(ctx); err != nil {
			return err
		}
	}
	return nil
}

// waitSaturated returns once write commands have waited satMinWaits times
// since it was called and the queue is over its cap now (polling INFO
// persistence every millisecond), after at least min (the round's load
// time, so that the checked keys have a history); it fails the test after
// satDeadline.
func (s *saturation) waitSaturated(t *testing.T, p *proc, min time.Duration) {
	t.Helper()
	ctx := context.Background()
	rdb := client(p.addr, 1)
	defer rdb.Close()
	read := func() (waits, pending, maxPending int64) {
		info, err := rdb.Info(ctx, "persistence").Result()
		if err != nil {
			t.Fatalf("INFO persistence: %v", err)
		}
		fields := map[string]*int64{"backpressure_waits": &waits, "pending_bytes": &pending, "max_pending_bytes": &maxPending}
		for _, line := range strings.Split(info, "\n") {
			name, v, _ := strings.Cut(strings.TrimSpace(line), ":")
			if f := fields[name]; f != nil {
				*f, _ = strconv.ParseInt(v, 10, 64)
				delete(fields, name)
			}
		}
		if len(fields) != 0 {
			t.Fatalf("INFO persistence lacks %v:\n%s", fields, info)
		}
		return
	}
	start := time.Now()
	base, _, maxPending := read()
	if maxPending != satCap {
		t.Fatalf("max_pending_bytes %d, want %d", maxPending, satCap)
	}
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for {
		waits, pending, _ := read()
		if waits-base >= satMinWaits && pending > maxPending && time.Since(start) >= min {
			t.Logf("saturated after %v: %d backpressure waits this round, %d bytes pending (cap %d)",
				time.Since(start).Round(time.Millisecond), waits-base, pending, maxPending)
			return
		}
		if time.Since(start) > satDeadline {
			t.Fatalf("not saturated within %v: %d backpressure waits this round (want %d), %d bytes pending (cap %d)",
				satDeadline, waits-base, satMinWaits, pending, maxPending)
		}
		<-tick.C
	}
}

// keysIn returns how many keys of the flood's database the restarted
// server p holds.
func (s *saturation) keysIn(t *testing.T, p *proc) int {
	t.Helper()
	rdb := satClient(p.addr)
	defer rdb.Close()
	n, err := rdb.DBSize(context.Background()).Result()
	if err != nil {
		t.Fatalf("DBSIZE of db %d: %v", satDB, err)
	}
	if n > int64(s.flooders*satKeys) {
		t.Errorf("db %d holds %d keys, more than the %d the flood writes", satDB, n, s.flooders*satKeys)
	}
	return int(n)
}
