package metrics_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/cellserver/cellserver/commands"
	"github.com/cellserver/cellserver/internal/servertest"
	"github.com/cellserver/cellserver/keyspace"
	"github.com/cellserver/cellserver/metrics"
	"github.com/cellserver/cellserver/resp"
)

var t0 = time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)

// stack is cellserver assembled as server.New does, with every layer
// reachable: server.Server exposes only the command layer. The active
// sweep does not run, so the test decides when keys expire.
type stack struct {
	addr string
	clk  *servertest.Clock
	ks   *keyspace.Keyspace
	cmds *commands.Service
	net  *resp.Server
}

func startStack(t *testing.T, rcfg resp.Config) *stack {
	t.Helper()
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	clk := servertest.NewClock(t0)
	ks, err := keyspace.New(keyspace.Config{Databases: 4, Shards: 8})
	if err != nil {
		t.Fatal(err)
	}
	cmds, err := commands.New(commands.Config{Keyspace: ks, Clock: clk.Now, Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	rcfg.Logger = logger
	rs := resp.NewServer(rcfg, cmds)
	cmds.SetNetwork(rs)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- rs.Serve(ln) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := rs.Shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
		if err := <-done; !errors.Is(err, resp.ErrServerClosed) {
			t.Errorf("serve: %v", err)
		}
	})
	return &stack{addr: ln.Addr().String(), clk: clk, ks: ks, cmds: cmds, net: rs}
}

func (s *stack) sources() metrics.Sources {
	return metrics.Sources{Commands: s.cmds, Network: s.net, Keyspace: s.ks, Clock: s.clk.Now}
}

// scraper serves a registry over loopback HTTP.
type scraper struct {
	t   *testing.T
	reg *prometheus.Registry
	url string
}

func newScraper(t *testing.T, src metrics.Sources) *scraper {
	t.Helper()
	reg := metrics.NewRegistry(src)
	ts := httptest.NewServer(metrics.NewHandler(reg, src.Ready))
	t.Cleanup(ts.Close)
	return &scraper{t: t, reg: reg, url: ts.URL}
}

// scrape fetches /metrics and parses it. It fails the test if gathering
// reports any error (which the handler would only log).
func (s *scraper) scrape() scrape {
	s.t.Helper()
	if _, err := s.reg.Gather(); err != nil {
		s.t.Fatalf("gather: %v", err)
	}
	res, err := http.Get(s.url + "/metrics")
	if err != nil {
		s.t.Fatal(err)
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		s.t.Fatalf("/metrics: %s", res.Status)
	}
	if ct := res.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/plain") {
		s.t.Fatalf("/metrics content type %q", ct)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := p.TextToMetricFamilies(res.Body)
	if err != nil {
		s.t.Fatalf("parse /metrics: %v", err)
	}
	return scrape{t: s.t, mfs: mfs}
}

type scrape struct {
	t   *testing.T
	mfs map[string]*dto.MetricFamily
}

// metric finds the series of name with exactly labels (name/value pairs).
func (s scrape) metric(name string, labels ...string) (*dto.Metric, bool) {
	mf := s.mfs[name]
	if mf == nil {
		return nil, false
	}
	want := map[string]string{}
	for i := 0; i+1 < len(labels); i += 2 {
		want[labels[i]] = labels[i+1]
	}
next:
	for _, m := range mf.GetMetric() {
		if len(m.GetLabel()) != len(want) {
			continue
		}
		for _, lp := range m.GetLabel() {
			if v, ok := want[lp.GetName()]; !ok || v != lp.GetValue() {
				continue next
			}
		}
		return m, true
	}
	return nil, false
}

// value is a counter's or gauge's value, 0 for an absent series.
func (s scrape) value(name string, labels ...string) float64 {
	m, ok := s.metric(name, labels...)
	if !ok {
		return 0
	}
	switch {
	case m.Counter != nil:
		return m.Counter.GetValue()
	case m.Gauge != nil:
		return m.Gauge.GetValue()
	case m.Untyped != nil:
		return m.Untyped.GetValue()
	}
	s.t.Fatalf("%s%v is neither a counter nor a gauge", name, labels)
	return 0
}

func (s scrape) has(name string, labels ...string) bool {
	_, ok := s.metric(name, labels...)
	return ok
}

// series lists the label sets of name, as "k=v,k=v", sorted.
func (s scrape) series(name string) []string {
	var out []string
	for _, m := range s.mfs[name].GetMetric() {
		var parts []string
		for _, lp := range m.GetLabel() {
			parts = append(parts, lp.GetName()+"="+lp.GetValue())
		}
		out = append(out, strings.Join(parts, ","))
	}
	sort.Strings(out)
	return out
}

// delta checks that the series moved by exactly want between a and b.
func delta(t *testing.T, a, b scrape, want float64, name string, labels ...string) {
	t.Helper()
	if got := b.value(name, labels...) - a.value(name, labels...); got != want {
		t.Errorf("%s%v moved by %v, want %v", name, labels, got, want)
	}
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	res, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return res.StatusCode, string(body)
}
