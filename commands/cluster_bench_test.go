package commands_test

import (
	"io"
	"log/slog"
	"testing"

	"github.com/cellserver/cellserver/cluster"
	"github.com/cellserver/cellserver/commands"
	"github.com/cellserver/cellserver/internal/topotest"
	"github.com/cellserver/cellserver/resp"
)

// BenchmarkDispatchCluster is BenchmarkDispatchThrottle's limited case
// with cluster mode off and on (a one-shard topology owned by this node):
// what the slot check costs per command.
func BenchmarkDispatchCluster(b *testing.B) {
	for _, on := range []bool{false, true} {
		name := map[bool]string{false: "off", true: "on"}[on]
		b.Run(name, func(b *testing.B) {
			cfg := commands.Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
			if on {
				me := topotest.ID("me")
				st, err := cluster.New(cluster.Config{NodeID: me})
				if err != nil {
					b.Fatal(err)
				}
				top, err := cluster.Parse([]byte(`[{"slot_ranges":[{"start":0,"end":16383}],"master":{"id":"` + me + `","ip":"127.0.0.1","port":6379}}]`))
				if err != nil {
					b.Fatal(err)
				}
				st.Install(top)
				cfg.Cluster = st
			}
			srv, err := commands.New(cfg)
			if err != nil {
				b.Fatal(err)
			}
			conn := new(resp.Conn)
			srv.Open(conn)
			defer srv.Close(conn)
			args := [][]byte{[]byte("CL.THROTTLE"), []byte("bench:hot"), []byte("15"), []byte("30"), []byte("60")}
			srv.ServeRESP(conn, args)
			b.ReportAllocs()
			for b.Loop() {
				conn.Out = conn.Out[:0]
				srv.ServeRESP(conn, args)
			}
			if !limiterReply(conn.Out) {
				b.Fatalf("reply %q", conn.Out)
			}
		})
	}
}
