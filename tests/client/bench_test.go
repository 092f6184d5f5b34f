package clienttests

import (
	"errors"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/cellserver/cellserver/client"
	"github.com/cellserver/cellserver/internal/servertest"
	"github.com/cellserver/cellserver/server"
)

// BenchmarkThrottle compares Client.Throttle with a raw rdb.Do of the same
// CL.THROTTLE and reading its reply, one call at a time on loopback: the
// difference is the client's own cost.
func BenchmarkThrottle(b *testing.B) {
	_, addr := servertest.Start(b, server.Config{})
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	c := client.New(rdb)
	key := "bench:user"
	b.Run("client", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			r, err := c.Throttle(ctx, key, 100, client.PerSecond(1000), 1)
			if err != nil || r.Limit != 101 {
				b.Fatal(r, err)
			}
		}
	})
	// raw-vars passes the same values as run-time variables, as any
	// caller with a key from a request does: go-redis's args ...any boxes
	// the key and each integer >= 256 (count 1000 here).
	b.Run("raw-vars", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if err := rawThrottle(rdb, key, 100, 1000, 1, 1); err != nil {
				b.Fatal(err)
			}
		}
	})
	// raw-const passes constants, which Go boxes without allocating.
	b.Run("raw-const", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			v, err := rdb.Do(ctx, "CL.THROTTLE", key, int64(100), int64(1000), int64(1), int64(1)).Result()
			if err != nil {
				b.Fatal(err)
			}
			if a, ok := v.([]any); !ok || a[1].(int64) != 101 {
				b.Fatal(v)
			}
		}
	})
}

//go:noinline
func rawThrottle(rdb *redis.Client, key string, burst, count, period, q int64) error {
	v, err := rdb.Do(ctx, "CL.THROTTLE", key, burst, count, period, q).Result()
	if err != nil {
		return err
	}
	if a, ok := v.([]any); !ok || a[1].(int64) != burst+1 {
		return errors.New("unexpected reply")
	}
	return nil
}
