package commands_test

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/cellserver/cellserver/internal/servertest"
	"github.com/cellserver/cellserver/keyspace"
	"github.com/cellserver/cellserver/persistence"
	"github.com/cellserver/cellserver/server"
	"github.com/redis/go-redis/v9"
)

// TestPaceConcurrent: many go-redis clients pace on one key at once
// (CL.PACE k 2 10 1s 1 MAXWAIT 2s MS: limit 3, a turn every 100 ms, at
// most 2 s of waiting) while the injected clock stands still, in rounds
// with the clock moved between them. Every admitted request waits at
// most MAXWAIT; no two waiting requests get the same turn and turns are
// at least 100 ms apart; over every window the admitted requests are
// within limit + rate x window; and each round admits exactly what GCRA
// allows (23 in the first round, then 10 per second the clock moved).
func TestPaceConcurrent(t *testing.T) {
	const (
		clients   = 24
		perClient = 6
		rounds    = 4
		eiMS      = 100
		limit     = 3
		maxWaitMS = 2000
	)
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := servertest.NewClock(t0)
	_, addr := servertest.Start(t, server.Config{Clock: clock.Now})
	rdbs := make([]*redis.Client, clients)
	for i := range rdbs {
		rdbs[i] = redis.NewClient(&redis.Options{Addr: addr, Protocol: 2, PoolSize: 1, MaxRetries: -1})
		defer rdbs[i].Close()
	}
	ctx := context.Background()
	var acts []int64   // acting instants (ms after t0) of admitted requests
	var booked []int64 // the same for those told to wait: their turns
	for round := range rounds {
		nowMS := int64(round) * 1000
		if round > 0 {
			clock.Advance(time.Second)
		}
		var mu sync.Mutex
		var waits []int64
		errs := make(chan error, clients)
		var wg sync.WaitGroup
		for _, rdb := range rdbs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range perClient {
					v, err := rdb.Do(ctx, "CL.PACE", "k", 2, 10, "1s", 1, "MAXWAIT", "2s", "MS").Int64Slice()
					if err != nil {
						errs <- err
						return
					}
					if len(v) != 5 || v[1] != limit {
						errs <- fmt.Errorf("reply %v", v)
						return
					}
					switch {
					case v[0] == 0:
						mu.Lock()
						waits = append(waits, v[3])
						mu.Unlock()
					case v[3] <= maxWaitMS:
						errs <- fmt.Errorf("refused with a wait of %d ms, within MAXWAIT", v[3])
						return
					}
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		want := 10 // one per 100 ms the clock moved
		if round == 0 {
			want = limit + maxWaitMS/eiMS
		}
		if len(waits) != want {
			t.Fatalf("round %d: %d admitted, want %d (waits %v)", round, len(waits), want, waits)
		}
		for _, w := range waits {
			if w < 0 || w > maxWaitMS {
				t.Fatalf("round %d: admitted with a wait of %d ms", round, w)
			}
			acts = append(acts, nowMS+w)
			if w > 0 {
				booked = append(booked, nowMS+w)
			}
		}
	}
	slices.Sort(acts)
	slices.Sort(booked)
	for i := 1; i < len(booked); i++ {
		if booked[i]-booked[i-1] < eiMS {
			t.Fatalf("turns %d ms and %d ms are less than %d ms apart: %v", booked[i-1], booked[i], eiMS, booked)
		}
	}
	// Requests told to wait act at distinct instants 100 ms apart at least;
	// a burst (wait 0) shares its instant with at most limit-1 others.
	windows := 0
	for i := range acts {
		for j := i; j < len(acts); j++ {
			if n, span := int64(j-i+1), acts[j]-acts[i]; n > limit+span/eiMS {
				t.Fatalf("%d requests act within %d ms: %v", n, span, acts)
			}
			windows++
		}
	}
	t.Logf("%d clients x %d requests x %d rounds: %d admitted (%d told to wait, distinct turns); %d windows checked",
		clients, perClient, rounds, len(acts), len(booked), windows)
}

// TestPacePersisted: a paced booking reaches the persistence store as the
// key's KindGCRA value (the TAT CL.INFO shows) with its expiry at the TAT.
func TestPacePersisted(t *testing.T) {
	store := persistence.NewMemory()
	addr, _ := startWithStore(t, store)
	rdb := redis.NewClient(&redis.Options{Addr: addr, Protocol: 2})
	defer rdb.Close()
	ctx := context.Background()
	for i := range 3 {
		if err := rdb.Do(ctx, "CL.PACE", "pk", 0, 1, "1h", "MAXWAIT", "3h").Err(); err != nil {
			t.Fatalf("CL.PACE %d: %v", i, err)
		}
	}
	info, err := rdb.Do(ctx, "CL.INFO", "pk").Slice()
	if err != nil || len(info) < 4 {
		t.Fatalf("CL.INFO: %v %v", info, err)
	}
	tat, _ := strconv.ParseUint(info[3].(string), 10, 64)
	var got keyspace.Value
	waitCond(t, "the booking in the store", func() bool {
		store.Load(func(db int, key, value []byte) error {
			if string(key) == "pk" {
				got, _ = persistence.DecodeValue(value)
			}
			return nil
		})
		return got.N == tat
	})
	if got.Kind != keyspace.KindGCRA || got.Exp != int64((tat+999_999)/1_000_000) {
		t.Errorf("stored %+v, want KindGCRA, TAT %d, expiry at the TAT in ms", got, tat)
	}
}
