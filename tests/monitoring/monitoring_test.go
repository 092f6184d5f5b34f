// Package monitoring checks the monitoring files shipped in
// monitoring/ (README "Monitoring"): the Prometheus rules load and pass
// their unit tests under promtool, the Grafana dashboard is well formed and
// its queries parse, every metric name either uses is one a real
// cellserver exports (read from the /metrics of servers started here, which
// promtool's linter also checks), and the real prometheus, scraping
// servers started here, evaluates every rule and dashboard query without
// an error and raises the alerts the servers' state calls for.
//
// promtool and prometheus come with Debian's prometheus package
// (scripts/ensure-tools.sh installs it). Without them these tests skip,
// saying so, unless the environment variable CI is set: in CI a missing
// tool fails them.
package monitoring

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
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

const (
	rulesDir      = "../../monitoring/prometheus"
	rulesFile     = rulesDir + "/alerts.yml"
	rulesTestFile = rulesDir + "/alerts_test.yml"
	dashboardFile = "../../monitoring/grafana/cellserver.json"
)

// notScraped lists the metric names the rules or the dashboard may use
// although the servers started here do not export them. Keep it short and
// say why for each; TestExportedMetrics logs an entry that the scrape has
// come to show, so it can go.
var notScraped = map[string]string{
	// Made by Prometheus, not by cellserver: 1 while the target is scraped.
	"up": "Prometheus's scrape status",
	// Made by Prometheus's rule evaluation; used by the rule unit tests.
	"ALERTS": "Prometheus's alert state series",
}

// policyFile is the policy file of the servers TestExportedMetrics starts,
// so that the per-policy counter is exported (CL.APPLY in traffic).
const policyFile = `policies:
  - name: api
    algorithm: gcra
    burst: 1
    count: 1
    period: 60s
`

// promtool returns promtool's path. It skips the test when promtool is
// missing, unless CI is set: then it fails.
func promtool(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("promtool")
	if err == nil {
		return p
	}
	if os.Getenv("CI") != "" {
		t.Fatalf("promtool not found and CI is set: install Debian's prometheus package (scripts/ensure-tools.sh does): %v", err)
	}
	t.Skipf("promtool not installed (Debian package prometheus; scripts/ensure-tools.sh installs it); skipping. With CI set this fails instead.")
	return ""
}

// run runs promtool with args (stdin from in when not nil) and returns its
// combined output and error.
func run(t *testing.T, bin string, in []byte, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	if in != nil {
		cmd.Stdin = bytes.NewReader(in)
	}
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

var rulesFoundRE = regexp.MustCompile(`SUCCESS: (\d+) rules found`)

// TestPromtoolCheckRules: promtool loads alerts.yml, and finds as many
// rules as ruleExprs reads (so the name check below sees every expression).
func TestPromtoolCheckRules(t *testing.T) {
	bin := promtool(t)
	out, err := run(t, bin, nil, "check", "rules", rulesFile)
	if err != nil {
		t.Fatalf("promtool check rules %s: %v\n%s", rulesFile, err, out)
	}
	m := rulesFoundRE.FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("promtool check rules: no rule count in\n%s", out)
	}
	exprs, _, err := ruleExprs(readFile(t, rulesFile))
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(len(exprs)) != m[1] {
		t.Fatalf("promtool finds %s rules, ruleExprs %d expressions", m[1], len(exprs))
	}
	t.Logf("promtool check rules: %s rules", m[1])
}

// TestPromtoolTestRules runs the rule unit tests (alerts_test.yml): each
// alert fires on recorded series where it must, and not where it must not.
func TestPromtoolTestRules(t *testing.T) {
	bin := promtool(t)
	out, err := run(t, bin, nil, "test", "rules", rulesTestFile)
	if err != nil {
		t.Fatalf("promtool test rules %s: %v\n%s", rulesTestFile, err, out)
	}
	if !strings.Contains(out, "SUCCESS") {
		t.Fatalf("promtool test rules: no SUCCESS in\n%s", out)
	}
	// Every alert of alerts.yml has a test that fires it.
	rules := readFile(t, rulesFile)
	tests := readFile(t, rulesTestFile)
	for _, m := range regexp.MustCompile(`(?m)^\s*- alert: (\w+)`).FindAllStringSubmatch(rules, -1) {
		fires := regexp.MustCompile(`alertname: ` + m[1] + `\n\s*exp_alerts:\n\s*- exp_labels:`)
		if !fires.MatchString(tests) {
			t.Errorf("alert %s: no test in %s where it fires", m[1], rulesTestFile)
		}
	}
}

// dashboard is the part of Grafana's dashboard JSON model checked here.
type dashboard struct {
	UID           string  `json:"uid"`
	Title         string  `json:"title"`
	SchemaVersion int     `json:"schemaVersion"`
	Panels        []panel `json:"panels"`
	Templating    struct {
		List []struct {
			Type       string          `json:"type"`
			Name       string          `json:"name"`
			Query      json.RawMessage `json:"query"`
			Definition string          `json:"definition"`
			Datasource *datasource     `json:"datasource"`
		} `json:"list"`
	} `json:"templating"`
}

type datasource struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

type panel struct {
	ID         int         `json:"id"`
	Type       string      `json:"type"`
	Title      string      `json:"title"`
	Datasource *datasource `json:"datasource"`
	GridPos    *struct {
		H, W, X, Y int
	} `json:"gridPos"`
	Targets []struct {
		Expr       string      `json:"expr"`
		RefID      string      `json:"refId"`
		Datasource *datasource `json:"datasource"`
	} `json:"targets"`
	Panels []panel `json:"panels"`
}

// grafanaVars stands in for the dashboard's variables so that promtool can
// parse its queries: Grafana's interval variables become durations, the
// dashboard's own a regular expression matching everything.
var grafanaVars = strings.NewReplacer(
	"${__rate_interval}", "5m", "$__rate_interval", "5m",
	"${__interval}", "1m", "$__interval", "1m",
	"${__range}", "1h", "$__range", "1h",
	"${job}", ".*", "$job", ".*",
	"${instance}", ".*", "$instance", ".*",
	"${policy}", ".*", "$policy", ".*",
)

// loadDashboard reads the dashboard, checks its structure and returns its
// queries (variables replaced) and the metrics of its variable queries.
func loadDashboard(t *testing.T, text string) (exprs, varMetrics []string) {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(text))
	var d dashboard
	if err := dec.Decode(&d); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	if d.UID == "" || d.Title == "" || d.SchemaVersion < 36 {
		t.Errorf("dashboard: uid %q, title %q, schemaVersion %d (want both set and a schema of Grafana 9 or later)", d.UID, d.Title, d.SchemaVersion)
	}
	vars := map[string]bool{}
	for _, v := range d.Templating.List {
		vars[v.Name] = true
		switch v.Type {
		case "datasource":
			if v.Name != "datasource" || string(v.Query) != `"prometheus"` {
				t.Errorf("dashboard: data source variable %q of %s, want \"datasource\" of \"prometheus\"", v.Name, v.Query)
			}
		case "query":
			if v.Datasource == nil || v.Datasource.UID != "${datasource}" {
				t.Errorf("dashboard variable %s: datasource %+v, want uid ${datasource}", v.Name, v.Datasource)
			}
			m := labelValuesRE.FindStringSubmatch(v.Definition)
			if m == nil {
				t.Errorf("dashboard variable %s: %q is not label_values(metric, label)", v.Name, v.Definition)
				continue
			}
			varMetrics = append(varMetrics, m[1])
		}
	}
	if !vars["datasource"] {
		t.Errorf("dashboard: no datasource variable")
	}
	ids := map[int]string{}
	var walk func(ps []panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			if prev, dup := ids[p.ID]; dup || p.ID == 0 {
				t.Errorf("panel %q: id %d (also %q)", p.Title, p.ID, prev)
			}
			ids[p.ID] = p.Title
			if p.GridPos == nil || p.GridPos.W <= 0 || p.GridPos.H <= 0 || p.GridPos.X+p.GridPos.W > 24 {
				t.Errorf("panel %q: gridPos %+v", p.Title, p.GridPos)
			}
			if p.Type == "row" {
				walk(p.Panels)
				continue
			}
			if p.Datasource == nil || p.Datasource.UID != "${datasource}" || p.Datasource.Type != "prometheus" {
				t.Errorf("panel %q: datasource %+v, want the ${datasource} variable", p.Title, p.Datasource)
			}
			if len(p.Targets) == 0 {
				t.Errorf("panel %q: no query", p.Title)
			}
			for _, tg := range p.Targets {
				if tg.Datasource == nil || tg.Datasource.UID != "${datasource}" {
					t.Errorf("panel %q query %s: datasource %+v", p.Title, tg.RefID, tg.Datasource)
				}
				e := grafanaVars.Replace(tg.Expr)
				if strings.Contains(e, "$") {
					t.Errorf("panel %q query %s: a variable this check does not know: %s", p.Title, tg.RefID, tg.Expr)
				}
				exprs = append(exprs, e)
			}
		}
	}
	walk(d.Panels)
	return exprs, varMetrics
}

// TestDashboard: the dashboard's structure (ids, grid, data source
// variable) and its queries, parsed by promtool as recording rules.
func TestDashboard(t *testing.T) {
	exprs, _ := loadDashboard(t, readFile(t, dashboardFile))
	bin := promtool(t)
	var b strings.Builder
	b.WriteString("groups:\n  - name: dashboard\n    rules:\n")
	for i, e := range exprs {
		fmt.Fprintf(&b, "      - record: dashboard:query_%d\n        expr: |\n", i)
		for _, l := range strings.Split(strings.TrimRight(e, "\n"), "\n") {
			fmt.Fprintf(&b, "          %s\n", l)
		}
	}
	f := filepath.Join(t.TempDir(), "dashboard-queries.yml")
	if err := os.WriteFile(f, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := run(t, bin, nil, "check", "rules", f)
	if err != nil {
		t.Fatalf("promtool check rules on the dashboard's queries: %v\n%s", err, out)
	}
	t.Logf("%d dashboard queries parsed by promtool", len(exprs))
}

// scrape returns the body of url.
func scrape(t *testing.T, url string) []byte {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("GET %s: %d %v", url, resp.StatusCode, err)
	}
	return b
}

// traffic drives the commands whose counters the rules and the dashboard
// read: allowed and limited decisions of several limiters, plain commands,
// an error reply and a command refused for its arity, then moves the clock
// past the interval of the limited-prefix table.
func traffic(t *testing.T, addr string, clk *servertest.Clock) {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	ctx := context.Background()
	do := func(wantErr bool, args ...any) {
		t.Helper()
		err := rdb.Do(ctx, args...).Err()
		if (err != nil && err != redis.Nil) != wantErr {
			t.Fatalf("%v: %v", args, err)
		}
	}
	for range 5 {
		if rdb.Do(ctx, "CL.POLICY", "GET", "api").Err() == nil {
			do(false, "CL.APPLY", "policy:alice", "api") // allowed, then limited
		}
		do(false, "CL.THROTTLE", "api:alice", 2, 1, 60)
		do(false, "CL.FIXED", "login:bob", 2, 60)
		do(false, "CL.SLIDING", "search:carol", 2, 60)
	}
	do(false, "SET", "plain", "v")
	do(false, "GET", "plain")
	do(false, "PEXPIRE", "plain", 1)
	do(true, "NOSUCHCOMMAND")
	do(true, "GET")
	clk.Advance(61 * time.Second)
}

// exported returns the metric names of the samples in a scrape.
func exported(body []byte) map[string]bool {
	names := map[string]bool{}
	for _, l := range strings.Split(string(body), "\n") {
		if l == "" || l[0] == '#' {
			continue
		}
		if i := strings.IndexAny(l, "{ "); i > 0 {
			names[l[:i]] = true
		}
	}
	return names
}

// usedNames returns, by file, the metric names the rules, their tests and
// the dashboard use.
func usedNames(t *testing.T, rules, ruleTests, dash string) (map[string][]string, map[string]bool) {
	t.Helper()
	used := map[string][]string{}
	exprs, records, err := ruleExprs(rules)
	if err != nil {
		t.Fatal(err)
	}
	recorded := map[string]bool{}
	for _, r := range records {
		recorded[r] = true
	}
	add := func(file string, names ...string) {
		for _, n := range names {
			if !slices.Contains(used[n], file) {
				used[n] = append(used[n], file)
			}
		}
	}
	for _, e := range exprs {
		ns, err := metricNames(e)
		if err != nil {
			t.Fatal(err)
		}
		add("alerts.yml", ns...)
	}
	testExprs, _, err := ruleExprs(ruleTests)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range testExprs {
		ns, err := metricNames(e)
		if err != nil {
			t.Fatal(err)
		}
		add("alerts_test.yml", ns...)
	}
	for _, m := range seriesRE.FindAllStringSubmatch(ruleTests, -1) {
		add("alerts_test.yml (input series)", m[1])
	}
	dexprs, varMetrics := loadDashboard(t, dash)
	for _, e := range dexprs {
		ns, err := metricNames(e)
		if err != nil {
			t.Fatal(err)
		}
		add("cellserver.json", ns...)
	}
	add("cellserver.json (variables)", varMetrics...)
	return used, recorded
}

// unknownNames returns the used names that are neither exported, recorded
// by a rule, nor allow-listed, each with the files using it.
func unknownNames(used map[string][]string, recorded, exported map[string]bool) []string {
	var bad []string
	for n, files := range used {
		if exported[n] || recorded[n] {
			continue
		}
		if _, ok := notScraped[n]; ok {
			continue
		}
		bad = append(bad, fmt.Sprintf("%s (in %s)", n, strings.Join(files, ", ")))
	}
	sort.Strings(bad)
	return bad
}

// TestExportedMetrics starts two real servers with metrics on, one of them
// with a data directory (the persistence metrics), drives traffic, and
// checks their /metrics: promtool's linter, and that every metric name the
// rules and the dashboard use is exported.
func TestExportedMetrics(t *testing.T) {
	clk := servertest.NewClock(time.Unix(1795312945, 0))
	pol := filepath.Join(t.TempDir(), "policies.yaml")
	if err := os.WriteFile(pol, []byte(policyFile), 0o644); err != nil {
		t.Fatal(err)
	}
	plain, plainAddr := servertest.Start(t, server.Config{MetricsAddr: "127.0.0.1:0", Metrics: metrics.ServerHandler, Clock: clk.Now,
		Policies: pol})
	disk, diskAddr := servertest.Start(t, server.Config{MetricsAddr: "127.0.0.1:0", Metrics: metrics.ServerHandler, Clock: clk.Now,
		DataDir: t.TempDir(), OpenStore: changelog.Opener(pebblestore.OpenStore, changelog.Options{})})
	traffic(t, plainAddr, clk)
	traffic(t, diskAddr, clk)
	scrapes := map[string][]byte{
		"without persistence": scrape(t, "http://"+plain.MetricsAddr().String()+"/metrics"),
		"with --data-dir":     scrape(t, "http://"+disk.MetricsAddr().String()+"/metrics"),
	}
	all := map[string]bool{}
	for _, body := range scrapes {
		for n := range exported(body) {
			all[n] = true
		}
	}
	// The traffic made the counters that only appear with it.
	for _, n := range []string{"cellserver_limiter_decisions_total", "cellserver_limited_key_prefix_top", "cellserver_errors_total",
		"cellserver_keys", "cellserver_command_duration_seconds_bucket", "cellserver_persistence_checkpoints_total",
		"cellserver_policy_decisions_total"} {
		if !all[n] {
			t.Errorf("/metrics lacks %s after the traffic", n)
		}
	}

	t.Run("lint", func(t *testing.T) {
		bin := promtool(t)
		for what, body := range scrapes {
			out, err := run(t, bin, body, "check", "metrics")
			if err != nil || strings.TrimSpace(out) != "" {
				t.Errorf("promtool check metrics (%s): %v\n%s", what, err, out)
			}
		}
	})

	t.Run("names", func(t *testing.T) {
		used, recorded := usedNames(t, readFile(t, rulesFile), readFile(t, rulesTestFile), readFile(t, dashboardFile))
		if len(used) < 20 {
			t.Fatalf("only %d metric names found in the monitoring files: the lexer is broken", len(used))
		}
		if bad := unknownNames(used, recorded, all); len(bad) > 0 {
			t.Errorf("metric names cellserver does not export (a typo, a renamed metric, or one to allow-list in notScraped with the reason):\n  %s",
				strings.Join(bad, "\n  "))
		}
		for n, why := range notScraped {
			if all[n] {
				t.Logf("notScraped: %s (%s) is now exported by the servers here: remove it from the list", n, why)
			}
			if used[n] == nil {
				t.Errorf("notScraped: %s is used by no monitoring file: remove it", n)
			}
		}
		t.Logf("%d metric names used by the monitoring files, %d exported by the servers here, %d recorded by rules", len(used), len(all), len(recorded))
	})

	// The check above can fail: a misspelt name in a rule, in the
	// dashboard, or in a rule test's input series is reported.
	t.Run("typo caught", func(t *testing.T) {
		rules, ruleTests, dash := readFile(t, rulesFile), readFile(t, rulesTestFile), readFile(t, dashboardFile)
		for _, c := range []struct{ file, from, to string }{
			{"alerts.yml", "cellserver_persistence_failed == 1", "cellserver_persistence_faild == 1"},
			{"cellserver.json", "cellserver_limiter_decisions_total{", "cellserver_limiter_decision_total{"},
			{"alerts_test.yml", "series: 'cellserver_oom_refusals_total{", "series: 'cellserver_oom_refusal_total{"},
		} {
			r, rt, d := rules, ruleTests, dash
			p := map[string]*string{"alerts.yml": &r, "alerts_test.yml": &rt, "cellserver.json": &d}[c.file]
			if !strings.Contains(*p, c.from) {
				t.Fatalf("%s has no %q to misspell", c.file, c.from)
			}
			*p = strings.Replace(*p, c.from, c.to, 1)
			used, recorded := usedNames(t, r, rt, d)
			bad := unknownNames(used, recorded, all)
			typo := regexp.MustCompile(`cellserver_[a-z_]+`).FindString(c.to)
			if len(bad) != 1 || !strings.HasPrefix(bad[0], typo+" ") {
				t.Errorf("%s with %s: unknown names %q, want just %s", c.file, typo, bad, typo)
			}
		}
	})
}
