package server_test

import (
	"context"
	"io"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/cellserver/cellserver/internal/servertest"
	"github.com/cellserver/cellserver/metrics"
	"github.com/cellserver/cellserver/persistence/changelog"
	"github.com/cellserver/cellserver/persistence/pebblestore"
	"github.com/cellserver/cellserver/server"
	"github.com/redis/go-redis/v9"
)

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestMetricsEndpoint: --metrics-addr serves the probes and counters that
// move with traffic.
func TestMetricsEndpoint(t *testing.T) {
	clk := servertest.NewClock(time.Unix(1795312945, 0))
	srv, addr := servertest.Start(t, server.Config{MetricsAddr: "127.0.0.1:0", Metrics: metrics.ServerHandler, Clock: clk.Now})
	base := "http://" + srv.MetricsAddr().String()
	if code, body := get(t, base+"/healthz"); code != 200 || body != "ok" {
		t.Fatalf("/healthz: %d %q", code, body)
	}
	// Serve marks the server ready once it runs; Start returns before that.
	for deadline := time.Now().Add(10 * time.Second); ; {
		code, _ := get(t, base+"/readyz")
		if code == 200 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("/readyz: %d after 10s", code)
		}
		runtime.Gosched()
	}
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	ctx := context.Background()
	for i := 0; i < 5; i++ {
		rdb.Do(ctx, "CL.THROTTLE", "api:key", 2, 1, 60)
	}
	_, body := get(t, base+"/metrics")
	for _, want := range []string{
		`cellserver_commands_total{command="cl.throttle"} 5`,
		`cellserver_limiter_decisions_total{command="cl.throttle",result="allowed"} 3`,
		`cellserver_limiter_decisions_total{command="cl.throttle",result="limited"} 2`,
		`cellserver_keys{db="0",kind="gcra"} 1`,
		`cellserver_connected_clients 1`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	clk.Advance(61 * time.Second)
	if _, body := get(t, base+"/metrics"); !strings.Contains(body, `cellserver_limited_key_prefix_top{prefix="api"} 2`) {
		t.Errorf("no top limited prefix after the interval:\n%s", grepLines(body, "prefix"))
	}
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// TestPersistenceMetrics: with a data dir the persistence figures are
// exported (their values depend on the background writer's timing, so
// only their presence is checked here; tests/durability checks behaviour).
func TestPersistenceMetrics(t *testing.T) {
	srv, addr := servertest.Start(t, server.Config{MetricsAddr: "127.0.0.1:0", Metrics: metrics.ServerHandler, DataDir: t.TempDir(), OpenStore: changelog.Opener(pebblestore.OpenStore, changelog.Options{})})
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	rdb.Do(context.Background(), "CL.THROTTLE", "p:1", 1, 1, 60)
	_, body := get(t, "http://"+srv.MetricsAddr().String()+"/metrics")
	for _, name := range []string{"cellserver_persistence_pending_changes", "cellserver_persistence_written_changes_total",
		"cellserver_persistence_last_write_seconds", "cellserver_persistence_last_sync_seconds", "cellserver_persistence_disk_bytes",
		"cellserver_persistence_failed 0", "cellserver_state_memory_bytes", "cellserver_evicted_keys_total 0",
		"cellserver_persistence_checkpoints_total", "cellserver_persistence_checkpoint_failures_total 0",
		"cellserver_persistence_changelog_bytes"} {
		if !strings.Contains(body, name) {
			t.Errorf("/metrics lacks %s", name)
		}
	}
}
