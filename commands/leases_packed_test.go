package commands_test

import (
	"context"
	"fmt"
	"math/rand"
	"slices"
	"testing"
	"time"

	"github.com/cellserver/cellserver/keyspace"
	"github.com/cellserver/cellserver/limiter"
)

// A key whose one lease has a short token is stored packed, without an
// object; a second token, or a long one, gives it a limiter.Leases again,
// and releasing back to one short token packs it again. The replies, CL.INFO
// and the key's PTTL must not show which form is stored: this runs random
// CL.ACQUIRE and CL.RELEASE calls against the server and against a plain
// limiter.Leases per key, and checks MEMORY USAGE for the form.
func TestConcurrencyPackedMatchesModel(t *testing.T) {
	rdb, clk := limClient(t)
	ctx := context.Background()
	rng := rand.New(rand.NewSource(31))
	keys := []string{"p:0", "p:1", "p:2"}
	tokens := []string{"", "a", "tok", "seven77", "eight888", "a-token-as-long-as-a-uuid-0123456789"}
	model := map[string]*limiter.Leases{}
	now := limT0
	const steps = 4000
	packedSeen, objectSeen := 0, 0
	for i := range steps {
		now = now.Add(time.Duration(rng.Int63n(int64(700 * time.Millisecond))))
		clk.Set(now)
		ns := now.UnixNano()
		key, tok := keys[rng.Intn(len(keys))], tokens[rng.Intn(len(tokens))]
		ls := model[key]
		if ls == nil {
			ls = new(limiter.Leases)
			model[key] = ls
		}
		where := fmt.Sprintf("step %d, key %s, token %q", i, key, tok)
		if rng.Intn(3) == 0 {
			want, _ := ls.Release(ns, []byte(tok))
			got, err := rdb.Do(ctx, "CL.RELEASE", key, tok).Int64()
			if err != nil || (got == 1) != want {
				t.Fatalf("%s: CL.RELEASE = %d, %v; want released %v", where, got, err, want)
			}
		} else {
			limit := 1 + rng.Int63n(3)
			lease := time.Duration(1+rng.Int63n(3000)) * time.Millisecond
			d := ls.Acquire(ns, int64(lease), limit, []byte(tok))
			if !d.Limited {
				ls.Apply(ns, int64(lease), []byte(tok))
			}
			want := []int64{0, d.Limit, d.Remaining, ceilMS(d.RetryAfter), ceilMS(d.ResetAfter)}
			if d.Limited {
				want[0] = 1
			}
			got := ints(t, rdb.Do(ctx, "CL.ACQUIRE", key, limit, lease.String(), tok, "MS"))
			if !slices.Equal(got, want) {
				t.Fatalf("%s: CL.ACQUIRE %d %v = %v, want %v", where, limit, lease, got, want)
			}
		}
		live := ls.Tokens(ns)
		usage, err := rdb.Do(ctx, "MEMORY", "USAGE", key).Int64()
		if len(live) == 0 {
			if err == nil {
				t.Fatalf("%s: no live lease, yet MEMORY USAGE = %d", where, usage)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%s: MEMORY USAGE: %v", where, err)
		}
		// Stored leases are pruned when written, so the model's own
		// entries (live or not) are what the server stores; the key expires
		// with the last of them (its end rounded up to the millisecond).
		var stored []string
		var last int64
		ls.Each(func(tok string, exp int64) { stored = append(stored, tok); last = max(last, exp) })
		pttl, err := rdb.PTTL(ctx, key).Result()
		if want := ceilMS(last) - ns/1e6; err != nil || pttl.Milliseconds() != want {
			t.Fatalf("%s: PTTL %v, %v; want %d ms", where, pttl, err, want)
		}
		packed := len(stored) == 1 && len(stored[0]) <= limiter.PackedTokenLen
		if entryOnly := usage == int64(len(key))+keyspace.EntryOverhead; entryOnly != packed {
			t.Fatalf("%s: stored %q, MEMORY USAGE %d: packed %v, want %v", where, stored, usage, entryOnly, packed)
		}
		if packed {
			packedSeen++
		} else {
			objectSeen++
		}
		info, err := rdb.Do(ctx, "CL.INFO", key).Slice()
		if err != nil || len(info) < 6 {
			t.Fatalf("%s: CL.INFO = %v, %v", where, info, err)
		}
		var gotToks []string
		for _, x := range info[5].([]any) {
			gotToks = append(gotToks, x.(string))
		}
		slices.Sort(live)
		if !slices.Equal(gotToks, live) {
			t.Fatalf("%s: CL.INFO tokens %q, want %q", where, gotToks, live)
		}
	}
	t.Logf("%d random calls; the key was checked %d times packed and %d times as an object", steps, packedSeen, objectSeen)
	if packedSeen == 0 || objectSeen == 0 {
		t.Fatal("both forms must be exercised")
	}
}

// ceilMS is a reply's milliseconds for a duration in ns (-1 stays -1).
func ceilMS(ns int64) int64 {
	if ns < 0 {
		return -1
	}
	return (ns + 1e6 - 1) / 1e6
}
