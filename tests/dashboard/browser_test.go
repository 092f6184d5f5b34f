// Package dashboard_test loads GET /dashboard in a real headless browser
// (Debian's chromium, driven over the DevTools protocol by chromedp): the
// page loads without a console error, its charts and tables fill from
// state.json, its numbers move after CL.APPLY traffic, and a screenshot is
// written for a human to look at.
//
// chromium comes with Debian's chromium package (scripts/ensure-tools.sh
// installs it). Without it the test skips, unless the environment variable
// CI is set: then it fails.
package dashboard_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/redis/go-redis/v9"

	"github.com/cellserver/cellserver/internal/servertest"
	"github.com/cellserver/cellserver/internal/topotest"
	"github.com/cellserver/cellserver/metrics"
	"github.com/cellserver/cellserver/persistence/changelog"
	"github.com/cellserver/cellserver/persistence/pebblestore"
	"github.com/cellserver/cellserver/server"
)

const policies = `policies:
  - name: api
    algorithm: gcra
    burst: 2
    count: 3
    period: 1m
  - name: api-next
    algorithm: gcra
    count: 1
    period: 1m
    shadow: true
`

// chromium returns the browser's path, skipping the test without one
// (failing it when CI is set).
func chromium(t *testing.T) string {
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("CI") != "" {
		t.Fatal("chromium not found and CI is set: install Debian's chromium package (scripts/ensure-tools.sh does)")
	}
	t.Skip("chromium not installed (Debian package chromium; scripts/ensure-tools.sh installs it); skipping. With CI set this fails instead.")
	return ""
}

// artifactDir is where the screenshot goes: $CELLSERVER_ARTIFACTS/dashboard,
// else cellserver-dashboard in the system's temporary directory (not
// t.TempDir, which is deleted at the end of the test).
func artifactDir(t *testing.T) string {
	dir := filepath.Join(os.TempDir(), "cellserver-dashboard")
	if a := os.Getenv("CELLSERVER_ARTIFACTS"); a != "" {
		dir = filepath.Join(a, "dashboard")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestDashboardInBrowser(t *testing.T) {
	exe := chromium(t)
	dir := t.TempDir()
	pol := filepath.Join(dir, "policies.yaml")
	if err := os.WriteFile(pol, []byte(policies), 0o600); err != nil {
		t.Fatal(err)
	}
	clk := servertest.NewClock(time.Unix(1795312945, 0))
	myID := topotest.ID("node-a")
	srv, addr := servertest.Start(t, server.Config{MetricsAddr: "127.0.0.1:0", Metrics: metrics.ServerHandler, Clock: clk.Now,
		Version: "dashboard-test", Policies: pol, MaxMemory: 4 << 20,
		DataDir: filepath.Join(dir, "data"), OpenStore: changelog.Opener(pebblestore.OpenStore, changelog.Options{}),
		ClusterEnabled: true, ClusterNodeID: myID})
	base := "http://" + srv.MetricsAddr().String()
	rdb := redis.NewClient(&redis.Options{Addr: addr, PoolSize: 1})
	defer rdb.Close()
	rctx := context.Background()
	host, port, _ := strings.Cut(addr, ":")
	p, _ := strconv.Atoi(port)
	topo := fmt.Sprintf(`[{"slot_ranges":[{"start":0,"end":16383}],"master":{"id":%q,"ip":%q,"port":%d},"replicas":[]}]`, myID, host, p)
	if err := rdb.Do(rctx, "CELLCLUSTER", "CONFIG", topo).Err(); err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(exe), chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.WindowSize(1400, 1250), chromedp.UserDataDir(filepath.Join(dir, "chromium")))
	actx, acancel := chromedp.NewExecAllocator(ctx, opts...)
	defer acancel()
	bctx, bcancel := chromedp.NewContext(actx)
	defer bcancel()

	// Every console message, exception and browser log entry of the tab.
	var mu sync.Mutex
	var console []chromedp.ConsoleMessage
	msgs := chromedp.Console(bctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for m, err := range msgs {
			if err != nil {
				return
			}
			mu.Lock()
			console = append(console, m)
			mu.Unlock()
		}
	}()

	eval := func(js string) string {
		t.Helper()
		s, err := chromedp.Run(bctx, chromedp.Evaluate[string](js))
		if err != nil {
			t.Fatalf("%s: %v", js, err)
		}
		return s
	}
	// waitTime waits until the page has drawn the snapshot of the server's
	// clock now.
	waitTime := func() {
		t.Helper()
		want := strconv.FormatInt(clk.Now().UnixMilli(), 10)
		if _, err := chromedp.Run(bctx, chromedp.Poll[bool](`document.body.dataset.time === "`+want+`"`,
			chromedp.WithPollingInterval(50*time.Millisecond), chromedp.WithPollingTimeout(20*time.Second))); err != nil {
			t.Fatalf("the page did not draw the snapshot at %s: %v (page at %s)", want, err, eval(`document.body.dataset.time || ""`))
		}
	}
	policyText := func(name string) string {
		return eval(`document.querySelector('[data-policy="` + name + `"]').textContent`)
	}
	apply := func(key, policy string, n int) {
		t.Helper()
		for range n {
			if err := rdb.Do(rctx, "CL.APPLY", key, policy).Err(); err != nil {
				t.Fatal(err)
			}
		}
	}

	if err := chromedp.Do(bctx, chromedp.Navigate(base+"/dashboard")); err != nil {
		t.Fatal(err)
	}
	waitTime()
	before := policyText("api")
	if before != "allowed 0 · limited 0 · shadow-limited 0" {
		t.Errorf("api before any traffic: %q", before)
	}

	// Limited calls, then past the prefix interval: the most limited
	// prefixes are those of the last complete minute.
	apply("api:alice", "api", 6)
	clk.Advance(61 * time.Second)
	waitTime()
	// Traffic over a few seconds of the server's clock: rates to draw.
	for i := range 4 {
		apply("api:bob"+strconv.Itoa(i), "api", 5)
		apply("next:carol", "api-next", 2)
		clk.Advance(time.Second)
		waitTime()
	}

	after := policyText("api")
	if after == before {
		t.Errorf("api's counts did not change after traffic: %q", after)
	}
	// api: burst 2 admits 3 calls per key, then limits (the rate is 3 a
	// minute, so no call is admitted again within the test's seconds).
	if want := "allowed 15 · limited 11 · shadow-limited 0"; after != want {
		t.Errorf("api after traffic: %q, want %q", after, want)
	}
	if got, want := policyText("api-next"), "allowed 1 · limited 0 · shadow-limited 7"; got != want {
		t.Errorf("api-next after traffic: %q, want %q", got, want)
	}
	checks := []struct{ what, js, want string }{
		{"policy charts", `String(document.querySelectorAll('#policy-charts svg').length)`, "2"},
		{"a drawn allowed line", `String([...document.querySelectorAll('#policy-charts polyline')].some(l => l.getAttribute('points').split(' ').length >= 3))`, "true"},
		{"the ratio chart's threshold line", `String(document.querySelectorAll('#ratio-chart line[stroke-dasharray]').length)`, "1"},
		{"the alert threshold", `document.getElementById('ratio-threshold').textContent`, "10.0%"},
		{"api's ratio, over the alert", `document.querySelector('#ratio-table tbody tr td.ratio').className`, "ratio bad"},
		{"the limiter table", `document.querySelector('#limiter-table tbody td').textContent`, "cl.apply"},
		{"the most limited prefix", `document.querySelector('#prefix-table tbody td').textContent`, "api"},
		{"its count", `document.querySelector('#prefix-table tbody td:nth-child(2)').textContent`, "3"},
		{"the latency table", `document.querySelector('#latency-table tbody td').textContent`, "cl.apply"},
		{"latency p99 given", `String(/s$/.test(document.querySelector('#latency-table tbody td:nth-child(5)').textContent))`, "true"},
		{"clients", `document.getElementById('clients').textContent`, "1"},
		{"memory", `String(/ of 4.0 MiB maxmemory$/.test(document.getElementById('mem-used').textContent + ' of ' + document.getElementById('mem-max').textContent))`, "true"},
		{"persistence", `document.getElementById('persist-status').textContent`, "ok · fsync everysec"},
		{"replication", `document.getElementById('repl-status').textContent`, "primary · 0 replicas"},
		{"cluster slots", `document.querySelector('#cluster-table tbody td:nth-child(3)').textContent`, "16384"},
		{"no error shown", `document.getElementById('hdr-error').textContent`, ""},
	}
	for _, c := range checks {
		if got := eval(c.js); got != c.want {
			t.Errorf("%s: %q, want %q", c.what, got, c.want)
		}
	}

	png, err := chromedp.Run(bctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatal(err)
	}
	shot := filepath.Join(artifactDir(t), "dashboard.png")
	if err := os.WriteFile(shot, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s (%d bytes)", shot, len(png))

	bcancel()
	<-done
	mu.Lock()
	defer mu.Unlock()
	for _, m := range console {
		switch m.Type {
		case chromedp.ConsoleError, chromedp.ConsoleException, chromedp.ConsoleWarning:
			t.Errorf("console %s (%s:%d)", m, m.URL, m.Line)
		}
	}
}
