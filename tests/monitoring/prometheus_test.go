package monitoring

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cellserver/cellserver/internal/servertest"
	"github.com/cellserver/cellserver/internal/testwait"
	"github.com/cellserver/cellserver/metrics"
	"github.com/cellserver/cellserver/persistence/changelog"
	"github.com/cellserver/cellserver/persistence/pebblestore"
	"github.com/cellserver/cellserver/server"
	"github.com/redis/go-redis/v9"
)

// startPrometheus runs the real prometheus binary (Debian's prometheus
// package, as promtool) with alerts.yml, scraping the targets every second
// in job "cellserver", and returns its base URL once it is ready.
func startPrometheus(t *testing.T, targets ...string) string {
	t.Helper()
	bin, err := exec.LookPath("prometheus")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("prometheus not found and CI is set: install Debian's prometheus package: %v", err)
		}
		t.Skip("prometheus not installed (Debian package prometheus); skipping. With CI set this fails instead.")
	}
	rules, err := filepath.Abs(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	cfg := fmt.Sprintf(`global:
  scrape_interval: 1s
  evaluation_interval: 1s
rule_files: [%q]
scrape_configs:
  - job_name: cellserver
    static_configs:
      - targets: ["%s"]
`, rules, strings.Join(targets, `", "`))
	if err := os.WriteFile(filepath.Join(dir, "prometheus.yml"), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	// A free port: prometheus does not report the one it gets for :0.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	var log bytes.Buffer
	cmd := exec.Command(bin, "--config.file="+filepath.Join(dir, "prometheus.yml"),
		"--storage.tsdb.path="+filepath.Join(dir, "data"), "--web.listen-address="+addr, "--log.level=warn")
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-exited
		if t.Failed() {
			t.Logf("prometheus log:\n%s", log.String())
		}
	})
	base := "http://" + addr
	testwait.For(t, 60*time.Second, "prometheus ready", func() (bool, string) {
		select {
		case <-exited:
			t.Fatalf("prometheus exited: %s", log.String())
		default:
		}
		resp, err := http.Get(base + "/-/ready")
		if err != nil {
			return false, err.Error()
		}
		resp.Body.Close()
		return resp.StatusCode == 200, resp.Status
	})
	return base
}

// api GETs a Prometheus API path and decodes its data into v.
func api(t *testing.T, base, path string, v any) error {
	t.Helper()
	resp, err := http.Get(base + path)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	var r struct {
		Status string          `json:"status"`
		Data   json.RawMessage `json:"data"`
		Error  string          `json:"error"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		return err
	}
	if r.Status != "success" {
		return fmt.Errorf("%s: %s %s", path, r.Status, r.Error)
	}
	return json.Unmarshal(r.Data, v)
}

// TestLivePrometheus: the real prometheus loads alerts.yml, scrapes two
// cellservers started here (one with a data directory), evaluates every
// rule on their series without an error, and the alerts follow the
// servers: one pushed past its maxmemory (noeviction) has
// CellserverOOMRefusals firing and CellserverMemoryNearMaxmemory pending
// (it waits 5 minutes before firing), the other none. Every dashboard
// query runs on the same series.
func TestLivePrometheus(t *testing.T) {
	srv, addr := servertest.Start(t, server.Config{MetricsAddr: "127.0.0.1:0", Metrics: metrics.ServerHandler,
		MaxMemory: 2000, MaxMemoryPolicy: "noeviction"})
	disk, diskAddr := servertest.Start(t, server.Config{MetricsAddr: "127.0.0.1:0", Metrics: metrics.ServerHandler,
		DataDir: t.TempDir(), OpenStore: changelog.Opener(pebblestore.OpenStore, changelog.Options{})})
	base := startPrometheus(t, srv.MetricsAddr().String(), disk.MetricsAddr().String())

	// A first scrape with no refusal, so that increase() has a baseline.
	testwait.For(t, 60*time.Second, "target scraped", func() (bool, string) {
		var res struct {
			Result []struct {
				Value [2]any `json:"value"`
			} `json:"result"`
		}
		if err := api(t, base, "/api/v1/query?query="+url.QueryEscape(`cellserver_oom_refusals_total{job="cellserver"}`), &res); err != nil {
			return false, err.Error()
		}
		return len(res.Result) == 2, fmt.Sprint(res.Result)
	})

	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	ctx := context.Background()
	drb := redis.NewClient(&redis.Options{Addr: diskAddr})
	defer drb.Close()
	for n := range 20 {
		if err := drb.Do(ctx, "CL.THROTTLE", fmt.Sprint("tenant:", n%3), 5, 1, 60).Err(); err != nil {
			t.Fatal(err)
		}
	}
	refused := 0
	for n := 0; n < 200 && refused < 5; n++ {
		if err := rdb.Do(ctx, "CL.THROTTLE", fmt.Sprint("tenant:", n), 5, 1, 3600).Err(); err != nil {
			if !strings.HasPrefix(err.Error(), "OOM") {
				t.Fatal(err)
			}
			refused++
		}
	}
	if refused == 0 {
		t.Fatal("no OOM refusal after 200 new keys at maxmemory 2000")
	}

	type alert struct {
		Labels map[string]string `json:"labels"`
		State  string            `json:"state"`
	}
	want := map[string]string{"CellserverOOMRefusals": "firing", "CellserverMemoryNearMaxmemory": "pending"}
	testwait.For(t, 60*time.Second, "alerts", func() (bool, string) {
		var res struct {
			Alerts []alert `json:"alerts"`
		}
		if err := api(t, base, "/api/v1/alerts", &res); err != nil {
			return false, err.Error()
		}
		got := map[string]string{}
		for _, a := range res.Alerts {
			if a.Labels["instance"] != srv.MetricsAddr().String() {
				return false, fmt.Sprintf("alert %v for the server without maxmemory", a.Labels)
			}
			got[a.Labels["alertname"]] = a.State
		}
		for name, state := range want {
			if got[name] != state {
				return false, fmt.Sprintf("alerts %v, want %v", got, want)
			}
		}
		for name, state := range got {
			if _, ok := want[name]; !ok {
				return false, fmt.Sprintf("unexpected alert %s (%s)", name, state)
			}
		}
		return true, ""
	})

	exprs, _, err := ruleExprs(readFile(t, rulesFile))
	if err != nil {
		t.Fatal(err)
	}
	// Every rule evaluated, none with an error (a PromQL matching error on
	// the real label sets would show here, not in promtool's tests).
	testwait.For(t, 30*time.Second, "rules evaluated", func() (bool, string) {
		var res struct {
			Groups []struct {
				Name  string `json:"name"`
				Rules []struct {
					Name      string `json:"name"`
					Health    string `json:"health"`
					LastError string `json:"lastError"`
				} `json:"rules"`
			} `json:"groups"`
		}
		if err := api(t, base, "/api/v1/rules", &res); err != nil {
			return false, err.Error()
		}
		n := 0
		for _, g := range res.Groups {
			for _, r := range g.Rules {
				switch r.Health {
				case "ok":
					n++
				case "unknown":
					return false, fmt.Sprintf("rule %s not evaluated yet", r.Name)
				default:
					t.Fatalf("rule %s (group %s): %s: %s", r.Name, g.Name, r.Health, r.LastError)
				}
			}
		}
		if n != len(exprs) {
			return false, fmt.Sprintf("%d rules loaded, want the %d of alerts.yml", n, len(exprs))
		}
		return true, ""
	})
	// Every dashboard query runs on the live series without an error (the
	// variables stand for everything, as with "All" selected).
	dexprs, _ := loadDashboard(t, readFile(t, dashboardFile))
	withData := 0
	for _, e := range dexprs {
		var res struct {
			Result []json.RawMessage `json:"result"`
		}
		if err := api(t, base, "/api/v1/query?query="+url.QueryEscape(e), &res); err != nil {
			t.Errorf("dashboard query %s: %v", e, err)
		}
		if len(res.Result) > 0 {
			withData++
		}
	}
	t.Logf("%d dashboard queries run by prometheus, %d with data from these servers (no policies, no replica)", len(dexprs), withData)
}
