package cellservertest_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/cellserver/cellserver/cellservertest"
)

// TestLimited is the README's example ("Testing your code against
// cellserver"), word for word.
func TestLimited(t *testing.T) {
	s := cellservertest.Run(t)
	rdb := redis.NewClient(&redis.Options{Addr: s.Addr()})
	ctx := context.Background()
	throttle := func() int64 { // 1 request per 10 s; 1: limited
		r, err := rdb.Do(ctx, "CL.THROTTLE", "user:1", 0, 1, 10).Int64Slice()
		if err != nil {
			t.Fatal(err)
		}
		return r[0]
	}
	if throttle() != 0 || throttle() != 1 {
		t.Fatal("want allowed, then limited")
	}
	s.Advance(10 * time.Second) // the server's clock: nothing sleeps
	if throttle() != 0 {
		t.Fatal("want allowed 10 s later")
	}
}
