package commands_test

import (
	"bytes"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cellserver/cellserver/commands"
	"github.com/cellserver/cellserver/resp"
)

// BenchmarkDispatchThrottle measures one CL.THROTTLE through the real
// command table (lookup, arity, dispatch, statistics, shard lock, GCRA,
// reply encoding) with no network: ServeRESP is called directly on a zero
// resp.Conn, which is usable as long as the command touches only Out and
// the context (CL.THROTTLE does). The reply buffer is reset every call.
//
// Sub-benchmarks:
//   - limited: one existing key past its burst (15 30 60), so every call
//     is the refused path and stores nothing; the hot-key case.
//   - allowed: one existing key with a bucket too large to fill, so every
//     call is allowed and rewrites the TAT and expiry in place.
//   - keys1024: 1024 existing keys in turn at 15 30 60 (limited after the
//     first 16 calls of each), spreading over shards and cache lines.
func BenchmarkDispatchThrottle(b *testing.B) {
	b.Run("limited", func(b *testing.B) {
		benchDispatch(b, [][]string{{"CL.THROTTLE", "bench:hot", "15", "30", "60"}})
	})
	b.Run("allowed", func(b *testing.B) {
		// 1e6 per second with a burst of 1e12: each call moves the TAT
		// 1 µs and the bucket holds 1e12 µs.
		benchDispatch(b, [][]string{{"CL.THROTTLE", "bench:open", "1000000000000", "1000000", "1"}})
	})
	b.Run("keys1024", func(b *testing.B) {
		cmds := make([][]string, 1024)
		for i := range cmds {
			cmds[i] = []string{"CL.THROTTLE", "bench:key:" + strconv.Itoa(i), "15", "30", "60"}
		}
		benchDispatch(b, cmds)
	})
}

func benchDispatch(b *testing.B, cmds [][]string) { benchDispatchWith(b, nil, cmds) }

// benchDispatchWith is benchDispatch on a server that setup (if not nil)
// has prepared first.
func benchDispatchWith(b *testing.B, setup func(srv *commands.Service), cmds [][]string) {
	srv, err := commands.New(commands.Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		b.Fatal(err)
	}
	if setup != nil {
		setup(srv)
	}
	benchOn(b, srv, cmds)
}

// benchOn runs cmds in turn on srv, as benchDispatch.
func benchOn(b *testing.B, srv *commands.Service, cmds [][]string) {
	conn := new(resp.Conn)
	srv.Open(conn)
	defer srv.Close(conn)

	args := make([][][]byte, len(cmds))
	for i, c := range cmds {
		for _, a := range c {
			args[i] = append(args[i], []byte(a))
		}
	}
	// Create every key (and check the reply shape) before timing.
	for i := range args {
		conn.Out = conn.Out[:0]
		srv.ServeRESP(conn, args[i])
		if !limiterReply(conn.Out) {
			b.Fatalf("%s %s: reply %q", args[i][0], args[i][1], conn.Out)
		}
	}

	b.ReportAllocs()
	n := len(args)
	for i := 0; b.Loop(); i++ {
		conn.Out = conn.Out[:0]
		srv.ServeRESP(conn, args[i%n])
	}
	if !limiterReply(conn.Out) {
		b.Fatalf("last reply %q", conn.Out)
	}
}

// limiterReply reports whether out starts with a limiter reply: a 5-tuple,
// or CL.ALL's array of them.
func limiterReply(out []byte) bool {
	return bytes.HasPrefix(out, []byte("*5\r\n")) || bytes.HasPrefix(out, []byte("*1\r\n*5\r\n"))
}

// BenchmarkDispatchLimiters runs each limiter command of the family over
// 100,000 keys in turn (created before timing), through ServeRESP like
// BenchmarkDispatchThrottle: the in-process counterpart of
// bench/limiters.sh, to compare the commands' own cost without the network.
func BenchmarkDispatchLimiters(b *testing.B) {
	const keys = 100000
	for _, c := range []struct {
		name string
		args func(key string) []string
	}{
		{"CL.THROTTLE", func(k string) []string { return []string{"CL.THROTTLE", k, "15", "30", "60"} }},
		{"CL.PEEK", func(k string) []string { return []string{"CL.PEEK", k, "15", "30", "60"} }},
		{"CL.FIXED", func(k string) []string { return []string{"CL.FIXED", k, "30", "60"} }},
		{"CL.SLIDING", func(k string) []string { return []string{"CL.SLIDING", k, "30", "60"} }},
		{"CL.SLIDINGLOG", func(k string) []string { return []string{"CL.SLIDINGLOG", k, "30", "60"} }},
		{"CL.ACQUIRE", func(k string) []string { return []string{"CL.ACQUIRE", k, "30", "60", "tok"} }},
		{"CL.ACQUIRE-uuid", func(k string) []string {
			return []string{"CL.ACQUIRE", k, "30", "60", "f81d4fae-7dec-11d0-a765-00a0c91e6bf6"}
		}},
		{"CL.ALL-1", func(k string) []string { return []string{"CL.ALL", "CL.THROTTLE", k, "15", "30", "60", "1"} }},
	} {
		b.Run(c.name, func(b *testing.B) {
			cmds := make([][]string, keys)
			for i := range cmds {
				cmds[i] = c.args("bench:key:" + strconv.Itoa(i))
			}
			benchDispatch(b, cmds)
		})
	}
}

// BenchmarkDispatchParallel runs CL.THROTTLE from several clients at once
// (b.RunParallel, one client per goroutine, each on a key of its own), as
// clients of several event loops do: the per-command statistics and the
// limited-prefix tracker are shared by every client, so this measures
// what they cost when several cores update them.
//
// Sub-benchmarks:
//   - allowed: every decision is allowed (a bucket too large to fill).
//   - limited: every decision is limited, all on the prefix "hot".
func BenchmarkDispatchParallel(b *testing.B) {
	b.Run("allowed", func(b *testing.B) {
		benchParallel(b, func(k string) []string { return []string{"CL.THROTTLE", "open:" + k, "1000000000000", "1000000", "1"} })
	})
	b.Run("limited", func(b *testing.B) {
		benchParallel(b, func(k string) []string { return []string{"CL.THROTTLE", "hot:" + k, "15", "30", "60"} })
	})
}

// benchParallel runs the command cmd(client) on a client of its own per
// goroutine of b.RunParallel.
func benchParallel(b *testing.B, cmd func(client string) []string) {
	srv, err := commands.New(commands.Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		b.Fatal(err)
	}
	var clients atomic.Int64
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		conn := new(resp.Conn)
		srv.Open(conn)
		defer srv.Close(conn)
		var args [][]byte
		for _, a := range cmd(strconv.FormatInt(clients.Add(1), 10)) {
			args = append(args, []byte(a))
		}
		for i := 0; i < 20; i++ { // past the burst: the limited case is limited from here on
			conn.Out = conn.Out[:0]
			srv.ServeRESP(conn, args)
		}
		for pb.Next() {
			conn.Out = conn.Out[:0]
			srv.ServeRESP(conn, args)
		}
		if !limiterReply(conn.Out) {
			b.Errorf("last reply %q", conn.Out)
		}
	})
}

// BenchmarkThrottleTrackingPrefixes measures CL.THROTTLE (allowed, so
// every call stores and its change is looked up among the BCAST
// prefixes) over 1024 keys "tenant%04d-user:%d":
//   - prefixes=0: no tracking client; a change costs one atomic load.
//   - prefixes=1000: a BCAST client holds 1,000 prefixes "session%04d:",
//     of other keys: the lookup stops at the tree's root.
//   - prefixes=1000-nearmiss: its 1,000 prefixes are "tenant%04d:", each
//     key's but for the last byte: the lookup walks as deep as a key that
//     matches nothing can (five nodes; the scan this replaced compared
//     every prefix).
//   - interleaved: the three servers in turns of 1024 commands (each
//     first in turn), so that a shared machine's noise falls on each
//     alike; reports each one's ns/op as a metric.
//
// README "Client-side caching" cites the comparison, from
//
//	go test -run '^$' -bench ThrottleTrackingPrefixes -count 6 ./commands
func BenchmarkThrottleTrackingPrefixes(b *testing.B) {
	cmds := make([][]string, 1024)
	for i := range cmds {
		key := fmt.Sprintf("tenant%04d-user:%d", i%1000, i)
		cmds[i] = []string{"CL.THROTTLE", key, "1000000000000", "1000000", "1"}
	}
	variants := []struct {
		name   string
		format string // of the prefixes, "": none
	}{
		{"prefixes=0", ""},
		{"prefixes=1000", "session%04d:"},
		{"prefixes=1000-nearmiss", "tenant%04d:"},
	}
	setup := func(format string) func(srv *commands.Service) {
		return func(srv *commands.Service) {
			if format == "" {
				return
			}
			tracker := new(resp.Conn)
			srv.Open(tracker)
			args := [][]byte{[]byte("CLIENT"), []byte("TRACKING"), []byte("on"), []byte("BCAST")}
			for i := range 1000 {
				args = append(args, []byte("PREFIX"), []byte(fmt.Sprintf(format, i)))
			}
			srv.ServeRESP(tracker, args)
			if string(tracker.Out) != "+OK\r\n" {
				b.Fatalf("CLIENT TRACKING: %q", tracker.Out)
			}
		}
	}
	for _, v := range variants {
		b.Run(v.name, func(b *testing.B) { benchDispatchWith(b, setup(v.format), cmds) })
	}
	b.Run("interleaved", func(b *testing.B) {
		args := make([][][]byte, len(cmds))
		for i, c := range cmds {
			for _, a := range c {
				args[i] = append(args[i], []byte(a))
			}
		}
		srvs := make([]*commands.Service, len(variants))
		conns := make([]*resp.Conn, len(variants))
		for k, v := range variants {
			srv, err := commands.New(commands.Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
			if err != nil {
				b.Fatal(err)
			}
			setup(v.format)(srv)
			srvs[k], conns[k] = srv, new(resp.Conn)
			srv.Open(conns[k])
		}
		took := make([]time.Duration, len(variants))
		for j := 0; b.Loop(); j++ {
			for r := range srvs {
				k := (j + r) % len(srvs) // each goes first in turn
				srv, c := srvs[k], conns[k]
				t0 := time.Now()
				for _, a := range args {
					c.Out = c.Out[:0]
					srv.ServeRESP(c, a)
				}
				took[k] += time.Since(t0)
			}
		}
		for k, v := range variants {
			if !limiterReply(conns[k].Out) {
				b.Fatalf("%s: last reply %q", v.name, conns[k].Out)
			}
			b.ReportMetric(float64(took[k].Nanoseconds())/float64(b.N*len(args)), v.name+"-ns/op")
		}
	})
}
