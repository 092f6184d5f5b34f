package compat

import (
	"context"
	"errors"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
)

// TestGoRedisRESP3 runs go-redis v9 with Protocol: 3 (HELLO 3 on every
// connection, no fallback): the README's CL.THROTTLE, GET/SET, a pipeline,
// MULTI/EXEC, CONFIG GET, INFO, CL.INFO as a map, and a reconnect.
func TestGoRedisRESP3(t *testing.T) {
	clk, addr := startServer(t)
	rdb := redis.NewClient(&redis.Options{Addr: addr, Protocol: 3, PoolSize: 1})
	t.Cleanup(func() { rdb.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), ioTimeout)
	defer cancel()

	hello, err := rdb.Do(ctx, "HELLO").Result()
	if err != nil {
		t.Fatalf("HELLO: %v", err)
	}
	hm, ok := hello.(map[any]any)
	if !ok || hm["proto"] != int64(3) || hm["server"] != "redis" {
		t.Fatalf("HELLO = %#v, want a map with proto 3", hello)
	}
	id1, err := rdb.ClientID(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}

	// The README's example: allowed, limit 16, 15 left, retry -1, reset 2 s.
	got, err := rdb.Do(ctx, "CL.THROTTLE", "user123", 15, 30, 60, 1).Int64Slice()
	if err != nil || !reflect.DeepEqual(got, []int64{0, 16, 15, -1, 2}) {
		t.Fatalf("CL.THROTTLE = %v, %v; want [0 16 15 -1 2]", got, err)
	}

	if err := rdb.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if v, err := rdb.Get(ctx, "k").Result(); err != nil || v != "v" {
		t.Fatalf("GET k = %q, %v", v, err)
	}
	if _, err := rdb.Get(ctx, "nokey").Result(); !errors.Is(err, redis.Nil) {
		t.Fatalf("GET nokey: %v, want redis.Nil (RESP3 null)", err)
	}

	// A pipeline.
	pipe := rdb.Pipeline()
	set := pipe.Set(ctx, "p", "1", 0)
	get := pipe.Get(ctx, "p")
	miss := pipe.Get(ctx, "nokey")
	thr := pipe.Do(ctx, "CL.THROTTLE", "user123", 15, 30, 60, 1)
	_, _ = pipe.Exec(ctx)
	if set.Err() != nil || get.Val() != "1" || !errors.Is(miss.Err(), redis.Nil) {
		t.Fatalf("pipeline: SET %v, GET %q %v, GET nokey %v", set.Err(), get.Val(), get.Err(), miss.Err())
	}
	if v, err := thr.Int64Slice(); err != nil || len(v) != 5 || v[2] != 14 {
		t.Fatalf("pipelined CL.THROTTLE = %v, %v; want 14 remaining", v, err)
	}

	// MULTI/EXEC.
	var txGet *redis.StringCmd
	var txThr *redis.Cmd
	if _, err := rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.Set(ctx, "t", "x", 0)
		txGet = p.Get(ctx, "t")
		txThr = p.Do(ctx, "CL.THROTTLE", "user123", 15, 30, 60, 1)
		return nil
	}); err != nil {
		t.Fatalf("MULTI/EXEC: %v", err)
	}
	if v, err := txThr.Int64Slice(); txGet.Val() != "x" || err != nil || len(v) != 5 || v[2] != 13 {
		t.Fatalf("MULTI/EXEC: GET %q, CL.THROTTLE %v %v", txGet.Val(), v, err)
	}

	// WATCH through go-redis's Watch helper: another client's SET between
	// WATCH and EXEC makes the first attempt fail with redis.TxFailedErr;
	// the retry commits.
	other := redis.NewClient(&redis.Options{Addr: addr, Protocol: 3})
	t.Cleanup(func() { other.Close() })
	if err := rdb.Set(ctx, "w", "10", 0).Err(); err != nil {
		t.Fatal(err)
	}
	attempts := 0
	incr := func(tx *redis.Tx) error {
		attempts++
		cur, err := tx.Get(ctx, "w").Int64()
		if err != nil {
			return err
		}
		if attempts == 1 {
			if err := other.Set(ctx, "w", "100", 0).Err(); err != nil {
				return err
			}
		}
		_, err = tx.TxPipelined(ctx, func(p redis.Pipeliner) error {
			p.Set(ctx, "w", cur+1, 0)
			return nil
		})
		return err
	}
	if err := rdb.Watch(ctx, incr, "w"); !errors.Is(err, redis.TxFailedErr) {
		t.Fatalf("WATCH, first attempt: %v, want redis.TxFailedErr", err)
	}
	if err := rdb.Watch(ctx, incr, "w"); err != nil {
		t.Fatalf("WATCH, retry: %v", err)
	}
	if v, err := rdb.Get(ctx, "w").Result(); attempts != 2 || err != nil || v != "101" {
		t.Fatalf("after WATCH: %d attempts, w = %q, %v; want 2 and 101", attempts, v, err)
	}

	// CONFIG GET is a map.
	cfg, err := rdb.ConfigGet(ctx, "maxclients").Result()
	if err != nil || cfg["maxclients"] == "" {
		t.Fatalf("CONFIG GET maxclients = %v, %v", cfg, err)
	}
	raw, err := rdb.Do(ctx, "CONFIG", "GET", "maxclients").Result()
	if _, ok := raw.(map[any]any); err != nil || !ok {
		t.Fatalf("CONFIG GET raw reply %#v, %v; want a map", raw, err)
	}

	// INFO is a verbatim string: go-redis strips the txt: format.
	info, err := rdb.Info(ctx, "server").Result()
	if err != nil || !strings.HasPrefix(info, "# Server\r\n") || !strings.Contains(info, "redis_version:") {
		t.Fatalf("INFO server = %.80q, %v", info, err)
	}
	ci, err := rdb.ClientInfo(ctx).Result()
	if err != nil || ci.Resp != 3 {
		t.Fatalf("CLIENT INFO = %+v, %v; want resp=3", ci, err)
	}

	// CL.INFO is a map; a missing key is a null.
	clk.Advance(0)
	ci2, err := rdb.Do(ctx, "CL.INFO", "user123").Result()
	m, ok := ci2.(map[any]any)
	if err != nil || !ok || m["kind"] != "gcra" || m["tat_ns"] != strconv.FormatInt(t0.Add(6*time.Second).UnixNano(), 10) || m["ttl_ms"] == nil {
		t.Fatalf("CL.INFO = %#v, %v; want a map with kind gcra and tat_ns t0+6s as a string (three calls)", ci2, err)
	}
	if _, err := rdb.Do(ctx, "CL.INFO", "nokey").Result(); !errors.Is(err, redis.Nil) {
		t.Fatalf("CL.INFO nokey: %v, want redis.Nil", err)
	}

	// Reconnect: the server closes the connection (QUIT); the next command
	// dials again, says HELLO 3 again and is answered in RESP3.
	if err := rdb.Do(ctx, "QUIT").Err(); err != nil {
		t.Fatalf("QUIT: %v", err)
	}
	var id2 int64
	for i := 0; i < 5; i++ { // a command on the closed connection may fail once
		if id2, err = rdb.ClientID(ctx).Result(); err == nil {
			break
		}
	}
	if err != nil || id2 == id1 {
		t.Fatalf("after QUIT: CLIENT ID %d (first %d), %v; want a new connection", id2, id1, err)
	}
	if ci, err := rdb.ClientInfo(ctx).Result(); err != nil || ci.Resp != 3 {
		t.Fatalf("after reconnect CLIENT INFO = %+v, %v; want resp=3", ci, err)
	}
	if v, err := rdb.Get(ctx, "k").Result(); err != nil || v != "v" {
		t.Fatalf("after reconnect GET k = %q, %v", v, err)
	}
}

// TestGoRedisDefaultNoNOPROTO: a go-redis client with default options
// sends HELLO 3, which cellserver answers (no NOPROTO in INFO errorstats,
// where there was one per connection before, and a fallback to RESP2),
// then CLIENT MAINT_NOTIFICATIONS ON, which cellserver accepts (it has no
// maintenance events to send): errorstats stays empty, with or without
// maintenance notifications.
func TestGoRedisDefaultNoNOPROTO(t *testing.T) {
	for _, tc := range []struct {
		name string
		opt  redis.Options
		want string // errorstats lines
	}{
		{"defaults", redis.Options{}, ""},
		{"maint notifications off", redis.Options{
			MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, addr := startServer(t)
			opt := tc.opt
			opt.Addr = addr
			rdb := redis.NewClient(&opt)
			t.Cleanup(func() { rdb.Close() })
			ctx, cancel := context.WithTimeout(context.Background(), ioTimeout)
			defer cancel()
			if err := rdb.Ping(ctx).Err(); err != nil {
				t.Fatal(err)
			}
			stats, err := rdb.Info(ctx, "errorstats").Result()
			if err != nil {
				t.Fatal(err)
			}
			var lines []string
			for _, l := range strings.Split(stats, "\r\n") {
				if strings.HasPrefix(l, "errorstat_") {
					lines = append(lines, l)
				}
			}
			if got := strings.Join(lines, " "); got != tc.want {
				t.Errorf("INFO errorstats after the connection: %q, want %q", got, tc.want)
			}
			ci, err := rdb.ClientInfo(ctx).Result()
			if err != nil || ci.Resp != 3 {
				t.Errorf("CLIENT INFO = %+v, %v; want resp=3", ci, err)
			}
		})
	}
}
