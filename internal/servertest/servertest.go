// Package servertest starts cellserver in-process for tests: on 127.0.0.1
// at a free port, with an injectable clock, stopped by t.Cleanup.
package servertest

import (
	"context"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/cellserver/cellserver/server"
)

// Clock is a manually driven wall clock, safe for concurrent use.
type Clock struct {
	mu sync.Mutex // guards t
	t  time.Time
}

// NewClock returns a Clock set to t.
func NewClock(t time.Time) *Clock { return &Clock{t: t} }

// Now returns the clock's time; pass it as server.Config.Clock.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

// Set moves the clock to t.
func (c *Clock) Set(t time.Time) {
	c.mu.Lock()
	c.t = t
	c.mu.Unlock()
}

// Advance moves the clock forward by d.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// Start runs a server with cfg on 127.0.0.1:0 (cfg.Addr is overridden) and
// returns it with its address. Logs are discarded unless cfg.Logger is set.
// The server is shut down when the test ends.
func Start(t testing.TB, cfg server.Config) (*server.Server, string) {
	t.Helper()
	cfg.Addr = "127.0.0.1:0"
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	srv, err := server.New(cfg)
	if err != nil {
		t.Fatalf("servertest: %v", err)
	}
	if err := srv.Listen(); err != nil {
		t.Fatalf("servertest: listen: %v", err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve() }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			t.Errorf("servertest: shutdown: %v", err)
		}
		<-done
	})
	return srv, srv.Addr().String()
}
