package metrics_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cellserver/cellserver/internal/servertest"
	"github.com/cellserver/cellserver/metrics"
	"github.com/cellserver/cellserver/server"
)

// TestPolicyMetrics: cellserver_policy_decisions_total has one series per
// policy and result, with the counts INFO policies shows; the counts of a
// name survive a reload, and a removed policy's series go.
func TestPolicyMetrics(t *testing.T) {
	file := filepath.Join(t.TempDir(), "p.yaml")
	src := `policies:
  - {name: api, algorithm: fixed, limit: 2, period: 10s}
  - {name: next, algorithm: fixed, limit: 1, period: 10s, shadow: true}
  - {name: live, algorithm: fixed, limit: 5, period: 10s, shadow_companion: next}
`
	if err := os.WriteFile(file, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	clk := servertest.NewClock(t0)
	srv, addr := servertest.Start(t, server.Config{Clock: clk.Now, Policies: file})
	sc := newScraper(t, metrics.Sources{Commands: srv.Commands(), Clock: clk.Now})
	rdb := newClient(t, addr, 0)
	ctx := context.Background()
	for range 3 {
		rdb.Do(ctx, "CL.APPLY", "k", "api")  // allowed, allowed, limited
		rdb.Do(ctx, "CL.APPLY", "s", "next") // allowed, shadow_limited x2
		rdb.Do(ctx, "CL.APPLY", "u", "live") // allowed x3; companion next on u:shadow:next: allowed, shadow_limited x2
	}
	got := sc.scrape()
	want := map[[2]string]float64{
		{"api", "allowed"}: 2, {"api", "limited"}: 1, {"api", "shadow_limited"}: 0,
		{"next", "allowed"}: 2, {"next", "limited"}: 0, {"next", "shadow_limited"}: 4,
		{"live", "allowed"}: 3, {"live", "limited"}: 0, {"live", "shadow_limited"}: 0,
	}
	const name = "cellserver_policy_decisions_total"
	info, err := rdb.Info(ctx, "policies").Result()
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range want {
		if have := got.value(name, "policy", k[0], "result", k[1]); have != v {
			t.Errorf("%s{policy=%q,result=%q} = %v, want %v", name, k[0], k[1], have, v)
		}
	}
	for _, l := range []string{
		"policy_api:allowed=2,limited=1,shadow_limited=0",
		"policy_live:allowed=3,limited=0,shadow_limited=0",
		"policy_next:allowed=2,limited=0,shadow_limited=4",
	} {
		if !strings.Contains(info, l+"\r\n") {
			t.Errorf("INFO policies lacks %q:\n%s", l, info)
		}
	}
	if n := len(got.series(name)); n != 9 {
		t.Errorf("%d series, want 9 (3 policies x 3 results)", n)
	}
	// A reload keeps api's counts (api changed) and drops next's and live's series.
	if err := os.WriteFile(file, []byte("policies:\n  - {name: api, algorithm: fixed, limit: 3, period: 10s}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := rdb.Do(ctx, "CL.POLICY", "RELOAD").Err(); err != nil {
		t.Fatal(err)
	}
	rdb.Do(ctx, "CL.APPLY", "k", "api") // the key's count 2 < 3: allowed
	got = sc.scrape()
	if have := got.value(name, "policy", "api", "result", "allowed"); have != 3 {
		t.Errorf("api allowed after the reload = %v, want 3", have)
	}
	if n := len(got.series(name)); n != 3 {
		t.Errorf("%d series after the reload, want 3", n)
	}
}

// TestPolicyAuditMetrics: cellserver_policy_audit_entries_total has four
// series per policy that audits (none for the others), with the counts
// INFO policies shows: appended, and dropped by reason.
func TestPolicyAuditMetrics(t *testing.T) {
	file := filepath.Join(t.TempDir(), "p.yaml")
	src := `policies:
  - {name: aud, algorithm: fixed, limit: 1, period: 10s, audit: limited}
  - {name: plain, algorithm: fixed, limit: 1, period: 10s}
`
	if err := os.WriteFile(file, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	clk := servertest.NewClock(t0)
	srv, addr := servertest.Start(t, server.Config{Clock: clk.Now, Policies: file})
	sc := newScraper(t, metrics.Sources{Commands: srv.Commands(), Clock: clk.Now})
	rdb := newClient(t, addr, 0)
	ctx := context.Background()
	for range 3 {
		rdb.Do(ctx, "CL.APPLY", "k", "aud") // allowed, limited (appended), limited (dropped)
		rdb.Do(ctx, "CL.APPLY", "k", "plain")
		if n, _ := rdb.Exists(ctx, "audit:aud").Result(); n == 1 {
			rdb.Del(ctx, "audit:aud")
			rdb.Set(ctx, "audit:aud", "x", 0) // the next entry is dropped: wrong type
		}
	}
	got := sc.scrape()
	const name = "cellserver_policy_audit_entries_total"
	for res, v := range map[string]float64{"appended": 1, "dropped_wrongtype": 1, "dropped_oom": 0, "dropped_id": 0} {
		if have := got.value(name, "policy", "aud", "result", res); have != v {
			t.Errorf("%s{policy=\"aud\",result=%q} = %v, want %v", name, res, have, v)
		}
	}
	if n := len(got.series(name)); n != 4 {
		t.Errorf("%d series, want 4 (one policy that audits x 4 results)", n)
	}
	info, _ := rdb.Info(ctx, "policies").Result()
	if l := "policy_audit_aud:stream=audit:aud,appended=1,dropped_wrongtype=1,dropped_oom=0,dropped_id=0\r\n"; !strings.Contains(info, l) {
		t.Errorf("INFO policies lacks %q:\n%s", l, info)
	}
}
