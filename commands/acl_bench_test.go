package commands_test

import (
	"fmt"
	"io"
	"log/slog"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/cellserver/cellserver/commands"
	"github.com/cellserver/cellserver/resp"
)

// tenantSetUser is the ACL user of the tenants of tests/acl and
// bench/acl.sh: confined to t:*, the limiter commands and reads, writes
// and connection commands, nothing dangerous.
var tenantSetUser = []string{"ACL", "SETUSER", "tenant", "reset", "on", ">pw", "~t:*", "&t:*",
	"+@rate_limit", "+@read", "+@write", "+@connection", "-@dangerous"}

// BenchmarkThrottleTenantVsDefault measures what the ACL permission check costs
// CL.THROTTLE: one Service, a connection of the default user (all
// commands, all keys: nothing to check) and one authenticated as an ACL
// user confined to the prefix t: (tenantSetUser: every call checks the
// command and its key), each over 1024 keys of its own prefix (d:, t:),
// every call allowed (a bucket too large to fill: the store path).
//   - default, tenant: each alone.
//   - interleaved: the two in turns of 1024 commands, each first in
//     turn, so that a shared machine's noise falls on both alike, timed
//     by the CPU time of the benchmark's thread (locked to it), not the
//     wall clock, so that time spent waiting for a CPU counts for
//     neither; reports default-cpu-ns/op, tenant-cpu-ns/op and
//     tenant/default (the ratio).
//
// docs/performance.md cites
//
//	go test -run '^$' -bench ThrottleTenantVsDefault/interleaved -count 6 ./commands
func BenchmarkThrottleTenantVsDefault(b *testing.B) {
	srv, err := commands.New(commands.Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		b.Fatal(err)
	}
	do := func(c *resp.Conn, args ...string) string {
		var a [][]byte
		for _, s := range args {
			a = append(a, []byte(s))
		}
		c.Out = c.Out[:0]
		srv.ServeRESP(c, a)
		return string(c.Out)
	}
	def, tenant := new(resp.Conn), new(resp.Conn)
	srv.Open(def)
	srv.Open(tenant)
	defer srv.Close(def)
	defer srv.Close(tenant)
	if out := do(def, tenantSetUser...); strings.HasPrefix(out, "-ERR unknown command") {
		b.Skipf("no ACL users in this build: %q", out)
	} else if out != "+OK\r\n" {
		b.Fatalf("ACL SETUSER: %q", out)
	}
	if out := do(tenant, "AUTH", "tenant", "pw"); out != "+OK\r\n" {
		b.Fatalf("AUTH tenant: %q", out)
	}
	cmds := func(prefix string) [][][]byte {
		out := make([][][]byte, 1024)
		for i := range out {
			for _, a := range []string{"CL.THROTTLE", fmt.Sprintf("%s:%04d", prefix, i), "1000000000000", "1000000", "1"} {
				out[i] = append(out[i], []byte(a))
			}
		}
		return out
	}
	sides := []struct {
		name string
		conn *resp.Conn
		args [][][]byte
	}{{"default", def, cmds("d")}, {"tenant", tenant, cmds("t")}}
	for _, s := range sides { // create every key, check the replies
		for _, a := range s.args {
			s.conn.Out = s.conn.Out[:0]
			srv.ServeRESP(s.conn, a)
			if !limiterReply(s.conn.Out) {
				b.Fatalf("%s: %s: reply %q", s.name, a[1], s.conn.Out)
			}
		}
	}
	for _, s := range sides {
		b.Run(s.name, func(b *testing.B) {
			b.ReportAllocs()
			n := len(s.args)
			for i := 0; b.Loop(); i++ {
				s.conn.Out = s.conn.Out[:0]
				srv.ServeRESP(s.conn, s.args[i%n])
			}
			if !limiterReply(s.conn.Out) {
				b.Fatalf("last reply %q", s.conn.Out)
			}
		})
	}
	b.Run("interleaved", func(b *testing.B) {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		took := make([]time.Duration, len(sides))
		for j := 0; b.Loop(); j++ {
			for r := range sides {
				k := (j + r) % len(sides) // each goes first in turn
				s := sides[k]
				t0 := threadCPU()
				for _, a := range s.args {
					s.conn.Out = s.conn.Out[:0]
					srv.ServeRESP(s.conn, a)
				}
				took[k] += threadCPU() - t0
			}
		}
		for k, s := range sides {
			if !limiterReply(s.conn.Out) {
				b.Fatalf("%s: last reply %q", s.name, s.conn.Out)
			}
			b.ReportMetric(float64(took[k].Nanoseconds())/float64(b.N*len(s.args)), s.name+"-cpu-ns/op")
		}
		b.ReportMetric(float64(took[1])/float64(took[0]), "tenant/default")
	})
}
