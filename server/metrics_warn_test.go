package server_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"

	"github.com/cellserver/cellserver/internal/syncbuf"
	"github.com/cellserver/cellserver/metrics"
	"github.com/cellserver/cellserver/server"
	"github.com/redis/go-redis/v9"
)

// TestMetricsNonLoopbackWarns: the metrics port has no authentication
// unless --metrics-user is set, so serving it beyond the loopback
// interface without one is logged as a warning at startup; on loopback,
// or with a metrics password or --metrics-acl, it is not.
func TestMetricsNonLoopbackWarns(t *testing.T) {
	for _, tc := range []struct {
		metrics, user string
		acl, warn     bool
	}{{"127.0.0.1:0", "", false, false}, {":0", "", false, true}, {":0", "ops", false, false}, {":0", "", true, false}} {
		var logs syncbuf.Buffer
		pass := map[bool]string{false: "", true: "metrics-pw"}[tc.user != ""]
		srv, err := server.New(server.Config{Addr: "127.0.0.1:0", MetricsAddr: tc.metrics, Metrics: metrics.ServerHandler, Password: "pw",
			MetricsUser: tc.user, MetricsPassword: pass, MetricsACL: tc.acl,
			Logger: slog.New(slog.NewTextHandler(&logs, nil))})
		if err != nil {
			t.Fatal(err)
		}
		if err := srv.Listen(); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- srv.Run(ctx) }()
		// A reply means Run has reached Serve, after its startup lines.
		rdb := redis.NewClient(&redis.Options{Addr: srv.Addr().String(), Password: "pw"})
		if err := rdb.Ping(context.Background()).Err(); err != nil {
			t.Fatal(err)
		}
		rdb.Close()
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if got := strings.Contains(logs.String(), "WARNING: metrics on a non-loopback address"); got != tc.warn {
			t.Errorf("metrics-addr %s, metrics-user %q: warning logged %v, want %v:\n%s", tc.metrics, tc.user, got, tc.warn, logs.String())
		}
	}
}
