package envoyrls_test

import (
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/redis/go-redis/v9"

	"github.com/cellserver/cellserver/envoyrls"
	"github.com/cellserver/cellserver/metrics"
	"github.com/cellserver/cellserver/server"
)

// statsYAML has one of each kind of answer: a detailed_metric rule of 2
// per minute, a plain rule, a shadow_mode rule of 1 per minute, an
// unlimited one, and a rule that replaces the detailed one.
const statsYAML = `domain: st
descriptors:
  - key: user
    detailed_metric: true
    rate_limit: {unit: minute, requests_per_unit: 2, name: per_user}
  - key: ip
    rate_limit: {unit: minute, requests_per_unit: 100}
  - key: shadow
    shadow_mode: true
    detailed_metric: true
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: free
    rate_limit: {unlimited: true}
  - key: vip
    rate_limit:
      unit: minute
      requests_per_unit: 1000
      replaces: [{name: per_user}]
`

// TestStatsMove: the descriptor counts by domain and detailed_metric rule,
// and the request counts, move as calls are made, and read the same in
// Service.Stats, INFO rls and /metrics; a reload keeps the counts of the
// domain and of a rule that stays, and drops the series of a rule that
// loses detailed_metric.
func TestStatsMove(t *testing.T) {
	h := startRLS(t, map[string]string{"st.yaml": statsYAML}, func(c *server.Config) {
		c.MetricsAddr, c.Metrics = "127.0.0.1:0", metrics.ServerHandler
	})
	ctx := context.Background()
	for range 3 { // user: within, within, over
		h.call(t, request("st", 1, []string{"user", "a"}), nil)
	}
	for range 2 { // shadow: within, shadow over (answered OK)
		if r := h.call(t, request("st", 1, []string{"shadow", "s"}), nil); r.OverallCode != OK {
			t.Fatalf("shadow_mode answered %v", r.OverallCode)
		}
	}
	// ip within, free unlimited, nothing: no rule; user replaced by vip.
	h.call(t, request("st", 1, []string{"ip", "1"}, []string{"free", "x"}, []string{"nothing", "x"}), nil)
	h.call(t, request("st", 1, []string{"user", "a"}, []string{"vip", "v"}), nil)
	h.call(t, request("other", 1, []string{"user", "a"}, []string{"user", "b"}), nil) // unknown domain
	if _, err := h.client.ShouldRateLimit(ctx, request("", 1, []string{"user", "a"})); err == nil {
		t.Fatal("an empty domain was answered")
	}

	want := envoyrls.DescriptorCounts{Domain: "st", WithinLimit: 5, OverLimit: 1, ShadowOverLimit: 1, Unlimited: 1, Replaced: 1, NoRule: 1}
	st := h.fd.Service().Stats()
	if len(st.Domains) != 1 || st.Domains[0] != want {
		t.Errorf("domains %+v, want [%+v]", st.Domains, want)
	}
	wantRules := []envoyrls.DescriptorCounts{
		{Domain: "st", Rule: "st.shadow", WithinLimit: 1, ShadowOverLimit: 1},
		{Domain: "st", Rule: "st.user", WithinLimit: 2, OverLimit: 1},
	}
	if len(st.Rules) != 2 || st.Rules[0] != wantRules[0] || st.Rules[1] != wantRules[1] {
		t.Errorf("rules %+v, want %+v", st.Rules, wantRules)
	}
	if st.Requests != 9 || st.OK != 7 || st.OverLimit != 1 || st.Errors != 1 || st.UnknownDomain != 2 || st.NoRule != 3 || st.ShadowOverLimit != 1 {
		t.Errorf("stats %+v", st)
	}

	rdb := redis.NewClient(&redis.Options{Addr: h.resp})
	t.Cleanup(func() { rdb.Close() })
	info, err := rdb.Info(ctx, "rls").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range []string{
		"# RLS",
		"rls_requests:ok=7,over_limit=1,error=1",
		"rls_unknown_domain:descriptors=2",
		"rls_domain_st:within_limit=5,over_limit=1,shadow_over_limit=1,unlimited=1,replaced=1,no_rule=1",
		"rls_rule_st.shadow:within_limit=1,over_limit=0,shadow_over_limit=1,unlimited=0,replaced=0,no_rule=0",
		"rls_rule_st.user:within_limit=2,over_limit=1,shadow_over_limit=0,unlimited=0,replaced=0,no_rule=0",
	} {
		if !strings.Contains(info, l+"\r\n") {
			t.Errorf("INFO rls lacks %q:\n%s", l, info)
		}
	}
	if all, _ := rdb.Info(ctx).Result(); strings.Contains(all, "# RLS") {
		t.Error("INFO without a section shows rls; it is shown on demand, as commandstats")
	}

	m := scrapeMetrics(t, h.srv)
	for _, c := range []struct {
		name   string
		labels map[string]string
		v      float64
	}{
		{"cellserver_rls_requests_total", map[string]string{"result": "ok"}, 7},
		{"cellserver_rls_requests_total", map[string]string{"result": "over_limit"}, 1},
		{"cellserver_rls_requests_total", map[string]string{"result": "error"}, 1},
		{"cellserver_rls_descriptors_total", map[string]string{"domain": "st", "result": "within_limit"}, 5},
		{"cellserver_rls_descriptors_total", map[string]string{"domain": "st", "result": "over_limit"}, 1},
		{"cellserver_rls_descriptors_total", map[string]string{"domain": "st", "result": "shadow_over_limit"}, 1},
		{"cellserver_rls_descriptors_total", map[string]string{"domain": "st", "result": "unlimited"}, 1},
		{"cellserver_rls_descriptors_total", map[string]string{"domain": "st", "result": "replaced"}, 1},
		{"cellserver_rls_descriptors_total", map[string]string{"domain": "st", "result": "no_rule"}, 1},
		{"cellserver_rls_descriptors_total", map[string]string{"domain": "", "result": "no_rule"}, 2},
		{"cellserver_rls_rule_descriptors_total", map[string]string{"domain": "st", "rule": "st.user", "result": "within_limit"}, 2},
		{"cellserver_rls_rule_descriptors_total", map[string]string{"domain": "st", "rule": "st.user", "result": "over_limit"}, 1},
		{"cellserver_rls_rule_descriptors_total", map[string]string{"domain": "st", "rule": "st.shadow", "result": "shadow_over_limit"}, 1},
	} {
		if got, ok := m.value(c.name, c.labels); !ok || got != c.v {
			t.Errorf("%s%v = %v (present %v), want %v", c.name, c.labels, got, ok, c.v)
		}
	}
	// Bounded: 3 request series, 6 per domain + 6 for unknown domains, 3 per detailed rule.
	if n := m.count("cellserver_rls_requests_total"); n != 3 {
		t.Errorf("%d request series, want 3", n)
	}
	if n := m.count("cellserver_rls_descriptors_total"); n != 7 {
		t.Errorf("%d descriptor series, want 7 (6 for st, 1 for unknown domains)", n)
	}
	if n := m.count("cellserver_rls_rule_descriptors_total"); n != 6 {
		t.Errorf("%d rule series, want 6 (2 detailed rules x 3 results)", n)
	}

	// A reload: st.user loses detailed_metric, st.shadow keeps it.
	changed := strings.Replace(statsYAML, "  - key: user\n    detailed_metric: true\n", "  - key: user\n", 1)
	if err := os.WriteFile(filepath.Join(h.dir, "st.yaml"), []byte(changed), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := h.srv.ReloadRLS(); err != nil {
		t.Fatal(err)
	}
	h.call(t, request("st", 1, []string{"shadow", "s"}), nil)
	st = h.fd.Service().Stats()
	want.ShadowOverLimit++
	if len(st.Domains) != 1 || st.Domains[0] != want {
		t.Errorf("domains after the reload %+v, want [%+v]", st.Domains, want)
	}
	wantRules[0].ShadowOverLimit++
	if len(st.Rules) != 1 || st.Rules[0] != wantRules[0] {
		t.Errorf("rules after the reload %+v, want [%+v]", st.Rules, wantRules[0])
	}
	if n := scrapeMetrics(t, h.srv).count("cellserver_rls_rule_descriptors_total"); n != 3 {
		t.Errorf("%d rule series after the reload, want 3", n)
	}
}

type scraped struct{ samples model.Vector }

func scrapeMetrics(t *testing.T, srv *server.Server) scraped {
	t.Helper()
	res, err := http.Get("http://" + srv.MetricsAddr().String() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	dec := expfmt.SampleDecoder{Dec: expfmt.NewDecoder(strings.NewReader(string(body)), expfmt.NewFormat(expfmt.TypeTextPlain)),
		Opts: &expfmt.DecodeOptions{Timestamp: model.Now()}}
	var s scraped
	for {
		var v model.Vector
		if err := dec.Decode(&v); err != nil {
			if err == io.EOF {
				break
			}
			t.Fatal(err)
		}
		s.samples = append(s.samples, v...)
	}
	return s
}

// value is the sample of name whose labels (besides the name) are exactly labels.
func (s scraped) value(name string, labels map[string]string) (float64, bool) {
	for _, x := range s.samples {
		if string(x.Metric[model.MetricNameLabel]) != name || len(x.Metric) != len(labels)+1 {
			continue
		}
		match := true
		for k, v := range labels {
			if string(x.Metric[model.LabelName(k)]) != v {
				match = false
			}
		}
		if match {
			return float64(x.Value), true
		}
	}
	return 0, false
}

func (s scraped) count(name string) int {
	n := 0
	for _, x := range s.samples {
		if string(x.Metric[model.MetricNameLabel]) == name {
			n++
		}
	}
	return n
}

// TestStatsUnderReloads: with callers and reloads at the same time (the
// limit of the one rule changes, the domain stays), every descriptor of
// every call answered is counted once in its domain, and the requests
// add up.
func TestStatsUnderReloads(t *testing.T) {
	h := startRLS(t, map[string]string{"st.yaml": statsYAML}, nil)
	const callers, calls = 4, 50
	done := make(chan error, callers)
	for g := range callers {
		go func() {
			for i := range calls {
				user := []string{"user", strconv.Itoa(g*calls + i)}
				if _, err := h.client.ShouldRateLimit(context.Background(), request("st", 1, user, []string{"free", "x"})); err != nil {
					done <- err
					return
				}
			}
			done <- nil
		}()
	}
	reloads := 0
	for finished := 0; finished < callers; {
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
			finished++
		default:
			limit := strconv.Itoa(2 + reloads%3)
			src := strings.Replace(statsYAML, "requests_per_unit: 2,", "requests_per_unit: "+limit+",", 1)
			if err := os.WriteFile(filepath.Join(h.dir, "st.yaml"), []byte(src), 0o600); err != nil {
				t.Fatal(err)
			}
			if err := h.srv.ReloadRLS(); err != nil {
				t.Fatal(err)
			}
			reloads++
		}
	}
	st := h.fd.Service().Stats()
	d := st.Domains[0]
	if d.WithinLimit != callers*calls || d.Unlimited != callers*calls || d.OverLimit+d.ShadowOverLimit+d.Replaced+d.NoRule != 0 {
		t.Errorf("domain counts %+v, want %d within limit and %d unlimited", d, callers*calls, callers*calls)
	}
	if r := st.Rules[1]; r.Rule != "st.user" || r.WithinLimit != callers*calls {
		t.Errorf("rule counts %+v, want st.user with %d within limit", r, callers*calls)
	}
	if st.Requests != callers*calls || st.OK != callers*calls {
		t.Errorf("requests %d, ok %d, want %d", st.Requests, st.OK, callers*calls)
	}
	t.Logf("%d calls of 2 descriptors during %d reloads", callers*calls, reloads)
}
