package commands_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/cellserver/cellserver/internal/resptest"
	"github.com/cellserver/cellserver/internal/servertest"
	"github.com/cellserver/cellserver/server"
	"github.com/redis/go-redis/v9"
)

// TestMultiExecAtomic: while one client runs MULTI; GET k; CL.THROTTLE k;
// GET k (x20); CL.THROTTLE k; GET k; EXEC over and over, other clients
// hammer k with CL.THROTTLE, DEL and transactions of their own. With the
// clock frozen every allowed request moves the TAT by exactly quantity *
// emission interval, so any command interleaved inside the transaction
// would show:
//
//   - every GET after a CL.THROTTLE is exactly the TAT that CL.THROTTLE
//     wrote: now + dvt - remaining * ei (ei = 1 µs, so no truncation);
//   - each CL.THROTTLE moves the TAT by exactly 7 µs (this client's
//     quantity) from the GET before it, or to now + 7 µs from no key.
func TestMultiExecAtomic(t *testing.T) {
	clk := servertest.NewClock(goldenT0)
	_, addr := servertest.Start(t, server.Config{Clock: clk.Now})
	now := goldenT0.UnixNano()
	const (
		burst  = 1_000_000_000 // dvt = 1000 s: nobody is ever limited
		ei     = 1000          // ns: 1e6 per 1 s
		dvt    = ei * (burst + 1)
		qA     = 7
		rounds = 1000
	)
	throttle := func(key string, q int) []string {
		return []string{"CL.THROTTLE", key, strconv.Itoa(burst), "1000000", "1", strconv.Itoa(q)}
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	rdb := redis.NewClient(&redis.Options{Addr: addr, PoolSize: 8})
	defer rdb.Close()
	var wg sync.WaitGroup
	var hammered atomic.Int64
	hammerErr := make(chan error, 8)
	started := make(chan struct{})
	var startOnce sync.Once
	for g := 0; g < 6; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := 0; ctx.Err() == nil; i++ {
				var err error
				switch {
				case g == 0 && i%50 == 49:
					err = rdb.Del(ctx, "k").Err()
				case g == 1 && i%2 == 0:
					_, err = rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
						p.Do(ctx, anySlice(throttle("k", 3))...)
						p.Get(ctx, "k")
						return nil
					})
					if errors.Is(err, redis.Nil) {
						err = nil // DEL by goroutine 0 can run between EXECs, never inside
					}
				default:
					var v []int64
					v, err = rdb.Do(ctx, anySlice(throttle("k", 1+g%3))...).Int64Slice()
					if err == nil && (len(v) != 5 || v[0] != 0) {
						err = fmt.Errorf("hammer: CL.THROTTLE replied %v", v)
					}
				}
				if err != nil && ctx.Err() == nil {
					hammerErr <- err
					return
				}
				if hammered.Add(1) == 200 {
					startOnce.Do(func() { close(started) })
				}
			}
		}(g)
	}

	select { // let the hammering start before the transactions
	case <-started:
	case err := <-hammerErr:
		t.Fatal(err)
	}
	c := resptest.MustDial(t, addr)
	const gets = 20
	fresh := 0
	for r := 0; r < rounds; r++ {
		var buf []byte
		buf = resptest.AppendCommand(buf, "MULTI")
		buf = resptest.AppendCommand(buf, "GET", "k")
		buf = resptest.AppendCommand(buf, throttle("k", qA)...)
		for i := 0; i < gets; i++ {
			buf = resptest.AppendCommand(buf, "GET", "k")
		}
		buf = resptest.AppendCommand(buf, throttle("k", qA)...)
		buf = resptest.AppendCommand(buf, "GET", "k")
		buf = resptest.AppendCommand(buf, "EXEC")
		if _, err := c.C.Write(buf); err != nil {
			t.Fatal(err)
		}
		queued := gets + 4
		if v, err := c.Read(); err != nil || v.Str != "OK" {
			t.Fatalf("round %d MULTI: %v %v", r, v, err)
		}
		for i := 0; i < queued; i++ {
			if v, err := c.Read(); err != nil || v.Str != "QUEUED" {
				t.Fatalf("round %d reply %d: %v %v, want QUEUED", r, i, v, err)
			}
		}
		exec, err := c.Read()
		if err != nil || exec.Kind != '*' || len(exec.Elems) != queued {
			t.Fatalf("round %d EXEC: %v %v", r, exec, err)
		}
		replies := exec.Elems
		// tatAfter checks a CL.THROTTLE reply and the GETs after it, and
		// returns the TAT they agree on.
		tatAfter := func(thr resptest.Value, gets []resptest.Value) int64 {
			t.Helper()
			if thr.Kind != '*' || len(thr.Elems) != 5 || thr.Elems[0].Str != "0" {
				t.Fatalf("round %d: CL.THROTTLE %v", r, thr)
			}
			remaining, _ := strconv.ParseInt(thr.Elems[2].Str, 10, 64)
			want := now + dvt - remaining*ei
			for i, g := range gets {
				if tat, err := strconv.ParseInt(g.Str, 10, 64); err != nil || tat != want {
					t.Fatalf("round %d: GET %d after CL.THROTTLE saw %v, it wrote %d: a command interleaved", r, i, g, want)
				}
			}
			return want
		}
		before := replies[0]
		tat1 := tatAfter(replies[1], replies[2:2+gets])
		tat2 := tatAfter(replies[2+gets], replies[3+gets:])
		switch {
		case before.Null:
			fresh++
			if tat1 != now+qA*ei {
				t.Fatalf("round %d: no key before, TAT %d after, want %d", r, tat1, now+qA*ei)
			}
		default:
			prev, err := strconv.ParseInt(before.Str, 10, 64)
			if err != nil || tat1-prev != qA*ei {
				t.Fatalf("round %d: TAT %s -> %d inside one EXEC, want +%d: a command interleaved",
					r, before.Str, tat1, qA*ei)
			}
		}
		if tat2-tat1 != qA*ei {
			t.Fatalf("round %d: TAT %d -> %d between two CL.THROTTLE of one EXEC, want +%d: a command interleaved",
				r, tat1, tat2, qA*ei)
		}
	}
	cancel()
	wg.Wait()
	select {
	case err := <-hammerErr:
		t.Fatal(err)
	default:
	}
	t.Logf("%d transactions (%d on a deleted key) against %d concurrent commands", rounds, fresh, hammered.Load())
	if hammered.Load() < rounds {
		t.Fatalf("only %d concurrent commands: too little contention to show anything", hammered.Load())
	}
}

func anySlice(s []string) []any {
	out := make([]any, len(s))
	for i, v := range s {
		out[i] = v
	}
	return out
}
