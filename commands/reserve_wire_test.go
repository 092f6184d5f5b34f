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
	"github.com/cellserver/cellserver/server"
	"github.com/redis/go-redis/v9"
)

// resT0 is the clock of the reservation tests: ids start at it in µs.
var resT0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// resClients starts a server on a frozen clock and returns n go-redis
// clients (RESP2) to it.
func resClients(t *testing.T, n int) (*servertest.Clock, []*redis.Client) {
	t.Helper()
	clock := servertest.NewClock(resT0)
	_, addr := servertest.Start(t, server.Config{Clock: clock.Now})
	rdbs := make([]*redis.Client, n)
	for i := range rdbs {
		rdbs[i] = redis.NewClient(&redis.Options{Addr: addr, Protocol: 2, PoolSize: 2, MaxRetries: -1})
		t.Cleanup(func() { rdbs[i].Close() })
	}
	return clock, rdbs
}

// infoField returns the integer field name of CL.INFO key (RESP2 flat
// array), or fails.
func infoField(t *testing.T, rdb *redis.Client, key, name string) int64 {
	t.Helper()
	v, err := rdb.Do(context.Background(), "CL.INFO", key).Slice()
	if err != nil {
		t.Fatalf("CL.INFO %s: %v", key, err)
	}
	for i := 0; i+1 < len(v); i += 2 {
		if v[i] == name {
			switch n := v[i+1].(type) {
			case int64:
				return n
			case string:
				x, err := strconv.ParseInt(n, 10, 64)
				if err != nil {
					t.Fatalf("CL.INFO %s: %s = %q", key, name, n)
				}
				return x
			}
		}
	}
	t.Fatalf("CL.INFO %s: no %s in %v", key, name, v)
	return 0
}

// infoUint reads the CL.INFO field name of key, a bulk string of an
// unsigned integer (tat_ns).
func infoUint(t *testing.T, rdb *redis.Client, key, name string) uint64 {
	t.Helper()
	v, err := rdb.Do(context.Background(), "CL.INFO", key).Slice()
	if err != nil {
		t.Fatalf("CL.INFO %s: %v", key, err)
	}
	for i := 0; i+1 < len(v); i += 2 {
		if s, ok := v[i+1].(string); ok && v[i] == name {
			x, err := strconv.ParseUint(s, 10, 64)
			if err != nil {
				t.Fatalf("CL.INFO %s: %s = %q", key, name, s)
			}
			return x
		}
	}
	t.Fatalf("CL.INFO %s: no %s in %v", key, name, v)
	return 0
}

// admitted is one admitted reservation of the concurrency test.
type admitted struct {
	id, q, actual, remaining int64
}

// TestReserveConcurrent: 50 go-redis clients reserve and settle on one
// key at once, for each limiter kind, the clock frozen so that no window
// rolls and nothing leaks (limit 100; GCRA at 1 per hour). Each client
// makes 8 reservations of 1 to 5 units; each admitted one is settled by
// two clients at once with the same actual (0 to q+1: mostly down, some
// up into debt), then once more, then with another actual (refused).
// Checked:
//   - both concurrent settles and the repeated one answer [q, a, q-a];
//     the other actual gets "already settled with actual a";
//   - the admitted ids are exactly the n ids id0 .. id0+n-1 (frozen clock:
//     each is the last + 1), so each is unique and they give the order
//     in which the server admitted them;
//   - no over-admission: when reservation k was admitted, the units held
//     by those before it were at least sum(min(q_j, a_j)), so
//     sum(min(q_j, a_j), j < k) + q_k <= limit, and its reply's remaining
//     is >= 0 and limit - remaining lies between sum(min) + q_k and
//     sum(max) + q_k; a refused one got id -1 and remaining < q;
//   - the units held after the settles, sum(a), are at most limit + the
//     debt settles took (sum of a - q where a > q);
//   - the final state holds exactly sum(a) units (every settle applied
//     once): the fixed count, the sliding counter's current, the log's
//     units, the GCRA TAT at t0 + sum(a) x 1 h; CL.INFO shows as many
//     reservations as were admitted, none open.
func TestReserveConcurrent(t *testing.T) {
	const (
		clients   = 50
		perClient = 8
		limit     = 100
	)
	for _, kind := range []struct {
		name string
		args []any // CL.RESERVE's arguments between the key and the quantity
		held func(t *testing.T, rdb *redis.Client) int64
	}{
		{"FIXED", []any{"FIXED", limit, "60s"}, func(t *testing.T, rdb *redis.Client) int64 { return infoField(t, rdb, "k", "count") }},
		{"SLIDING", []any{"SLIDING", limit, "60s"}, func(t *testing.T, rdb *redis.Client) int64 {
			if p := infoField(t, rdb, "k", "previous"); p != 0 {
				t.Errorf("previous window holds %d", p)
			}
			return infoField(t, rdb, "k", "current")
		}},
		{"SLIDINGLOG", []any{"SLIDINGLOG", limit, "60s"}, func(t *testing.T, rdb *redis.Client) int64 { return infoField(t, rdb, "k", "units") }},
		{"THROTTLE", []any{"THROTTLE", limit - 1, 1, 3600}, func(t *testing.T, rdb *redis.Client) int64 {
			tat := infoField(t, rdb, "k", "tat_ns") - resT0.UnixNano()
			if tat%int64(time.Hour) != 0 {
				t.Errorf("TAT t0 + %d ns: not whole emission intervals", tat)
			}
			return tat / int64(time.Hour)
		}},
	} {
		t.Run(kind.name, func(t *testing.T) {
			_, rdbs := resClients(t, clients)
			ctx := context.Background()
			var mu sync.Mutex
			var got []admitted
			refused := 0
			errs := make(chan error, clients)
			var wg sync.WaitGroup
			for g, rdb := range rdbs {
				other := rdbs[(g+1)%clients]
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := range perClient {
						q := int64(1 + (g*7+i)%5)
						a := int64(g+i) % (q + 2)
						args := append(append([]any{"CL.RESERVE", "k"}, kind.args...), q, "30s")
						r, err := rdb.Do(ctx, args...).Int64Slice()
						if err != nil || len(r) != 6 || r[1] != limit {
							errs <- fmt.Errorf("%v: %v %v", args, r, err)
							return
						}
						if r[0] == 1 {
							if r[5] != -1 || r[2] >= q {
								errs <- fmt.Errorf("refused reservation of %d: %v", q, r)
								return
							}
							mu.Lock()
							refused++
							mu.Unlock()
							continue
						}
						id := r[5]
						want := fmt.Sprint([]int64{q, a, q - a})
						var answers [3]string
						var sw sync.WaitGroup
						for j, c := range []*redis.Client{rdb, other} {
							sw.Add(1)
							go func() {
								defer sw.Done()
								s, err := c.Do(ctx, "CL.SETTLE", "k", id, a).Int64Slice()
								answers[j] = fmt.Sprint(s, err)
							}()
						}
						sw.Wait()
						s, err := rdb.Do(ctx, "CL.SETTLE", "k", id, a).Int64Slice()
						answers[2] = fmt.Sprint(s, err)
						for j, ans := range answers {
							if ans != want+" <nil>" {
								errs <- fmt.Errorf("settle %d of id %d (reserved %d) with %d: %s, want %s", j, id, q, a, ans, want)
								return
							}
						}
						err = rdb.Do(ctx, "CL.SETTLE", "k", id, a+1).Err()
						if wantErr := fmt.Sprintf("ERR reservation already settled with actual %d", a); err == nil || err.Error() != wantErr {
							errs <- fmt.Errorf("settle id %d with another actual: %v, want %q", id, err, wantErr)
							return
						}
						mu.Lock()
						got = append(got, admitted{id, q, a, r[2]})
						mu.Unlock()
					}
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Fatal(err)
			}
			if len(got) == 0 || refused == 0 {
				t.Fatalf("%d admitted, %d refused: the test needs both", len(got), refused)
			}
			slices.SortFunc(got, func(x, y admitted) int { return int(x.id - y.id) })
			id0 := resT0.UnixMicro()
			var lo, hi, sum, debt int64 // sum(min(q, a)), sum(max(q, a)), sum(a), sum(a - q > 0) before k
			for k, r := range got {
				if r.id != id0+int64(k) {
					t.Fatalf("admitted ids %d..%d: #%d is %d, want %d (ids not unique or not consecutive)", got[0].id, got[len(got)-1].id, k, r.id, id0+int64(k))
				}
				if lo+r.q > limit {
					t.Fatalf("id %d: %d units admitted while at least %d were held (limit %d)", r.id, r.q, lo, limit)
				}
				if used := limit - r.remaining; r.remaining < 0 || used < lo+r.q || used > hi+r.q {
					t.Fatalf("id %d: remaining %d, want limit - remaining in [%d, %d]", r.id, r.remaining, lo+r.q, hi+r.q)
				}
				lo += min(r.q, r.actual)
				hi += max(r.q, r.actual)
				sum += r.actual
				debt += max(r.actual-r.q, 0)
			}
			if sum > limit+debt {
				t.Fatalf("%d units held after the settles, more than the limit %d + the settled debt %d", sum, limit, debt)
			}
			rdb := rdbs[0]
			if held := kind.held(t, rdb); held != sum {
				t.Fatalf("the key holds %d units, want the sum of the actuals %d", held, sum)
			}
			if n, open := infoField(t, rdb, "k", "reservations"), infoField(t, rdb, "k", "reservations_open"); n != int64(len(got)) || open != 0 {
				t.Fatalf("CL.INFO: %d reservations, %d open; want %d, 0", n, open, len(got))
			}
			t.Logf("%s: %d clients x %d reservations: %d admitted (ids unique, consecutive), %d refused, %d settles checked (3 each + 1 refused), final units %d = sum of actuals",
				kind.name, clients, perClient, len(got), refused, 4*len(got), sum)
		})
	}
}
