package server_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/cellserver/cellserver/internal/servertest"
	"github.com/cellserver/cellserver/server"
	"github.com/redis/go-redis/v9"
)

func TestSlowlog(t *testing.T) {
	_, addr := servertest.Start(t, server.Config{SlowlogSlowerThan: time.Nanosecond, SlowlogMaxLen: 3})
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	ctx := context.Background()
	rdb.Do(ctx, "SLOWLOG", "RESET")
	long := strings.Repeat("x", 200)
	rdb.Do(ctx, "CL.THROTTLE", long, 1, 1, 1)
	rdb.Do(ctx, "ECHO", "hello")
	if n, err := rdb.Do(ctx, "SLOWLOG", "LEN").Int64(); err != nil || n != 3 { // RESET, CL.THROTTLE, ECHO
		t.Fatalf("SLOWLOG LEN = %d, %v; want 3", n, err)
	}
	rdb.Do(ctx, "PING")
	entries, err := rdb.Do(ctx, "SLOWLOG", "GET", -1).Slice()
	if err != nil || len(entries) != 3 {
		t.Fatalf("SLOWLOG GET -1: %v %v (max-len 3)", entries, err)
	}
	// Newest first, three kept: PING, SLOWLOG LEN, ECHO.
	first := entries[0].([]any)
	if args := first[3].([]any); args[0] != "PING" {
		t.Fatalf("newest entry %v, want PING", first)
	}
	last := entries[2].([]any)
	if args := last[3].([]any); args[0] != "ECHO" || args[1] != "hello" {
		t.Fatalf("oldest kept entry %v, want ECHO hello", last)
	}
	if len(first) != 6 || !strings.HasPrefix(first[4].(string), "127.0.0.1:") {
		t.Fatalf("entry shape %v", first)
	}
	rdb.Do(ctx, "SLOWLOG", "RESET")
	rdb.Do(ctx, "CL.THROTTLE", long, 1, 1, 1)
	e, _ := rdb.Do(ctx, "SLOWLOG", "GET", 1).Slice()
	arg := e[0].([]any)[3].([]any)[1].(string)
	if arg != long[:128]+"... (72 more bytes)" {
		t.Fatalf("long argument kept as %q", arg)
	}
	if err := rdb.Do(ctx, "SLOWLOG", "GET", -2).Err(); err == nil {
		t.Fatal("SLOWLOG GET -2 accepted")
	}
}

func TestSlowlogOffAndInfoLimiters(t *testing.T) {
	_, addr := servertest.Start(t, server.Config{SlowlogSlowerThan: -1})
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	ctx := context.Background()
	for i := 0; i < 4; i++ {
		rdb.Do(ctx, "CL.THROTTLE", "k", 1, 1, 60)
		rdb.Do(ctx, "CL.FIXED", "f", 3, "1m")
	}
	if n, _ := rdb.Do(ctx, "SLOWLOG", "LEN").Int64(); n != 0 {
		t.Fatalf("SLOWLOG off kept %d entries", n)
	}
	info := rdb.Info(ctx, "limiters").Val()
	for _, want := range []string{"limiter_cl.throttle:allowed=2,limited=2", "limiter_cl.fixed:allowed=3,limited=1"} {
		if !strings.Contains(info, want) {
			t.Errorf("INFO limiters lacks %q:\n%s", want, info)
		}
	}
}
