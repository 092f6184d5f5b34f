package server_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/cellserver/cellserver/internal/servertest"
	"github.com/cellserver/cellserver/server"
	"github.com/redis/go-redis/v9"
)

func infoField(t *testing.T, rdb *redis.Client, section, field string) string {
	t.Helper()
	for _, l := range strings.Split(rdb.Info(context.Background(), section).Val(), "\r\n") {
		if v, ok := strings.CutPrefix(l, field+":"); ok {
			return v
		}
	}
	t.Fatalf("INFO %s has no %s", section, field)
	return ""
}

func TestMaxmemoryEvicts(t *testing.T) {
	const limit = 256 << 10
	_, addr := servertest.Start(t, server.Config{MaxMemory: limit})
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	ctx := context.Background()
	pipe := rdb.Pipeline()
	const keys = 20000
	for i := 0; i < keys; i++ {
		pipe.Do(ctx, "CL.THROTTLE", fmt.Sprint("spray:", i), 5, 1, 3600)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		t.Fatal(err)
	}
	var used, evicted int64
	fmt.Sscan(infoField(t, rdb, "memory", "keyspace_memory"), &used)
	fmt.Sscan(infoField(t, rdb, "stats", "evicted_keys"), &evicted)
	if used > limit || evicted == 0 {
		t.Fatalf("keyspace_memory %d (cap %d), evicted %d", used, limit, evicted)
	}
	if n := rdb.DBSize(ctx).Val(); n+evicted != keys {
		t.Fatalf("dbsize %d + evicted %d != %d", n, evicted, keys)
	}
}

func TestMaxmemoryNoEviction(t *testing.T) {
	_, addr := servertest.Start(t, server.Config{MaxMemory: 2000, MaxMemoryPolicy: "noeviction"})
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	ctx := context.Background()
	var refused error
	n := 0
	for ; n < 100; n++ {
		if err := rdb.Do(ctx, "CL.THROTTLE", fmt.Sprint("k", n), 5, 1, 3600).Err(); err != nil {
			refused = err
			break
		}
	}
	if refused == nil || refused.Error() != "OOM command not allowed when used memory > 'maxmemory'." {
		t.Fatalf("after %d keys: %v", n, refused)
	}
	// Existing keys keep being limited; other limiter kinds and SET refuse new keys too.
	if err := rdb.Do(ctx, "CL.THROTTLE", "k0", 5, 1, 3600).Err(); err != nil {
		t.Fatalf("existing key refused: %v", err)
	}
	for _, args := range [][]any{{"CL.FIXED", "new1", 5, "1m"}, {"SET", "new2", "x"}, {"CL.ALL", "CL.FIXED", "new3", 5, "1m", 1}} {
		if err := rdb.Do(ctx, args...).Err(); err == nil || !strings.HasPrefix(err.Error(), "OOM") {
			t.Errorf("%v: %v, want OOM", args, err)
		}
	}
	if got := infoField(t, rdb, "stats", "oom_refusals"); got != "4" {
		t.Errorf("oom_refusals %s, want 4", got)
	}
}
