package compat

import (
	"context"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
)

// rueidisOptions is the option set the rueidis tests use: rueidis's
// defaults (HELLO 3, client-side caching through CLIENT TRACKING) with
// the cache switched off or on.
func rueidisOptions(addr string, cache bool) rueidis.ClientOption {
	return rueidis.ClientOption{InitAddress: []string{addr}, DisableCache: !cache}
}

// serverHasTracking says whether the server knows CLIENT TRACKING (OFF
// changes nothing on a connection that does not track).
func serverHasTracking(t *testing.T, addr string) bool {
	rdb := redis.NewClient(&redis.Options{Addr: addr, Protocol: 3})
	defer rdb.Close()
	ctx, cancel := context.WithTimeout(context.Background(), ioTimeout)
	defer cancel()
	err := rdb.Do(ctx, "CLIENT", "TRACKING", "OFF").Err()
	if err != nil && strings.Contains(err.Error(), "unknown subcommand") {
		return false
	}
	if err != nil {
		t.Fatalf("CLIENT TRACKING OFF: %v", err)
	}
	return true
}

// TestRueidis runs rueidis (pinned in go.mod) against cellserver through a
// proxy that can close the connections: the README's CL.THROTTLE, CL.INFO's
// tat_ns as an exact string, SET/GET, a pipeline, MULTI/EXEC, a WATCH
// transaction whose first attempt another client's write aborts and whose
// retry commits, and a reconnect. "cache off" is rueidis with
// DisableCache; "cache on" is its default configuration, which needs
// CLIENT TRACKING, and also checks that a cached GET is invalidated by
// another client's SET; it skips itself while the server answers CLIENT
// TRACKING with an unknown-subcommand error.
func TestRueidis(t *testing.T) {
	for _, cache := range []bool{false, true} {
		name := map[bool]string{false: "cache off", true: "cache on"}[cache]
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			_, addr := startServer(t)
			if cache && !serverHasTracking(t, addr) {
				t.Skip("needs CLIENT TRACKING")
			}
			p := startKillProxy(t, addr)
			testRueidisScenario(t, p, cache)
		})
	}
}

func testRueidisScenario(t *testing.T, p *killProxy, cache bool) {
	ctx, cancel := context.WithTimeout(context.Background(), ioTimeout)
	defer cancel()
	c, err := rueidis.NewClient(rueidisOptions(p.addr, cache))
	if err != nil {
		t.Fatalf("rueidis.NewClient: %v", err)
	}
	t.Cleanup(c.Close)
	other, err := rueidis.NewClient(rueidisOptions(p.addr, cache))
	if err != nil {
		t.Fatalf("rueidis.NewClient: %v", err)
	}
	t.Cleanup(other.Close)
	b := c.B()
	throttle := func() rueidis.Completed {
		return b.Arbitrary("CL.THROTTLE").Keys("user123").Args("15", "30", "60", "1").Build()
	}

	hello, err := c.Do(ctx, b.Arbitrary("HELLO").Build()).AsMap()
	if err != nil {
		t.Fatalf("HELLO: %v", err)
	}
	if proto := protoOf(hello); proto != 3 {
		t.Fatalf("HELLO proto = %d, want 3", proto)
	}

	// The README's example.
	got, err := c.Do(ctx, throttle()).AsIntSlice()
	if err != nil || !reflect.DeepEqual(got, []int64{0, 16, 15, -1, 2}) {
		t.Fatalf("CL.THROTTLE = %v, %v; want [0 16 15 -1 2]", got, err)
	}
	// tat_ns is a bulk string, exact.
	info, err := c.Do(ctx, b.Arbitrary("CL.INFO").Keys("user123").Build()).AsMap()
	if err != nil {
		t.Fatalf("CL.INFO: %v", err)
	}
	tatMsg := info["tat_ns"]
	tat, err := tatMsg.ToString()
	if want := strconv.FormatInt(t0.Add(2*time.Second).UnixNano(), 10); err != nil || tat != want {
		t.Fatalf("CL.INFO tat_ns = %q, %v; want the string %q", tat, err, want)
	}

	if err := c.Do(ctx, b.Set().Key("k").Value("v").Build()).Error(); err != nil {
		t.Fatalf("SET: %v", err)
	}
	if v, err := c.Do(ctx, b.Get().Key("k").Build()).ToString(); err != nil || v != "v" {
		t.Fatalf("GET k = %q, %v", v, err)
	}
	if err := c.Do(ctx, b.Get().Key("nokey").Build()).Error(); !rueidis.IsRedisNil(err) {
		t.Fatalf("GET nokey: %v, want a RESP3 null", err)
	}

	// A pipeline.
	res := c.DoMulti(ctx, b.Set().Key("p").Value("1").Build(), b.Get().Key("p").Build(),
		b.Get().Key("nokey").Build(), throttle())
	if v, err := res[1].ToString(); res[0].Error() != nil || err != nil || v != "1" || !rueidis.IsRedisNil(res[2].Error()) {
		t.Fatalf("pipeline: SET %v, GET %q %v, GET nokey %v", res[0].Error(), v, err, res[2].Error())
	}
	if v, err := res[3].AsIntSlice(); err != nil || !reflect.DeepEqual(v, []int64{0, 16, 14, -1, 4}) {
		t.Fatalf("pipelined CL.THROTTLE = %v, %v", v, err)
	}

	// MULTI/EXEC.
	res = c.DoMulti(ctx, b.Multi().Build(), b.Set().Key("t").Value("x").Build(), b.Get().Key("t").Build(),
		throttle(), b.Exec().Build())
	exec, err := res[4].ToArray()
	if err != nil || len(exec) != 3 {
		t.Fatalf("EXEC = %v, %v", exec, err)
	}
	if v, _ := exec[1].ToString(); v != "x" {
		t.Fatalf("MULTI/EXEC GET t = %q", v)
	}
	if v, err := exec[2].AsIntSlice(); err != nil || !reflect.DeepEqual(v, []int64{0, 16, 13, -1, 6}) {
		t.Fatalf("MULTI/EXEC CL.THROTTLE = %v, %v", v, err)
	}

	// WATCH on a dedicated connection: another client's SET between WATCH
	// and EXEC aborts the first attempt (EXEC answers null); the retry
	// commits.
	if err := c.Do(ctx, b.Set().Key("w").Value("10").Build()).Error(); err != nil {
		t.Fatal(err)
	}
	attempts := 0
	for done := false; !done; {
		attempts++
		if attempts > 2 {
			t.Fatalf("WATCH: %d attempts, want 2", attempts)
		}
		err := c.Dedicated(func(d rueidis.DedicatedClient) error {
			db := d.B()
			if err := d.Do(ctx, db.Watch().Key("w").Build()).Error(); err != nil {
				return err
			}
			cur, err := d.Do(ctx, db.Get().Key("w").Build()).AsInt64()
			if err != nil {
				return err
			}
			if attempts == 1 {
				if err := other.Do(ctx, other.B().Set().Key("w").Value("100").Build()).Error(); err != nil {
					return err
				}
			}
			r := d.DoMulti(ctx, db.Multi().Build(), db.Set().Key("w").Value(strconv.FormatInt(cur+1, 10)).Build(), db.Exec().Build())
			if err := r[2].Error(); rueidis.IsRedisNil(err) {
				return nil // aborted: try again
			} else if err != nil {
				return err
			}
			done = true
			return nil
		})
		if err != nil {
			t.Fatalf("WATCH attempt %d: %v", attempts, err)
		}
	}
	if attempts != 2 {
		t.Fatalf("WATCH: committed on attempt %d, want the first aborted", attempts)
	}
	if v, err := c.Do(ctx, b.Get().Key("w").Build()).ToString(); err != nil || v != "101" {
		t.Fatalf("after WATCH: w = %q, %v; want 101", v, err)
	}

	if cache {
		// A cached read, invalidated when another client changes the key.
		get := func() rueidis.RedisResult { return c.DoCache(ctx, b.Get().Key("k").Cache(), time.Minute) }
		if v, _ := get().ToString(); v != "v" {
			t.Fatalf("cached GET k = %q", v)
		}
		if r := get(); !r.IsCacheHit() {
			t.Fatalf("second GET k was not served from the cache")
		}
		if err := other.Do(ctx, other.B().Set().Key("k").Value("v2").Build()).Error(); err != nil {
			t.Fatal(err)
		}
		for { // until the invalidation arrives (ctx bounds the wait)
			if v, err := get().ToString(); err != nil || v == "v2" {
				break
			}
			if ctx.Err() != nil {
				t.Fatal("cached GET k still answers the old value: no invalidation")
			}
		}
		if err := c.Do(ctx, b.Set().Key("k").Value("v").Build()).Error(); err != nil {
			t.Fatal(err)
		}
	}

	// Reconnect: the connections are closed under the client; a command on
	// the dead connection may fail once, then rueidis dials again.
	id1, err := c.Do(ctx, b.ClientId().Build()).AsInt64()
	if err != nil {
		t.Fatal(err)
	}
	if n := p.KillAll(); n == 0 {
		t.Fatal("the proxy carried no connection to close")
	}
	var id2 int64
	for i := 0; i < 5; i++ {
		if id2, err = c.Do(ctx, b.ClientId().Build()).AsInt64(); err == nil {
			break
		}
	}
	if err != nil || id2 == id1 {
		t.Fatalf("after the connection closed: CLIENT ID %d (first %d), %v; want a new connection", id2, id1, err)
	}
	if v, err := c.Do(ctx, b.Get().Key("k").Build()).ToString(); err != nil || v != "v" {
		t.Fatalf("after reconnect GET k = %q, %v", v, err)
	}
	hello, _ = c.Do(ctx, b.Arbitrary("HELLO").Build()).AsMap()
	if proto := protoOf(hello); proto != 3 {
		t.Fatalf("after reconnect HELLO proto = %d, want 3", proto)
	}
	t.Logf("rueidis (cache %v): README example, tat_ns %s, SET/GET, pipeline, MULTI/EXEC, WATCH (%d attempts), reconnect (CLIENT ID %d -> %d)",
		cache, tat, attempts, id1, id2)
}

// protoOf returns HELLO's proto field, or -1.
func protoOf(hello map[string]rueidis.RedisMessage) int64 {
	m, ok := hello["proto"]
	if !ok {
		return -1
	}
	n, err := m.AsInt64()
	if err != nil {
		return -1
	}
	return n
}
