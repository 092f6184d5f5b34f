// Package cellservertest runs a cellserver in-process, for the tests of
// code that talks to cellserver (a rate-limited HTTP handler, a job queue
// that calls CL.THROTTLE), in the spirit of miniredis's RunT:
//
//	s := cellservertest.Run(t) // 127.0.0.1, a free port; stopped by t.Cleanup
//	rdb := redis.NewClient(&redis.Options{Addr: s.Addr()})
//	...
//	s.Advance(10 * time.Second) // the server's clock, not the test's
//
// It is the real server (package server: the same command table, the same
// replies), not a fake, listening on the loopback interface.
//
// # Time
//
// The server reads the time from its Server, which is by default a manual
// clock: it starts at the time Start was called, truncated to the second,
// and stands still until the test moves it with Advance or SetTime. Limits
// can so be checked at explicit instants, without sleeping, and keys with a
// TTL expire only when the clock is moved past their deadline. WithClock
// replaces the base of that clock (WithClock(time.Now) runs it on the wall
// clock); Advance and SetTime then shift it.
//
// # What is linked
//
// A test binary that imports this package links the server and its command
// layer, not Pebble nor the Prometheus client: persistence and metrics are
// off, and stay optional at link time. To test with a data directory, pass
// the store opener with WithConfig (importing
// github.com/cellserver/cellserver/persistence/pebblestore links Pebble);
// the binary's is the change log in front of Pebble:
//
//	cellservertest.Run(t, cellservertest.WithConfig(func(c *server.Config) {
//		c.DataDir = t.TempDir()
//		c.OpenStore = changelog.Opener(pebblestore.OpenStore, changelog.Options{})
//	}))
//
// Nor does it pick a Redis client for its users: any client that speaks
// RESP works with Addr (go-redis, rueidis, redigo, the client package).
package cellservertest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cellserver/cellserver/resp"
	"github.com/cellserver/cellserver/server"
)

// ShutdownTimeout bounds how long Close waits for in-flight commands before
// closing every connection at once.
const ShutdownTimeout = 5 * time.Second

// An Option configures a Server at Start or Run.
type Option func(*options)

type options struct {
	clock    func() time.Time
	clockSet bool
	password string
	config   []func(*server.Config)
}

// WithClock sets the base of the server's clock (see the package comment):
// the server's time is now() plus the shifts made by Advance and SetTime. A
// nil now is an error at Start.
func WithClock(now func() time.Time) Option {
	return func(o *options) { o.clock, o.clockSet = now, true }
}

// WithPassword makes the server require AUTH password (Redis's
// requirepass) before other commands.
func WithPassword(password string) Option {
	return func(o *options) { o.password = password }
}

// WithConfig lets f change the server's configuration (package server's
// Config) before it starts: limits, a data directory, cluster mode. The
// defaults f sees are Addr "127.0.0.1:0" (a free port; f may set another),
// a Logger that discards everything, and the Server's clock as Clock,
// which f must leave alone (use WithClock). Several WithConfig run in
// order.
func WithConfig(f func(*server.Config)) Option {
	return func(o *options) { o.config = append(o.config, f) }
}

// Server is a cellserver running in-process. Its methods are safe for
// concurrent use.
type Server struct {
	base   func() time.Time // set by Start, then read-only
	offset atomic.Int64     // nanoseconds added to base()

	mu     sync.Mutex // guards cfg, srv, done, closed; held across Close and Restart
	cfg    server.Config
	srv    *server.Server
	done   chan error // Serve's result
	closed bool
}

// Run starts a Server as Start does and stops it when t's test ends
// (t.Cleanup). A configuration or listening error fails the test at once
// (t.Fatal), as does a failed stop at the end (t.Error).
func Run(t testing.TB, opts ...Option) *Server {
	t.Helper()
	s, err := Start(opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.close(); err != nil {
			t.Errorf("cellservertest: %v", err)
		}
	})
	return s
}

// Start starts a Server on 127.0.0.1 at a free port (unless WithConfig sets
// another address). The caller must Close it; Run does that for a test.
// It returns an error for an invalid configuration (package server's
// Validate: for instance a DataDir without an OpenStore) or when it cannot
// listen.
func Start(opts ...Option) (*Server, error) {
	var o options
	for _, opt := range opts {
		if opt != nil {
			opt(&o)
		}
	}
	s := &Server{}
	switch {
	case o.clockSet && o.clock == nil:
		return nil, errors.New("cellservertest: WithClock(nil): want a function returning the time")
	case o.clockSet:
		s.base = o.clock
	default:
		start := time.Now().Truncate(time.Second)
		s.base = func() time.Time { return start }
	}
	cfg := server.Config{
		Addr:     "127.0.0.1:0",
		Password: o.password,
		Logger:   slog.New(slog.NewTextHandler(io.Discard, nil)),
	}
	for _, f := range o.config {
		cfg.Clock = nil
		f(&cfg)
		if cfg.Clock != nil {
			return nil, errors.New("cellservertest: WithConfig set Config.Clock: set the clock with WithClock, so that Now, SetTime and Advance drive the server")
		}
	}
	cfg.Clock = s.Now
	s.cfg = cfg
	if err := s.start(); err != nil {
		return nil, err
	}
	return s, nil
}

// start builds, listens and serves s.cfg; s.mu is held or s is not shared
// yet.
func (s *Server) start() error {
	srv, err := server.New(s.cfg)
	if err != nil {
		return fmt.Errorf("cellservertest: %w", err)
	}
	if err := srv.Listen(); err != nil {
		srv.Close()
		return fmt.Errorf("cellservertest: listen: %w", err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve() }()
	// A restart listens on the same port again.
	s.cfg.Addr = srv.Addr().String()
	s.srv, s.done = srv, done
	return nil
}

// stop shuts the running server down; s.mu is held.
func (s *Server) stop() error {
	if s.srv == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), ShutdownTimeout)
	defer cancel()
	err := s.srv.Shutdown(ctx)
	if err != nil {
		s.srv.Close() // what is left, at once
		err = fmt.Errorf("shutdown: %w", err)
	}
	if serr := <-s.done; serr != nil && !errors.Is(serr, resp.ErrServerClosed) && err == nil {
		err = fmt.Errorf("serve: %w", serr)
	}
	s.srv, s.done = nil, nil
	return err
}

// Addr returns the address the server listens on, "127.0.0.1:port". It
// does not change on Restart.
func (s *Server) Addr() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cfg.Addr
}

// Server returns the running server.Server (nil after Close), for what this
// package does not wrap, such as Commands. Restart replaces it.
func (s *Server) Server() *server.Server {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.srv
}

// Now returns the server's current time.
func (s *Server) Now() time.Time {
	return s.base().Add(time.Duration(s.offset.Load()))
}

// SetTime sets the server's clock to t: Now returns t until the clock is
// moved again (or, with WithClock, t plus how far that clock has moved
// since). t may be earlier than Now.
func (s *Server) SetTime(t time.Time) {
	s.offset.Store(int64(t.Sub(s.base())))
}

// Advance moves the server's clock by d (backwards if d is negative).
func (s *Server) Advance(d time.Duration) {
	s.offset.Add(int64(d))
}

// Close stops the server: it stops accepting, lets in-flight commands
// finish (at most ShutdownTimeout), closes every connection and frees the
// port. Closing a closed Server does nothing. A failed stop is reported
// by Run's cleanup; Close itself does not report it.
func (s *Server) Close() {
	_ = s.close()
}

func (s *Server) close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	return s.stop()
}

// Stop stops the server as Close does but keeps its address and
// configuration, so that Restart can start it again: a test of what its
// code does while cellserver is down. Stopping a stopped Server does
// nothing.
func (s *Server) Stop() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.stop(); err != nil {
		return fmt.Errorf("cellservertest: stop: %w", err)
	}
	return nil
}

// Restart stops the server (if it runs) and starts it again on the same address, with
// the same configuration and clock. Without a data directory the new
// server starts empty; with one (WithConfig: DataDir and OpenStore) it
// loads what the old one wrote, as a restarted process would. Restart
// fails after Close, or if another process took the port in between; after
// a failed Restart nothing runs (Close is still safe).
func (s *Server) Restart() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return errors.New("cellservertest: Restart after Close")
	}
	if err := s.stop(); err != nil {
		return fmt.Errorf("cellservertest: restart: %w", err)
	}
	return s.start()
}
