package durability

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"
)

// TestWaitAOF: WAITAOF counts the local sync of the change log by fsync
// mode (always: at once; everysec: after the next sync, within about a
// second, the connection parked meanwhile; no: never, so the timeout
// answers 0) and the replicas that acknowledged the client's writes.
func TestWaitAOF(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		fsync   string
		local   int64
		timeout int64 // ms: long where the fsync must come (a loaded machine), waited out where it cannot
	}{
		{"always", 1, 10000},
		{"everysec", 1, 10000},
		{"no", 0, 2000},
	} {
		t.Run(tc.fsync, func(t *testing.T) {
			p := startServer(t, "--data-dir", t.TempDir(), "--fsync", tc.fsync)
			rdb := client(p.addr, 1)
			defer rdb.Close()
			if err := rdb.Set(ctx, "k", "v", 0).Err(); err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			v, err := rdb.Do(ctx, "WAITAOF", 1, 0, tc.timeout).Int64Slice()
			d := time.Since(start)
			if err != nil || len(v) != 2 || v[0] != tc.local || v[1] != 0 {
				t.Fatalf("WAITAOF 1 0 %d = %v, %v; want [%d 0]", tc.timeout, v, err, tc.local)
			}
			// A local count of 1 came before the timeout (it is 0 after
			// it); with --fsync no nothing comes, and the call waited its
			// whole timeout.
			if tc.local == 0 && d < time.Duration(tc.timeout)*time.Millisecond {
				t.Fatalf("WAITAOF 1 0 %d answered after %v, before its timeout", tc.timeout, d)
			}
			// The connection was parked, not the server: others are served.
			if tc.fsync == "no" {
				if err := rdb.Do(ctx, "WAITAOF", 1, 0, 100).Err(); err != nil {
					t.Fatal(err)
				}
			}
			p.stop(t)
		})
	}
	t.Run("replica", func(t *testing.T) {
		p := startServer(t, "--data-dir", t.TempDir(), "--fsync", "always")
		rdb := client(p.addr, 1)
		defer rdb.Close()
		r := startServer(t, "--replicaof", strings.Replace(p.addr, ":", " ", 1))
		replicaOnline(t, rdb)
		if err := rdb.Set(ctx, "k", "v", 0).Err(); err != nil {
			t.Fatal(err)
		}
		v, err := rdb.Do(ctx, "WAITAOF", 1, 1, 10000).Int64Slice()
		if err != nil || fmt.Sprint(v) != "[1 1]" {
			t.Fatalf("WAITAOF 1 1 10000 = %v, %v; want [1 1]", v, err)
		}
		rr := client(r.addr, 1)
		defer rr.Close()
		if err := rr.Do(ctx, "WAITAOF", 0, 0, 0).Err(); err == nil || !strings.HasPrefix(err.Error(), "ERR WAITAOF cannot be used with replica instances") {
			t.Fatalf("WAITAOF on a replica: %v", err)
		}
		if got, err := rr.Get(ctx, "k").Result(); err != nil || got != "v" {
			t.Fatalf("replica: k = %q, %v after WAITAOF counted it", got, err)
		}
	})
}
