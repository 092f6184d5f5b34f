// Package servertest starts cellserver in-process for this repository's
// tests, from a whole server.Config: a thin layer over the public package
// cellservertest, plus a manual Clock the tests share.
package servertest

import (
	"sync"
	"testing"
	"time"

	"github.com/cellserver/cellserver/cellservertest"
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
// returns it with its address; cfg.Clock, nil for time.Now, is the
// server's clock. Logs are discarded unless cfg.Logger is set. The server
// is shut down when the test ends (cellservertest.Run); then its keyspace
// must pass CheckInvariants, or the test fails.
func Start(t testing.TB, cfg server.Config) (*server.Server, string) {
	t.Helper()
	clock := cfg.Clock
	if clock == nil {
		clock = time.Now
	}
	// Registered before Run's, so it runs once the server has stopped.
	var srv *server.Server
	t.Cleanup(func() {
		if srv == nil {
			return
		}
		if err := srv.Commands().Keyspace().CheckInvariants(); err != nil {
			t.Errorf("keyspace invariants at the end of the test: %v", err)
		}
	})
	s := cellservertest.Run(t, cellservertest.WithClock(clock), cellservertest.WithConfig(func(c *server.Config) {
		logger := c.Logger
		*c = cfg
		c.Addr, c.Clock = "127.0.0.1:0", nil
		if c.Logger == nil {
			c.Logger = logger
		}
	}))
	srv = s.Server()
	return srv, s.Addr()
}
