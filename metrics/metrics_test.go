package metrics_test

import (
	"bufio"
	"context"
	"io"
	"math"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/redis/go-redis/v9"

	"github.com/cellserver/cellserver/commands"
	"github.com/cellserver/cellserver/internal/servertest"
	"github.com/cellserver/cellserver/metrics"
	"github.com/cellserver/cellserver/resp"
	"github.com/cellserver/cellserver/server"
)

func newClient(t *testing.T, addr string, db int) *redis.Client {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: addr, DB: db, Protocol: 2, PoolSize: 1, MaxRetries: -1, DisableIdentity: true})
	t.Cleanup(func() { rdb.Close() })
	return rdb
}

// throttle sends n CL.THROTTLE calls on key (capacity burst+1, one token
// per minute: the test clock never refills it) and counts the limited ones.
func throttle(t *testing.T, rdb *redis.Client, key string, burst, n int) (limited int) {
	t.Helper()
	for range n {
		v, err := rdb.Do(context.Background(), "CL.THROTTLE", key, burst, 1, 60).Slice()
		if err != nil {
			t.Fatalf("CL.THROTTLE %s: %v", key, err)
		}
		if v[0].(int64) == 1 {
			limited++
		}
	}
	return limited
}

// sendLimiterTraffic sends 7 allowed and 3 limited CL.THROTTLE calls on
// user:1 and user:2.
func sendLimiterTraffic(t *testing.T, rdb *redis.Client) {
	t.Helper()
	if l := throttle(t, rdb, "user:1", 4, 6) + throttle(t, rdb, "user:2", 1, 4); l != 3 {
		t.Fatalf("%d limited decisions, want 3", l)
	}
}

func TestCommandMetrics(t *testing.T) {
	st := startStack(t, resp.Config{})
	sc := newScraper(t, st.sources())
	ctx := context.Background()
	rdb := newClient(t, st.addr, 0)
	if err := rdb.Ping(ctx).Err(); err != nil { // connection set up before the baseline
		t.Fatal(err)
	}
	before := sc.scrape()

	sendLimiterTraffic(t, rdb)
	if err := rdb.Do(ctx, "NOSUCHCMD", "x").Err(); err == nil || !strings.HasPrefix(err.Error(), "ERR unknown command") {
		t.Fatalf("unknown command: %v", err)
	}
	// GET has a fixed arity: refused before running.
	if err := rdb.Do(ctx, "GET").Err(); err == nil || !strings.Contains(err.Error(), "wrong number of arguments") {
		t.Fatalf("GET without a key: %v", err)
	}
	// CL.THROTTLE checks its own arity, as redis-cell: it runs and fails.
	if err := rdb.Do(ctx, "CL.THROTTLE", "user:1").Err(); err == nil || !strings.HasPrefix(err.Error(), "Cell error") {
		t.Fatalf("CL.THROTTLE without limits: %v", err)
	}
	other := newClient(t, st.addr, 2)
	if err := other.Set(ctx, "plain", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	after := sc.scrape()

	const cmd = "cellserver_commands_total"
	delta(t, before, after, 11, cmd, "command", "cl.throttle")
	delta(t, before, after, 1, "cellserver_command_errors_total", "command", "cl.throttle")
	delta(t, before, after, 0, "cellserver_command_rejected_total", "command", "cl.throttle")
	delta(t, before, after, 0, cmd, "command", "get")
	delta(t, before, after, 1, "cellserver_command_rejected_total", "command", "get")
	delta(t, before, after, 0, "cellserver_command_errors_total", "command", "get")
	delta(t, before, after, 7, "cellserver_limiter_decisions_total", "command", "cl.throttle", "result", "allowed")
	delta(t, before, after, 3, "cellserver_limiter_decisions_total", "command", "cl.throttle", "result", "limited")
	delta(t, before, after, 2, "cellserver_errors_total", "code", "ERR")
	delta(t, before, after, 1, "cellserver_errors_total", "code", "Cell")
	delta(t, before, after, 1, "cellserver_connections_total")
	if after.has("cellserver_limiter_decisions_total", "command", "ping", "result", "allowed") {
		t.Error("limiter decisions reported for PING")
	}
	if got := after.series("cellserver_limiter_decisions_total"); len(got) != 2 {
		t.Errorf("limiter decision series %q, want cl.throttle's two", got)
	}

	// The latency histogram counts every call, and only calls.
	h, ok := after.metric("cellserver_command_duration_seconds", "command", "cl.throttle")
	if !ok || h.Histogram == nil {
		t.Fatal("no cl.throttle duration histogram")
	}
	if got, want := float64(h.Histogram.GetSampleCount()), after.value(cmd, "command", "cl.throttle"); got != want {
		t.Errorf("histogram count %v, commands_total %v", got, want)
	}
	checkBuckets(t, h.Histogram)
	if g, ok := after.metric("cellserver_command_duration_seconds", "command", "get"); !ok || g.Histogram.GetSampleCount() != 0 {
		t.Errorf("GET (never run) histogram: %v", g)
	}

	// Keys: gauges per database and kind, only non-zero ones.
	if got := after.value("cellserver_keys", "db", "0", "kind", "gcra"); got != 2 {
		t.Errorf("keys{db=0,kind=gcra} = %v, want 2", got)
	}
	if got := after.value("cellserver_keys", "db", "2", "kind", "string"); got != 1 {
		t.Errorf("keys{db=2,kind=string} = %v, want 1", got)
	}
	if got := after.series("cellserver_keys"); strings.Join(got, " ") != "db=0,kind=gcra db=2,kind=string" {
		t.Errorf("keys series %q", got)
	}

	// Both clients hold one connection each.
	if got := after.value("cellserver_connected_clients"); got != 2 {
		t.Errorf("connected_clients = %v, want 2", got)
	}

	// No interval has completed yet: no prefix reported.
	if after.has("cellserver_limited_key_prefix_top", "prefix", "user") {
		t.Error("prefix reported before the first interval ended")
	}

	// An hour later the interval has rotated (and the GCRA keys, full after
	// at most 5 minutes, have expired).
	st.clk.Advance(time.Hour)
	later := sc.scrape()
	if got := later.series("cellserver_limited_key_prefix_top"); strings.Join(got, " ") != "prefix=user" {
		t.Errorf("limited_key_prefix_top series %q, want prefix=user", got)
	}
	if got := later.value("cellserver_limited_key_prefix_top", "prefix", "user"); got != 3 {
		t.Errorf("limited_key_prefix_top{prefix=user} = %v, want 3", got)
	}
	if !later.has("cellserver_limited_key_prefix_untracked") || later.value("cellserver_limited_key_prefix_untracked") != 0 {
		t.Errorf("limited_key_prefix_untracked = %v, want 0", later.value("cellserver_limited_key_prefix_untracked"))
	}
	if got := later.series("cellserver_keys"); strings.Join(got, " ") != "db=2,kind=string" {
		t.Errorf("keys series after expiry %q, want only db=2,kind=string", got)
	}
	if n := st.cmds.SweepOnce(); n != 2 {
		t.Fatalf("sweep removed %d keys, want 2", n)
	}
	delta(t, later, sc.scrape(), 2, "cellserver_expired_keys_total")

	// The next interval saw no limited decision.
	st.clk.Advance(time.Hour)
	if got := sc.scrape().series("cellserver_limited_key_prefix_top"); len(got) != 0 {
		t.Errorf("limited_key_prefix_top after a quiet interval: %q", got)
	}
}

// checkBuckets checks the histogram's buckets are commands.LatencyBuckets
// plus +Inf, with non-decreasing cumulative counts bounded by the sample
// count.
func checkBuckets(t *testing.T, h *dto.Histogram) {
	t.Helper()
	b := h.GetBucket()
	n := len(commands.LatencyBuckets)
	if len(b) != n+1 { // the text format lists the +Inf bucket
		t.Fatalf("%d buckets, want %d", len(b), n+1)
	}
	if last := b[n]; !math.IsInf(last.GetUpperBound(), 1) || last.GetCumulativeCount() != h.GetSampleCount() {
		t.Errorf("last bucket le=%v count %d, want +Inf and %d", last.GetUpperBound(), last.GetCumulativeCount(), h.GetSampleCount())
	}
	var prev uint64
	for i, bk := range b[:n] {
		if bk.GetUpperBound() != commands.LatencyBuckets[i] {
			t.Errorf("bucket %d bound %v, want %v", i, bk.GetUpperBound(), commands.LatencyBuckets[i])
		}
		if c := bk.GetCumulativeCount(); c < prev || c > h.GetSampleCount() {
			t.Errorf("bucket %d count %d (previous %d, total %d)", i, c, prev, h.GetSampleCount())
		}
		prev = bk.GetCumulativeCount()
	}
	if h.GetSampleSum() < 0 {
		t.Errorf("negative sum %v", h.GetSampleSum())
	}
}

// TestMetricFamilies checks every cellserver metric is documented and has
// the type its name promises.
func TestMetricFamilies(t *testing.T) {
	st := startStack(t, resp.Config{})
	sc := newScraper(t, st.sources())
	rdb := newClient(t, st.addr, 0)
	sendLimiterTraffic(t, rdb)
	rdb.Do(context.Background(), "NOSUCHCMD")
	st.clk.Advance(2 * time.Minute)
	// The keys have expired by now; make one for the keys gauge.
	throttle(t, rdb, "user:3", 1, 1)
	s := sc.scrape()
	want := map[string]dto.MetricType{
		"commands_total":               dto.MetricType_COUNTER,
		"command_errors_total":         dto.MetricType_COUNTER,
		"command_rejected_total":       dto.MetricType_COUNTER,
		"command_duration_seconds":     dto.MetricType_HISTOGRAM,
		"limiter_decisions_total":      dto.MetricType_COUNTER,
		"errors_total":                 dto.MetricType_COUNTER,
		"keys":                         dto.MetricType_GAUGE,
		"expired_keys_total":           dto.MetricType_COUNTER,
		"connected_clients":            dto.MetricType_GAUGE,
		"connections_total":            dto.MetricType_COUNTER,
		"rejected_connections_total":   dto.MetricType_COUNTER,
		"protocol_errors_total":        dto.MetricType_COUNTER,
		"net_input_bytes_total":        dto.MetricType_COUNTER,
		"net_output_bytes_total":       dto.MetricType_COUNTER,
		"limited_key_prefix_top":       dto.MetricType_GAUGE,
		"limited_key_prefix_untracked": dto.MetricType_GAUGE,
		"state_memory_bytes":           dto.MetricType_GAUGE,
		"maxmemory_bytes":              dto.MetricType_GAUGE,
		"evicted_keys_total":           dto.MetricType_COUNTER,
		"oom_refusals_total":           dto.MetricType_COUNTER,
	}
	for name, typ := range want {
		mf := s.mfs["cellserver_"+name]
		if mf == nil {
			t.Errorf("cellserver_%s missing", name)
			continue
		}
		if mf.GetType() != typ {
			t.Errorf("cellserver_%s has type %v, want %v", name, mf.GetType(), typ)
		}
		if len(mf.GetHelp()) < 10 {
			t.Errorf("cellserver_%s has help %q", name, mf.GetHelp())
		}
	}
	for name := range s.mfs {
		if strings.HasPrefix(name, "cellserver_") {
			if _, ok := want[strings.TrimPrefix(name, "cellserver_")]; !ok {
				t.Errorf("unexpected metric %s", name)
			}
		}
	}
	for _, name := range []string{"go_goroutines", "process_cpu_seconds_total"} {
		if s.mfs[name] == nil {
			t.Errorf("%s missing (Go/process collectors)", name)
		}
	}
}

// TestNetworkMetrics drives the connection counters with raw RESP so the
// byte counts are known exactly.
func TestNetworkMetrics(t *testing.T) {
	st := startStack(t, resp.Config{MaxClients: 1})
	sc := newScraper(t, st.sources())
	s0 := sc.scrape()
	for _, name := range []string{"connected_clients", "connections_total", "rejected_connections_total",
		"protocol_errors_total", "net_input_bytes_total", "net_output_bytes_total"} {
		if !s0.has("cellserver_"+name) || s0.value("cellserver_"+name) != 0 {
			t.Errorf("fresh server: cellserver_%s = %v", name, s0.value("cellserver_"+name))
		}
	}

	c, err := net.Dial("tcp", st.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	rd := bufio.NewReader(c)
	var sent, received int
	send := func(s string) {
		t.Helper()
		if _, err := io.WriteString(c, s); err != nil {
			t.Fatal(err)
		}
		sent += len(s)
	}
	readLine := func() string {
		t.Helper()
		line, err := rd.ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		received += len(line)
		return line
	}
	send("*1\r\n$4\r\nPING\r\n")
	if l := readLine(); l != "+PONG\r\n" {
		t.Fatalf("PING: %q", l)
	}
	s1 := sc.scrape()
	if got := s1.value("cellserver_connected_clients"); got != 1 {
		t.Errorf("connected_clients = %v, want 1", got)
	}
	if got := s1.value("cellserver_connections_total"); got != 1 {
		t.Errorf("connections_total = %v, want 1", got)
	}
	// Input is counted when read, before the command runs.
	if got := s1.value("cellserver_net_input_bytes_total"); got != float64(sent) {
		t.Errorf("net_input_bytes_total = %v, want %d", got, sent)
	}

	// A second client is over MaxClients.
	c2, err := net.Dial("tcp", st.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	c2.SetDeadline(time.Now().Add(10 * time.Second))
	if b, _ := io.ReadAll(c2); !strings.Contains(string(b), "max number of clients") {
		t.Fatalf("second client got %q", b)
	}
	s2 := sc.scrape()
	delta(t, s1, s2, 1, "cellserver_rejected_connections_total")
	delta(t, s1, s2, 0, "cellserver_connections_total")

	// A malformed bulk length closes the first client.
	send("*1\r\n$x\r\n")
	if l := readLine(); !strings.HasPrefix(l, "-ERR Protocol error") {
		t.Fatalf("malformed request: %q", l)
	}
	if rest, _ := io.ReadAll(rd); len(rest) != 0 {
		t.Fatalf("after the protocol error: %q", rest)
	}
	s3 := sc.scrape()
	delta(t, s2, s3, 1, "cellserver_protocol_errors_total")

	// After a graceful shutdown every connection's bytes are final.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := st.net.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	s4 := sc.scrape()
	if got := s4.value("cellserver_connected_clients"); got != 0 {
		t.Errorf("connected_clients after shutdown = %v", got)
	}
	if got := s4.value("cellserver_net_input_bytes_total"); got != float64(sent) {
		t.Errorf("net_input_bytes_total = %v, want %d", got, sent)
	}
	if got := s4.value("cellserver_net_output_bytes_total"); got != float64(received) {
		t.Errorf("net_output_bytes_total = %v, want %d", got, received)
	}
}

// TestServerWiring reads a server started by servertest: its command layer
// (and through it the keyspace) only, so the network metrics are absent.
// Prefixes that are not valid UTF-8 are reported, merged, as U+FFFD.
func TestServerWiring(t *testing.T) {
	clk := servertest.NewClock(t0)
	srv, addr := servertest.Start(t, server.Config{Clock: clk.Now})
	sc := newScraper(t, metrics.Sources{Commands: srv.Commands(), Clock: clk.Now})
	rdb := newClient(t, addr, 0)
	sendLimiterTraffic(t, rdb)
	ctx := context.Background()
	for _, key := range []string{"\xff:1", "\xfe:2"} {
		for range 2 { // limit 1: the second call is limited
			if err := rdb.Do(ctx, "CL.FIXED", key, 1, 60).Err(); err != nil {
				t.Fatalf("CL.FIXED: %v", err)
			}
		}
	}

	s := sc.scrape()
	if got := s.value("cellserver_limiter_decisions_total", "command", "cl.throttle", "result", "allowed"); got != 7 {
		t.Errorf("allowed = %v, want 7", got)
	}
	if got := s.value("cellserver_limiter_decisions_total", "command", "cl.throttle", "result", "limited"); got != 3 {
		t.Errorf("limited = %v, want 3", got)
	}
	if got := s.value("cellserver_limiter_decisions_total", "command", "cl.fixed", "result", "limited"); got != 2 {
		t.Errorf("cl.fixed limited = %v, want 2", got)
	}
	if got := s.value("cellserver_keys", "db", "0", "kind", "gcra"); got != 2 {
		t.Errorf("keys{kind=gcra} = %v, want 2", got)
	}
	if got := s.value("cellserver_keys", "db", "0", "kind", "fixed"); got != 2 {
		t.Errorf("keys{kind=fixed} = %v, want 2", got)
	}
	if s.has("cellserver_connected_clients") || s.has("cellserver_net_input_bytes_total") {
		t.Error("network metrics without a Network source")
	}

	clk.Advance(time.Minute + time.Second)
	s = sc.scrape()
	if got := s.series("cellserver_limited_key_prefix_top"); strings.Join(got, " ") != "prefix=user prefix=\uFFFD" {
		t.Errorf("limited_key_prefix_top series %q", got)
	}
	if got := s.value("cellserver_limited_key_prefix_top", "prefix", "user"); got != 3 {
		t.Errorf("limited_key_prefix_top{prefix=user} = %v, want 3", got)
	}
	if got := s.value("cellserver_limited_key_prefix_top", "prefix", "\uFFFD"); got != 2 {
		t.Errorf("limited_key_prefix_top{prefix=U+FFFD} = %v, want 2", got)
	}
}

func TestProbes(t *testing.T) {
	var ready atomic.Bool
	ts := newScraper(t, metrics.Sources{Ready: ready.Load})
	if code, body := get(t, ts.url+"/healthz"); code != http.StatusOK || body != "ok" {
		t.Errorf("/healthz: %d %q", code, body)
	}
	if code, body := get(t, ts.url+"/readyz"); code != http.StatusServiceUnavailable || body != "not ready" {
		t.Errorf("/readyz before ready: %d %q", code, body)
	}
	ready.Store(true)
	if code, body := get(t, ts.url+"/readyz"); code != http.StatusOK || body != "ready" {
		t.Errorf("/readyz when ready: %d %q", code, body)
	}
	ready.Store(false)
	if code, _ := get(t, ts.url+"/readyz"); code != http.StatusServiceUnavailable {
		t.Errorf("/readyz after unready: %d", code)
	}
	if code, _ := get(t, ts.url+"/nope"); code != http.StatusNotFound {
		t.Errorf("/nope: %d", code)
	}
	res, err := http.Post(ts.url+"/healthz", "text/plain", nil)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("POST /healthz: %d", res.StatusCode)
	}
	// Empty sources still give a valid page (Go and process metrics).
	if s := ts.scrape(); s.mfs["go_goroutines"] == nil {
		t.Error("go_goroutines missing")
	}

	// A nil ready func is always ready.
	nilReady := newScraper(t, metrics.Sources{})
	if code, _ := get(t, nilReady.url+"/readyz"); code != http.StatusOK {
		t.Errorf("/readyz with nil ready: %d", code)
	}
}
