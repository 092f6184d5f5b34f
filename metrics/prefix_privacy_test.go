package metrics_test

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/cellserver/cellserver/commands"
	"github.com/cellserver/cellserver/internal/servertest"
	"github.com/cellserver/cellserver/metrics"
	"github.com/cellserver/cellserver/server"
)

// TestPrefixesHideWholeKeys: a limited key with no separator (an e-mail
// address, an IP address) is counted under commands.NoPrefix; the whole
// key appears in no series of the /metrics page, even with a password set.
func TestPrefixesHideWholeKeys(t *testing.T) {
	clk := servertest.NewClock(t0)
	srv, addr := servertest.Start(t, server.Config{Clock: clk.Now, Password: "pw", MetricsAddr: "127.0.0.1:0", Metrics: metrics.ServerHandler})
	rdb := newClient(t, addr, 0)
	if err := rdb.Do(t.Context(), "AUTH", "pw").Err(); err != nil {
		t.Fatal(err)
	}
	secrets := []string{"alice@example.com", "10.1.2.3", "2001:db8::1"} // the IPv6 one has the separator
	limited := 0
	for _, key := range append(secrets, "user:42") {
		limited += throttle(t, rdb, key, 0, 2)
	}
	if limited != 4 {
		t.Fatalf("%d limited decisions, want 4", limited)
	}
	clk.Advance(time.Minute + time.Second)
	sc := newScraper(t, metrics.Sources{Commands: srv.Commands(), Clock: clk.Now})
	s := sc.scrape()
	if got := s.series("cellserver_limited_key_prefix_top"); strings.Join(got, " ") != "prefix="+commands.NoPrefix+" prefix=2001 prefix=user" {
		t.Errorf("limited_key_prefix_top series %q", got)
	}
	if got := s.value("cellserver_limited_key_prefix_top", "prefix", commands.NoPrefix); got != 2 {
		t.Errorf("limited_key_prefix_top{prefix=%q} = %v, want 2", commands.NoPrefix, got)
	}
	// The page the server itself serves.
	res, err := http.Get("http://" + srv.MetricsAddr().String() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if !strings.Contains(string(page), `cellserver_limited_key_prefix_top{prefix="`+commands.NoPrefix+`"} 2`) {
		t.Errorf("/metrics lacks the %s series", commands.NoPrefix)
	}
	for _, k := range secrets[:2] {
		if strings.Contains(string(page), k) {
			t.Errorf("/metrics shows the key %q", k)
		}
	}
}
