package server_test

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/cellserver/cellserver/internal/servertest"
	"github.com/cellserver/cellserver/persistence"
	"github.com/cellserver/cellserver/server"
)

// TestSeamNeedsItsParts: a data directory without a store opener, or a
// metrics address without an exporter, is a configuration error that
// names the missing field, not a panic at start.
func TestSeamNeedsItsParts(t *testing.T) {
	for _, tc := range []struct {
		cfg  server.Config
		want string
	}{
		{server.Config{DataDir: t.TempDir()}, "Config.OpenStore is not set"},
		{server.Config{MetricsAddr: "127.0.0.1:0"}, "Config.Metrics is not set"},
	} {
		err := tc.cfg.Validate()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Validate: %v, want an error with %q", err, tc.want)
		}
		if srv, err := server.New(tc.cfg); err == nil || !strings.Contains(err.Error(), tc.want) {
			if srv != nil {
				srv.Close()
			}
			t.Errorf("New: %v, want %q", err, tc.want)
		}
	}
}

// TestSeamUsesTheGivenParts: the server keeps its state in the store
// OpenStore returns (here a persistence.Memory, which outlives the server)
// and serves the handler Metrics builds.
func TestSeamUsesTheGivenParts(t *testing.T) {
	mem := persistence.NewMemory()
	var opened []string
	open := func(dir string, opts persistence.OpenOptions) (persistence.Store, error) {
		opened = append(opened, dir)
		return keepOpen{mem}, nil
	}
	var got server.MetricsSources
	metrics := func(src server.MetricsSources) http.Handler {
		got = src
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("mine")) })
	}
	cfg := server.Config{DataDir: "/nowhere", OpenStore: open, Fsync: "always", MetricsAddr: "127.0.0.1:0", Metrics: metrics}
	ctx := context.Background()
	srv, addr := servertest.Start(t, cfg)
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	if err := rdb.Do(ctx, "CL.THROTTLE", "k", 0, 1, 60).Err(); err != nil {
		t.Fatal(err)
	}
	res, err := http.Get("http://" + srv.MetricsAddr().String() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(res.Body)
	res.Body.Close()
	if err != nil || string(body) != "mine" {
		t.Errorf("/metrics: %q, %v; want the handler Metrics built", body, err)
	}
	if got.Commands != srv.Commands() || got.Writer == nil || got.Store == nil || got.Ready == nil || !got.Ready() {
		t.Errorf("Metrics got %+v", got)
	}
	if len(opened) != 1 || opened[0] != "/nowhere" {
		t.Fatalf("OpenStore calls: %q", opened)
	}
	n := 0
	if err := mem.Load(func(db int, key, value []byte) error { n++; return nil }); err != nil || n != 1 {
		t.Fatalf("the store holds %d records (%v), want 1 (key k)", n, err)
	}
}

// keepOpen is a Memory whose Close does not close it, so that the test can
// read it after the server closed its store.
type keepOpen struct{ *persistence.Memory }

func (keepOpen) Close() error { return nil }
