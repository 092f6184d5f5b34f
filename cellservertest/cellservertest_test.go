package cellservertest_test

import (
	"context"
	"errors"
	"net"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/cellserver/cellserver/cellservertest"
	"github.com/cellserver/cellserver/persistence/changelog"
	"github.com/cellserver/cellserver/persistence/pebblestore"
	"github.com/cellserver/cellserver/server"
)

func newClient(t *testing.T, addr string, password string) *redis.Client {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: addr, Password: password, MaxRetries: -1})
	t.Cleanup(func() { rdb.Close() })
	return rdb
}

// throttle runs CL.THROTTLE key 0 1 10 (one request per 10 s, no burst)
// and returns its reply.
func throttle(t *testing.T, rdb *redis.Client, key string) []int64 {
	t.Helper()
	r, err := rdb.Do(context.Background(), "CL.THROTTLE", key, 0, 1, 10).Int64Slice()
	if err != nil {
		t.Fatalf("CL.THROTTLE %s: %v", key, err)
	}
	return r
}

// TestClockDrivesThrottle: the server decides at the instants the test
// sets, not at the wall clock's: a key allowed once per 10 s is refused
// until the clock is moved the whole 10 s, which no real time in the test
// could cover.
func TestClockDrivesThrottle(t *testing.T) {
	s := cellservertest.Run(t)
	rdb := newClient(t, s.Addr(), "")
	t0 := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	s.SetTime(t0)
	if got := s.Now(); !got.Equal(t0) {
		t.Fatalf("Now after SetTime: %v, want %v", got, t0)
	}
	steps := []struct {
		at   time.Duration
		want []int64 // limited, limit, remaining, retry_after, reset_after
	}{
		{0, []int64{0, 1, 0, -1, 10}},
		{0, []int64{1, 1, 0, 10, 10}},
		{9*time.Second + 999*time.Millisecond, []int64{1, 1, 0, 1, 1}},
		{10 * time.Second, []int64{0, 1, 0, -1, 10}},
	}
	for _, st := range steps {
		s.SetTime(t0.Add(st.at))
		if got := throttle(t, rdb, "user:1"); !slices.Equal(got, st.want) {
			t.Fatalf("at t0+%v: CL.THROTTLE = %v, want %v", st.at, got, st.want)
		}
	}
	// Advance moves from where the clock is; the TTL follows the clock.
	s.Advance(10 * time.Second)
	if got := throttle(t, rdb, "user:1"); got[0] != 0 {
		t.Fatalf("after Advance(10s): %v, want allowed", got)
	}
	if got := s.Now(); !got.Equal(t0.Add(20 * time.Second)) {
		t.Fatalf("Now = %v, want t0+20s", got)
	}
}

// TestDefaultClockStandsStill: without WithClock the clock starts near the
// wall clock, truncated to the second, and does not move on its own.
func TestDefaultClockStandsStill(t *testing.T) {
	before := time.Now().Truncate(time.Second)
	s := cellservertest.Run(t)
	n := s.Now()
	if n.Before(before) || n.After(time.Now()) || n.Nanosecond() != 0 {
		t.Fatalf("Now = %v, want a whole second between %v and now", n, before)
	}
	rdb := newClient(t, s.Addr(), "")
	throttle(t, rdb, "k")
	if got := throttle(t, rdb, "k"); got[0] != 1 {
		t.Fatalf("second call at the same instant: %v, want limited", got)
	}
	if got := s.Now(); !got.Equal(n) {
		t.Fatalf("Now moved by itself: %v then %v", n, got)
	}
}

// TestWithClock: the base clock is the caller's; Advance shifts it.
func TestWithClock(t *testing.T) {
	base := time.Date(2031, 5, 6, 7, 8, 9, 0, time.UTC)
	s := cellservertest.Run(t, cellservertest.WithClock(func() time.Time { return base }))
	if got := s.Now(); !got.Equal(base) {
		t.Fatalf("Now = %v, want %v", got, base)
	}
	s.Advance(-time.Minute)
	if got := s.Now(); !got.Equal(base.Add(-time.Minute)) {
		t.Fatalf("Now after Advance(-1m) = %v", got)
	}
	rdb := newClient(t, s.Addr(), "")
	if err := rdb.Set(context.Background(), "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	// The server reads that clock: a TTL set now expires when it moves.
	if err := rdb.Expire(context.Background(), "k", 5*time.Second).Err(); err != nil {
		t.Fatal(err)
	}
	s.Advance(5 * time.Second)
	if n, err := rdb.Exists(context.Background(), "k").Result(); err != nil || n != 1 {
		t.Fatalf("EXISTS at its deadline: %d, %v; want 1 (a key expires after it, as in Redis)", n, err)
	}
	s.Advance(time.Millisecond)
	if n, err := rdb.Exists(context.Background(), "k").Result(); err != nil || n != 0 {
		t.Fatalf("EXISTS after its TTL: %d, %v; want 0", n, err)
	}
}

// TestCleanupFreesThePort: when the test that ran the server ends, the
// server is stopped: its port can be listened on again and nothing
// answers there.
func TestCleanupFreesThePort(t *testing.T) {
	var addr string
	t.Run("inner", func(t *testing.T) {
		s := cellservertest.Run(t)
		addr = s.Addr()
		if err := newClient(t, addr, "").Ping(context.Background()).Err(); err != nil {
			t.Fatalf("PING: %v", err)
		}
	})
	if c, err := net.DialTimeout("tcp", addr, 5*time.Second); err == nil {
		c.Close()
		t.Fatalf("%s still accepts after the test ended", addr)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("listen on %s after the test ended: %v", addr, err)
	}
	ln.Close()
}

// TestTwoServersAreIndependent: two servers in one test have their own
// port, keys and clock.
func TestTwoServersAreIndependent(t *testing.T) {
	a, b := cellservertest.Run(t), cellservertest.Run(t)
	if a.Addr() == b.Addr() {
		t.Fatalf("both on %s", a.Addr())
	}
	ra, rb := newClient(t, a.Addr(), ""), newClient(t, b.Addr(), "")
	throttle(t, ra, "k")
	if got := throttle(t, rb, "k"); got[0] != 0 {
		t.Fatalf("b refuses a key only a used: %v", got)
	}
	a.Advance(time.Hour)
	if !b.Now().Before(a.Now()) {
		t.Fatalf("Advance on a moved b: a %v, b %v", a.Now(), b.Now())
	}
	if got := throttle(t, rb, "k"); got[0] != 1 {
		t.Fatalf("b's clock moved with a's: %v, want limited", got)
	}
}

// TestCloseAndRestart: Close is idempotent and frees the port; Restart
// keeps the address and, without a data directory, starts empty.
func TestCloseAndRestart(t *testing.T) {
	s := cellservertest.Run(t)
	addr := s.Addr()
	rdb := newClient(t, addr, "")
	ctx := context.Background()
	if err := rdb.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if err := s.Restart(); err != nil {
		t.Fatalf("Restart: %v", err)
	}
	if s.Addr() != addr {
		t.Fatalf("Restart moved from %s to %s", addr, s.Addr())
	}
	if err := rdb.Get(ctx, "k").Err(); !errors.Is(err, redis.Nil) {
		t.Fatalf("GET after a restart without a data directory: %v, want nil reply", err)
	}
	s.Close()
	s.Close()
	if s.Server() != nil {
		t.Fatal("Server() after Close is not nil")
	}
	if err := s.Restart(); err == nil {
		t.Fatal("Restart after Close succeeded")
	}
	if err := rdb.Ping(ctx).Err(); err == nil {
		t.Fatal("PING after Close answered")
	}
}

// TestStopThenRestart: between Stop and Restart nothing answers on the
// address; Restart brings the server back there.
func TestStopThenRestart(t *testing.T) {
	s := cellservertest.Run(t)
	addr := s.Addr()
	rdb := newClient(t, addr, "")
	ctx := context.Background()
	if err := s.Stop(); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if err := s.Stop(); err != nil {
		t.Fatalf("second Stop: %v", err)
	}
	if err := rdb.Ping(ctx).Err(); err == nil {
		t.Fatal("PING after Stop answered")
	}
	if err := s.Restart(); err != nil {
		t.Fatalf("Restart after Stop: %v", err)
	}
	if s.Addr() != addr {
		t.Fatalf("Restart moved from %s to %s", addr, s.Addr())
	}
	if err := rdb.Ping(ctx).Err(); err != nil {
		t.Fatalf("PING after Restart: %v", err)
	}
}

// TestRestartWithDataDir: with a data directory (the store opener given
// through WithConfig) the restarted server has the old one's keys,
// limiter state included.
func TestRestartWithDataDir(t *testing.T) {
	dir := t.TempDir()
	s := cellservertest.Run(t, cellservertest.WithConfig(func(c *server.Config) {
		c.DataDir, c.OpenStore, c.Fsync = dir, changelog.Opener(pebblestore.OpenStore, changelog.Options{}), "always"
	}))
	rdb := newClient(t, s.Addr(), "")
	throttle(t, rdb, "k")
	if err := s.Restart(); err != nil {
		t.Fatalf("Restart: %v", err)
	}
	if got := throttle(t, rdb, "k"); got[0] != 1 {
		t.Fatalf("after a restart from the data directory: %v, want limited (the state survived)", got)
	}
}

// TestWithPassword: clients must AUTH.
func TestWithPassword(t *testing.T) {
	s := cellservertest.Run(t, cellservertest.WithPassword("s3cret"))
	ctx := context.Background()
	if err := newClient(t, s.Addr(), "").Ping(ctx).Err(); err == nil || !strings.HasPrefix(err.Error(), "NOAUTH") {
		t.Fatalf("PING without AUTH: %v, want NOAUTH", err)
	}
	if err := newClient(t, s.Addr(), "s3cret").Ping(ctx).Err(); err != nil {
		t.Fatalf("PING with the password: %v", err)
	}
}

// TestBadOptions: misuse is an error from Start that says what is wrong.
func TestBadOptions(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts []cellservertest.Option
		want string
	}{
		{"nil clock", []cellservertest.Option{cellservertest.WithClock(nil)}, "WithClock(nil)"},
		{"Config.Clock", []cellservertest.Option{cellservertest.WithConfig(func(c *server.Config) { c.Clock = time.Now })}, "set the clock with WithClock"},
		{"data dir without a store", []cellservertest.Option{cellservertest.WithConfig(func(c *server.Config) { c.DataDir = t.TempDir() })}, "Config.OpenStore is not set"},
		{"metrics without an exporter", []cellservertest.Option{cellservertest.WithConfig(func(c *server.Config) { c.MetricsAddr = "127.0.0.1:0" })}, "Config.Metrics is not set"},
		{"bad address", []cellservertest.Option{cellservertest.WithConfig(func(c *server.Config) { c.Addr = "nonsense" })}, "addr"},
	} {
		s, err := cellservertest.Start(tc.opts...)
		if err == nil {
			s.Close()
			t.Errorf("%s: Start succeeded", tc.name)
			continue
		}
		if !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error with %q", tc.name, err, tc.want)
		}
	}
}

// TestLinksNeitherPebbleNorPrometheus: the package's import graph (not its
// tests') holds neither, so a user's test binary does not link them.
func TestLinksNeitherPebbleNorPrometheus(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go list")
	}
	gobin := filepath.Join(runtime.GOROOT(), "bin", "go")
	out, err := exec.Command(gobin, "list", "-deps", "github.com/cellserver/cellserver/cellservertest").CombinedOutput()
	if err != nil {
		t.Skipf("go list: %v\n%s", err, out)
	}
	deps := strings.Fields(string(out))
	for _, d := range deps {
		if strings.Contains(d, "pebble") || strings.Contains(d, "prometheus") {
			t.Errorf("cellservertest depends on %s", d)
		}
	}
	t.Logf("%d packages in the import graph, none of pebble or prometheus", len(deps))
}
