package commands_test

import (
	"context"
	"fmt"
	"math/rand"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cellserver/cellserver/internal/servertest"
	"github.com/cellserver/cellserver/server"
	"github.com/redis/go-redis/v9"
)

var limT0 = time.Unix(0, 1795312945207675371)

func limClient(t *testing.T) (*redis.Client, *servertest.Clock) {
	t.Helper()
	clk := servertest.NewClock(limT0)
	_, addr := servertest.Start(t, server.Config{Clock: clk.Now})
	// RESP2: these tests read CL.INFO as a flat array (resp3_test.go
	// covers RESP3).
	rdb := redis.NewClient(&redis.Options{Addr: addr, PoolSize: 16, Protocol: 2})
	t.Cleanup(func() { rdb.Close() })
	return rdb, clk
}

func ints(t *testing.T, cmd *redis.Cmd) []int64 {
	t.Helper()
	v, err := cmd.Result()
	return toInts(t, v, err)
}

func toInts(t *testing.T, v any, err error) []int64 {
	t.Helper()
	if err != nil {
		t.Fatalf("error reply: %v", err)
	}
	s, ok := v.([]any)
	if !ok {
		t.Fatalf("reply %T %v, want array", v, v)
	}
	out := make([]int64, len(s))
	for i, e := range s {
		n, ok := e.(int64)
		if !ok {
			t.Fatalf("element %d is %T %v", i, e, e)
		}
		out[i] = n
	}
	return out
}

// step is one command at a clock offset and the reply it must get: a
// tuple, an integer, or an error text.
type step struct {
	at   time.Duration
	args []any
	want any // []int64, int64, string (error text), or nil reply
}

func runSteps(t *testing.T, steps []step) {
	t.Helper()
	rdb, clk := limClient(t)
	ctx := context.Background()
	for i, s := range steps {
		clk.Set(limT0.Add(s.at))
		v, err := rdb.Do(ctx, s.args...).Result()
		switch want := s.want.(type) {
		case string:
			if err == nil || err.Error() != want {
				t.Fatalf("step %d %v: got %v, %v; want error %q", i, s.args, v, err, want)
			}
		case []int64:
			if got := toInts(t, v, err); !reflect.DeepEqual(got, want) {
				t.Fatalf("step %d %v at +%v: got %v, want %v", i, s.args, s.at, got, want)
			}
		case int64:
			if err != nil || v != want {
				t.Fatalf("step %d %v: got %v, %v; want %d", i, s.args, v, err, want)
			}
		case nil:
			if err != redis.Nil {
				t.Fatalf("step %d %v: got %v, %v; want nil", i, s.args, v, err)
			}
		}
	}
}

// limT0 is 207.675371 ms into a second; window arithmetic below uses it.
func TestFixedWindow(t *testing.T) {
	// 10 s windows aligned to the epoch: limT0 is 5.207675371 s into its window.
	runSteps(t, []step{
		{0, []any{"CL.FIXED", "f", 3, "10s"}, []int64{0, 3, 2, -1, 5}},
		{0, []any{"CL.FIXED", "f", 3, "10", 2}, []int64{0, 3, 0, -1, 5}},
		{0, []any{"CL.FIXED", "f", 3, "10s", 1}, []int64{1, 3, 0, 5, 5}},
		{0, []any{"CL.FIXED", "f", 3, "10s", 1, "MS"}, []int64{1, 3, 0, 4793, 4793}},
		{0, []any{"CL.FIXED", "f", 3, "10s", 4}, []int64{1, 3, 0, -1, 5}},  // never possible
		{0, []any{"CL.FIXED", "f", 3, "10s", 0}, []int64{0, 3, 0, -1, 5}},  // peek
		{0, []any{"CL.FIXED", "f", 3, "10s", -1}, []int64{0, 3, 1, -1, 5}}, // refund
		{4792 * time.Millisecond, []any{"CL.FIXED", "f", 3, "10s", 2, "ms"}, []int64{1, 3, 1, 1, 1}},
		{4793 * time.Millisecond, []any{"CL.FIXED", "f", 3, "10s", 3}, []int64{0, 3, 0, -1, 10}}, // new window
		{0, []any{"CL.FIXED", "f", 0, "10s"}, "ERR limit must be a positive integer"},
		{0, []any{"CL.FIXED", "f", 1, "0"}, "ERR period must be a positive number of seconds or a duration such as 250ms, 1.5s, 10m, 1h, at most 10 years"},
		{0, []any{"CL.FIXED", "f", 1, "-1s"}, "ERR period must be a positive number of seconds or a duration such as 250ms, 1.5s, 10m, 1h, at most 10 years"},
		{0, []any{"CL.FIXED", "f", 1, "1s", "x"}, "ERR quantity must be an integer"},
		{0, []any{"CL.FIXED", "f", 1, "1s", 1, 2}, "ERR wrong number of arguments for 'cl.fixed' command"},
	})
}

func TestSlidingWindow(t *testing.T) {
	// 1 s windows: limT0 is 207.675371 ms into its window.
	runSteps(t, []step{
		{0, []any{"CL.SLIDING", "s", 10, "1s", 10}, []int64{0, 10, 0, -1, 2}},
		{0, []any{"CL.SLIDING", "s", 10, "1000ms", 1, "MS"}, []int64{1, 10, 0, 893, 1793}}, // next window, 100 ms in
		// Next window at +792.324629ms (elapsed 0): prev 10 weighs fully.
		{793 * time.Millisecond, []any{"CL.SLIDING", "s", 10, "1s", 1, "MS"}, []int64{1, 10, 0, 100, 1000}},
		// 100.675371 ms into the window: prev weighs 8.99..., 1 unit fits.
		{893 * time.Millisecond, []any{"CL.SLIDING", "s", 10, "1s", 1, "MS"}, []int64{0, 10, 0, -1, 1900}},
		{893 * time.Millisecond, []any{"CL.SLIDING", "s", 10, "1s", 0}, []int64{0, 10, 0, -1, 2}},
		{0, []any{"CL.SLIDING", "s", 4294967296, "1s"}, "ERR limit must be between 1 and 4294967295 for CL.SLIDING"},
	})
}

func TestSlidingLog(t *testing.T) {
	runSteps(t, []step{
		{0, []any{"CL.SLIDINGLOG", "l", 3, "1s", 2}, []int64{0, 3, 1, -1, 1}},
		{300 * time.Millisecond, []any{"CL.SLIDINGLOG", "l", 3, "1s", 1, "MS"}, []int64{0, 3, 0, -1, 1000}},
		{400 * time.Millisecond, []any{"CL.SLIDINGLOG", "l", 3, "1s", 1, "MS"}, []int64{1, 3, 0, 600, 900}},
		{400 * time.Millisecond, []any{"CL.SLIDINGLOG", "l", 3, "1s", 3, "MS"}, []int64{1, 3, 0, 900, 900}},
		{1000 * time.Millisecond, []any{"CL.SLIDINGLOG", "l", 3, "1s", 2, "MS"}, []int64{0, 3, 0, -1, 1000}},
		{0, []any{"CL.SLIDINGLOG", "l2", 3, "1s", -1}, "ERR quantity must not be negative for CL.SLIDINGLOG"},
		{0, []any{"CL.SLIDINGLOG", "l2", 3, "1s", 4}, []int64{1, 3, 3, -1, 0}},
	})
}

func TestConcurrencyLeases(t *testing.T) {
	runSteps(t, []step{
		{0, []any{"CL.ACQUIRE", "c", 2, "30s", "a"}, []int64{0, 2, 1, -1, 30}},
		{time.Second, []any{"CL.ACQUIRE", "c", 2, "30s", "b"}, []int64{0, 2, 0, -1, 30}},
		{2 * time.Second, []any{"CL.ACQUIRE", "c", 2, "30s", "c", "MS"}, []int64{1, 2, 0, 28000, 29000}},
		{2 * time.Second, []any{"CL.ACQUIRE", "c", 2, "30s", "a"}, []int64{0, 2, 0, -1, 30}}, // idempotent: extends
		{2 * time.Second, []any{"CL.RELEASE", "c", "zzz"}, int64(0)},
		{2 * time.Second, []any{"CL.RELEASE", "c", "b"}, int64(1)},
		{2 * time.Second, []any{"CL.RELEASE", "c", "b"}, int64(0)},
		{2 * time.Second, []any{"CL.ACQUIRE", "c", 2, "30s", "c"}, []int64{0, 2, 0, -1, 30}},
		{33 * time.Second, []any{"CL.ACQUIRE", "c", 2, "30s", "d"}, []int64{0, 2, 1, -1, 30}}, // leases expired
		{0, []any{"CL.ACQUIRE", "c2", 0, "30s", "a"}, "ERR limit must be a positive integer"},
		{0, []any{"CL.ACQUIRE", "c2", 1, "nope", "a"}, "ERR lease must be a positive number of seconds or a duration such as 250ms, 1.5s, 10m, 1h, at most 10 years"},
	})
}

// TestPeekWritesNothing: CL.PEEK answers what CL.THROTTLE ... 0 answers,
// but creates no key and leaves the TTL alone.
func TestPeekWritesNothing(t *testing.T) {
	rdb, clk := limClient(t)
	ctx := context.Background()
	if got := ints(t, rdb.Do(ctx, "CL.PEEK", "p", 4, 1, 1)); !reflect.DeepEqual(got, []int64{0, 5, 5, -1, 0}) {
		t.Fatalf("peek on absent key: %v", got)
	}
	if n := rdb.Exists(ctx, "p").Val(); n != 0 {
		t.Fatal("CL.PEEK created the key")
	}
	ints(t, rdb.Do(ctx, "CL.THROTTLE", "p", 4, 1, 1, 3))
	before := rdb.PTTL(ctx, "p").Val()
	clk.Advance(500 * time.Millisecond)
	peek := ints(t, rdb.Do(ctx, "CL.PEEK", "p", 4, 1, "1s"))
	if after := rdb.PTTL(ctx, "p").Val(); after != before-500*time.Millisecond {
		t.Fatalf("PTTL %v -> %v: CL.PEEK touched the TTL", before, after)
	}
	ms := ints(t, rdb.Do(ctx, "CL.PEEK", "p", 4, 1, 1, "MS"))
	if want := []int64{0, 5, 2, -1, 2500}; !reflect.DeepEqual(ms, want) {
		t.Fatalf("CL.PEEK MS: %v, want %v", ms, want)
	}
	thr := ints(t, rdb.Do(ctx, "CL.THROTTLE", "p", 4, 1, 1, 0))
	if !reflect.DeepEqual(peek, thr) {
		t.Fatalf("CL.PEEK %v != CL.THROTTLE ... 0 %v", peek, thr)
	}
	if err := rdb.Do(ctx, "CL.PEEK", "p", 4, "x", 1).Err(); err == nil || err.Error() != "Cell error: Store error: Couldn't parse as integer: x" {
		t.Fatalf("CL.PEEK parse error: %v", err)
	}
}

// TestRefund documents the refund mechanism: a negative quantity gives
// capacity back (spec row 28).
func TestRefund(t *testing.T) {
	runSteps(t, []step{
		{0, []any{"CL.THROTTLE", "r", 5, 1, 1, 3}, []int64{0, 6, 3, -1, 3}},
		{0, []any{"CL.THROTTLE", "r", 5, 1, 1, -1}, []int64{0, 6, 4, -1, 2}},
		// limT0 is 25.207675371 s into its minute.
		{0, []any{"CL.FIXED", "rf", 5, "1m", 5}, []int64{0, 5, 0, -1, 35}},
		{0, []any{"CL.FIXED", "rf", 5, "1m", -2}, []int64{0, 5, 2, -1, 35}},
	})
}

// TestWrongTypeAcrossKinds: a key holds one kind; every other limiter
// command on it is WRONGTYPE, and the generic commands work on all kinds.
func TestWrongTypeAcrossKinds(t *testing.T) {
	rdb, _ := limClient(t)
	ctx := context.Background()
	make := map[string][]any{
		"gcra":        {"CL.THROTTLE", "k:gcra", 5, 1, 1},
		"fixed":       {"CL.FIXED", "k:fixed", 5, "1m"},
		"sliding":     {"CL.SLIDING", "k:sliding", 5, "1m"},
		"slidinglog":  {"CL.SLIDINGLOG", "k:slidinglog", 5, "1m"},
		"concurrency": {"CL.ACQUIRE", "k:concurrency", 5, "1m", "t"},
	}
	for kind, args := range make {
		ints(t, rdb.Do(ctx, args...))
		key := args[1].(string)
		for other, oargs := range make {
			if other == kind {
				continue
			}
			call := append([]any{oargs[0], key}, oargs[2:]...)
			if err := rdb.Do(ctx, call...).Err(); err == nil || !strings.HasPrefix(err.Error(), "WRONGTYPE") {
				t.Errorf("%v on a %s key: %v, want WRONGTYPE", call, kind, err)
			}
		}
		if n := rdb.Exists(ctx, key).Val(); n != 1 {
			t.Errorf("EXISTS %s = %d", key, n)
		}
		if ttl := rdb.PTTL(ctx, key).Val(); ttl <= 0 {
			t.Errorf("PTTL %s = %v, want a TTL", key, ttl)
		}
		wantType := map[string]string{"gcra": "string"}[kind]
		if wantType == "" {
			wantType = kind
		}
		if typ := rdb.Type(ctx, key).Val(); typ != wantType {
			t.Errorf("TYPE %s = %q, want %q", key, typ, wantType)
		}
		info, err := rdb.Do(ctx, "CL.INFO", key).Slice()
		if err != nil || len(info) < 2 || info[1] != kind {
			t.Errorf("CL.INFO %s = %v, %v", key, info, err)
		}
		keys, _, err := rdb.Scan(ctx, 0, "k:*", 1000).Result()
		if err != nil || len(keys) == 0 {
			t.Errorf("SCAN: %v %v", keys, err)
		}
		if n := rdb.Del(ctx, key).Val(); n != 1 {
			t.Errorf("DEL %s = %d", key, n)
		}
	}
}

// TestLimitersConcurrentExact: many clients on one key of each kind at a
// fixed instant: the admitted total is exactly what the algorithm allows.
func TestLimitersConcurrentExact(t *testing.T) {
	rdb, _ := limClient(t)
	ctx := context.Background()
	const workers, each = 16, 100
	cases := []struct {
		name string
		args func(w, i int) []any
		want int
	}{
		{"gcra", func(w, i int) []any { return []any{"CL.THROTTLE", "h:gcra", 99, 1, 3600} }, 100},
		{"fixed", func(w, i int) []any { return []any{"CL.FIXED", "h:fixed", 137, "1h"} }, 137},
		{"sliding", func(w, i int) []any { return []any{"CL.SLIDING", "h:sliding", 211, "1h"} }, 211},
		{"slidinglog", func(w, i int) []any { return []any{"CL.SLIDINGLOG", "h:log", 173, "1h"} }, 173},
		{"concurrency", func(w, i int) []any { return []any{"CL.ACQUIRE", "h:conc", 57, "1h", fmt.Sprint(w, ".", i)} }, 57},
		{"all", func(w, i int) []any {
			return []any{"CL.ALL", "CL.FIXED", "h:all1", 300, "1h", 1, "CL.SLIDINGLOG", "h:all2", 89, "1h", 1}
		}, 89},
	}
	for _, tc := range cases {
		var mu sync.Mutex
		admitted := 0
		var wg sync.WaitGroup
		for w := 0; w < workers; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; i < each; i++ {
					v, err := rdb.Do(ctx, tc.args(w, i)...).Result()
					if err != nil {
						t.Errorf("%s: %v", tc.name, err)
						return
					}
					first := v.([]any)[0]
					if tup, ok := first.([]any); ok { // CL.ALL: admitted iff every tuple's first field is 0
						ok := true
						for _, e := range v.([]any) {
							if e.([]any)[0].(int64) != 0 {
								ok = false
							}
						}
						_ = tup
						if ok {
							mu.Lock()
							admitted++
							mu.Unlock()
						}
						continue
					}
					if first.(int64) == 0 {
						mu.Lock()
						admitted++
						mu.Unlock()
					}
				}
			}()
		}
		wg.Wait()
		if admitted != tc.want {
			t.Errorf("%s: admitted %d of %d, want exactly %d", tc.name, admitted, workers*each, tc.want)
		}
	}
	// CL.ALL consumed h:all1 only for admitted calls.
	info, _ := rdb.Do(ctx, "CL.INFO", "h:all1").Slice()
	if fmt.Sprint(info[5]) != "89" {
		t.Errorf("h:all1 count %v, want 89: a refused CL.ALL consumed", info)
	}
}

// TestAllNeverConsumesOnRefusal: random CL.ALL calls over a few keys of
// every kind at random instants; whenever a call is refused, the state of
// every key (CL.INFO, PTTL) is unchanged.
func TestAllNeverConsumesOnRefusal(t *testing.T) {
	rdb, clk := limClient(t)
	ctx := context.Background()
	rng := rand.New(rand.NewSource(42))
	checks := []func() []any{
		func() []any { return []any{"CL.THROTTLE", "a:gcra", 3, 2, 1, rng.Intn(3)} },
		func() []any { return []any{"CL.FIXED", "a:fixed", 5, "700ms", rng.Intn(3)} },
		func() []any { return []any{"CL.SLIDING", "a:sliding", 4, "1s", rng.Intn(3)} },
		func() []any { return []any{"CL.SLIDINGLOG", "a:log", 4, "900ms", rng.Intn(3)} },
		func() []any { return []any{"CL.ACQUIRE", "a:conc", 2, "800ms", fmt.Sprint("t", rng.Intn(4))} },
	}
	keys := []string{"a:gcra", "a:fixed", "a:sliding", "a:log", "a:conc"}
	snapshot := func() string {
		var b strings.Builder
		for _, k := range keys {
			v, _ := rdb.Do(ctx, "CL.INFO", k).Slice()
			fmt.Fprint(&b, k, v, rdb.PTTL(ctx, k).Val(), ";")
		}
		return b.String()
	}
	refused, admitted := 0, 0
	for i := 0; i < 3000; i++ {
		clk.Advance(time.Duration(rng.Intn(120)) * time.Millisecond)
		args := []any{"CL.ALL"}
		for _, j := range rng.Perm(len(checks))[:1+rng.Intn(len(checks))] {
			args = append(args, checks[j]()...)
		}
		before := snapshot()
		v, err := rdb.Do(ctx, args...).Slice()
		if err != nil {
			t.Fatalf("%v: %v", args, err)
		}
		ok := true
		for _, tup := range v {
			if tup.([]any)[0].(int64) != 0 {
				ok = false
			}
		}
		if ok {
			admitted++
			continue
		}
		refused++
		if after := snapshot(); after != before {
			t.Fatalf("refused %v changed state:\nbefore %s\nafter  %s", args, before, after)
		}
	}
	if refused < 100 || admitted < 100 {
		t.Fatalf("too few of each: %d refused, %d admitted", refused, admitted)
	}
	t.Logf("checked %d refused and %d admitted CL.ALL calls", refused, admitted)
}

func TestAllArgumentsAndKeys(t *testing.T) {
	rdb, _ := limClient(t)
	ctx := context.Background()
	for _, tc := range []struct {
		args []any
		want string
	}{
		{[]any{"CL.ALL", "CL.FIXED", "a", 1, "1s", 1, "CL.FIXED", "b", 1}, "ERR CL.ALL: incomplete check, expected CL.FIXED key limit period quantity [MS]"},
		{[]any{"CL.ALL", "CL.THROTTLE", "a", 1, 1, 1}, "ERR CL.ALL: incomplete check, expected CL.THROTTLE key max_burst count period quantity [MS]"},
		{[]any{"CL.ALL", "GET", "a", 1, "1s", 1}, "ERR CL.ALL: unknown check 'GET' (expected CL.THROTTLE, CL.FIXED, CL.SLIDING, CL.SLIDINGLOG, CL.ACQUIRE or CL.RESERVE)"},
		{[]any{"CL.ALL", "CL.FIXED", "a", 1, "1s", 1, "CL.SLIDING", "a", 1, "1s", 1}, "ERR CL.ALL checks must use distinct keys"},
		{[]any{"CL.ALL", "CL.FIXED", "a", 0, "1s", 1}, "ERR limit must be a positive integer"},
	} {
		if err := rdb.Do(ctx, tc.args...).Err(); err == nil || err.Error() != tc.want {
			t.Errorf("%v: %v, want %q", tc.args, err, tc.want)
		}
	}
	keys, err := rdb.Do(ctx, "COMMAND", "GETKEYS", "CL.ALL", "CL.THROTTLE", "g", 1, 1, 1, 1, "CL.FIXED", "u", 1, "1s", 1, "MS", "CL.ACQUIRE", "c", 1, "1s", "tok").StringSlice()
	if err != nil || !reflect.DeepEqual(keys, []string{"g", "u", "c"}) {
		t.Fatalf("GETKEYS: %v %v", keys, err)
	}
	info, err := rdb.Do(ctx, "COMMAND", "INFO", "cl.all").Slice()
	if err != nil {
		t.Fatal(err)
	}
	entry := info[0].([]any)
	if entry[3] != int64(2) || !strings.Contains(fmt.Sprint(entry[2]), "movablekeys") {
		t.Fatalf("COMMAND INFO cl.all: first key %v flags %v", entry[3], entry[2])
	}
}

// A CL.THROTTLE check inside CL.ALL takes MS after its quantity: its
// retry_after and reset_after are then milliseconds rounded up, as CL.PEEK
// ... MS answers. MS belongs to the check it follows, and anywhere else it
// is still an error (standalone CL.THROTTLE stays redis-cell's).
func TestAllThrottleMS(t *testing.T) {
	rdb, clk := limClient(t)
	ctx := context.Background()
	// CL.THROTTLE k 1 1 3: limit 2, one unit every 3 s, tolerance 6 s.
	// limT0 is 207.675371 ms into its second (1 s fixed windows).
	for i, s := range []struct {
		at   time.Duration
		args []any
		want [][]int64
	}{
		// New key: TAT = now+3 s. The fixed check after it, without MS,
		// is parsed as its own check and answers in seconds.
		{0, []any{"CL.ALL", "CL.THROTTLE", "t", 1, 1, 3, 1, "MS", "CL.FIXED", "f", 10, "1s", 1},
			[][]int64{{0, 2, 1, -1, 3000}, {0, 10, 9, -1, 1}}},
		// TAT = t0+6 s, 4.7655 s ahead: 4766 ms (5 s without MS). Any case.
		{1234500 * time.Microsecond, []any{"CL.ALL", "CL.THROTTLE", "t", 1, 1, 3, 1, "ms", "CL.FIXED", "f", 10, "1s", 1, "MS"},
			[][]int64{{0, 2, 0, -1, 4766}, {0, 10, 9, -1, 558}}},
		// Refused: allowed at t0+3 s, 1.7655 s away; nothing consumed.
		{1234500 * time.Microsecond, []any{"CL.ALL", "CL.THROTTLE", "t", 1, 1, 3, 1, "MS", "CL.FIXED", "f", 10, "1s", 1, "MS"},
			[][]int64{{1, 2, 0, 1766, 4766}, {0, 10, 8, -1, 558}}},
		// Units per check in one call: t in seconds (redis-cell's
		// rounding), u in ms.
		{1234500 * time.Microsecond, []any{"CL.ALL", "CL.THROTTLE", "t", 1, 1, 3, 1, "CL.THROTTLE", "u", 1, 1, 3, 1, "MS"},
			[][]int64{{1, 2, 0, 2, 5}, {0, 2, 1, -1, 3000}}},
		// Quantity 0 answers what CL.PEEK t 1 1 3 MS answers (below).
		{1234500 * time.Microsecond, []any{"CL.ALL", "CL.THROTTLE", "t", 1, 1, 3, 0, "MS"},
			[][]int64{{0, 2, 0, -1, 4766}}},
	} {
		clk.Set(limT0.Add(s.at))
		v, err := rdb.Do(ctx, s.args...).Slice()
		if err != nil || len(v) != len(s.want) {
			t.Fatalf("step %d %v: %v %v", i, s.args, v, err)
		}
		for j := range v {
			if got := toInts(t, v[j], nil); !reflect.DeepEqual(got, s.want[j]) {
				t.Fatalf("step %d %v: check %d got %v, want %v", i, s.args, j, got, s.want[j])
			}
		}
	}
	if got := ints(t, rdb.Do(ctx, "CL.PEEK", "t", 1, 1, 3, "MS")); !reflect.DeepEqual(got, []int64{0, 2, 0, -1, 4766}) {
		t.Fatalf("CL.PEEK t 1 1 3 MS: %v", got)
	}
	if n := rdb.Exists(ctx, "u").Val(); n != 0 {
		t.Fatalf("u exists after a refused CL.ALL")
	}
	keys, err := rdb.Do(ctx, "COMMAND", "GETKEYS", "CL.ALL", "CL.THROTTLE", "g", 1, 1, 1, 1, "MS", "CL.FIXED", "u", 1, "1s", 1).StringSlice()
	if err != nil || !reflect.DeepEqual(keys, []string{"g", "u"}) {
		t.Fatalf("GETKEYS: %v %v", keys, err)
	}

	unknownMS := "ERR CL.ALL: unknown check 'MS' (expected CL.THROTTLE, CL.FIXED, CL.SLIDING, CL.SLIDINGLOG, CL.ACQUIRE or CL.RESERVE)"
	for _, tc := range []struct {
		args []any
		want string
	}{
		{[]any{"CL.ALL", "MS", "CL.THROTTLE", "a", 1, 1, 1, 1}, unknownMS},
		{[]any{"CL.ALL", "CL.THROTTLE", "a", 1, 1, 1, 1, "MS", "MS"}, unknownMS},
		{[]any{"CL.ALL", "CL.THROTTLE", "a", 1, 1, 1, 1, "MS", "MS", "CL.FIXED", "b", 1, "1s", 1}, unknownMS},
		{[]any{"CL.ALL", "CL.THROTTLE", "a", 1, 1, 1, "MS"}, "Cell error: Store error: Couldn't parse as integer: MS"},
		{[]any{"CL.ALL", "CL.THROTTLE", "a", 1, 1, 1, "MS", 1}, "Cell error: Store error: Couldn't parse as integer: MS"},
		{[]any{"CL.THROTTLE", "a", 1, 1, 1, 1, "MS"}, "Cell error: Store error: Usage: cl.throttle <key> <max_burst> <count per period> <period> [<quantity>]"},
		{[]any{"CL.ALL", "CL.THROTTLE", "a", 1, 1, 1}, "ERR CL.ALL: incomplete check, expected CL.THROTTLE key max_burst count period quantity [MS]"},
	} {
		if err := rdb.Do(ctx, tc.args...).Err(); err == nil || err.Error() != tc.want {
			t.Errorf("%v: %v, want %q", tc.args, err, tc.want)
		}
	}
	if n := rdb.Exists(ctx, "a", "b").Val(); n != 0 {
		t.Fatalf("%d keys written by refused calls", n)
	}
}
