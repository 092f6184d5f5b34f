package main

import (
	"bytes"
	"context"
	"io"
	"math"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/cellserver/cellserver/internal/servertest"
	"github.com/cellserver/cellserver/server"
	"github.com/redis/go-redis/v9"
)

// configGetAll returns CONFIG GET * of the server at addr.
func configGetAll(t *testing.T, addr string) map[string]string {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	defer rdb.Close()
	m, err := rdb.ConfigGet(context.Background(), "*").Result()
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestEmbedderGetsTheBinaryDefaults: a server.New(server.Config{}) runs
// with the same settings as the binary started without options, every one
// of them as CONFIG GET shows it.
func TestEmbedderGetsTheBinaryDefaults(t *testing.T) {
	bin, code, done, _ := loadConfig(nil, envFrom(nil), io.Discard, io.Discard)
	if done {
		t.Fatalf("loadConfig with no options: exit %d", code)
	}
	bin.Logger = nil // servertest discards the logs
	_, binAddr := servertest.Start(t, bin)
	_, embAddr := servertest.Start(t, server.Config{})
	want, got := configGetAll(t, binAddr), configGetAll(t, embAddr)
	for name, v := range want {
		if g, ok := got[name]; !ok || g != v {
			t.Errorf("CONFIG GET %s: embedder %q (present %v), binary %q", name, g, ok, v)
		}
	}
	for name := range got {
		if _, ok := want[name]; !ok {
			t.Errorf("CONFIG GET %s: only the embedder has it", name)
		}
	}
	shown := 0
	for _, o := range options {
		if _, ok := want[o.name]; ok {
			shown++
		}
	}
	t.Logf("%d settings compared, %d of the %d options among them", len(want), shown, len(options))
}

// TestParseBytesRange: a size whose bytes do not fit in an int64 is
// refused, not wrapped around.
func TestParseBytesRange(t *testing.T) {
	for _, c := range []struct {
		in   string
		want int64
		ok   bool
	}{
		{"16mb", 16 << 20, true},
		{"8589934591gb", 8589934591 << 30, true}, // the largest whole number of GiB
		{"9223372036854775807", math.MaxInt64, true},
		{"8589934592gb", 0, false}, // 2^63 bytes
		{"9007199254740992k", 0, false},
		{"100000000000000000g", 0, false},
		{"-8589934593gb", 0, false},
	} {
		got, err := parseBytes(c.in)
		if c.ok && (err != nil || got != c.want) {
			t.Errorf("parseBytes(%q) = %d, %v; want %d", c.in, got, err, c.want)
		}
		if !c.ok && (err == nil || !strings.Contains(err.Error(), "out of range")) {
			t.Errorf("parseBytes(%q) = %d, %v; want an out-of-range error", c.in, got, err)
		}
	}
	var errb bytes.Buffer
	if _, code, done, _ := loadConfig([]string{"--maxmemory", "8589934592gb"}, envFrom(nil), io.Discard, &errb); !done || code != 2 ||
		!strings.Contains(errb.String(), `maxmemory (from flag --maxmemory): size out of range: "8589934592gb"`) {
		t.Fatalf("exit %d done %v, stderr %q", code, done, errb.String())
	}
}

// TestLoadConfigNeverDials: with --healthcheck, loading the configuration
// only reports that a health check is wanted; the probe runs later, in
// run. A listener on the configured address sees no connection.
func TestLoadConfigNeverDials(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	cfg, code, done, health := loadConfig([]string{"--healthcheck", "--addr", ln.Addr().String()}, envFrom(nil), io.Discard, io.Discard)
	if done || !health || cfg.Addr != ln.Addr().String() {
		t.Fatalf("loadConfig: exit %d done %v health %v addr %q; want a configuration to probe", code, done, health, cfg.Addr)
	}
	// A connection loadConfig made would wait in the listen queue.
	_ = ln.(*net.TCPListener).SetDeadline(time.Now().Add(200 * time.Millisecond))
	if c, err := ln.Accept(); err == nil {
		c.Close()
		t.Fatal("loadConfig connected to the configured address")
	}
}
