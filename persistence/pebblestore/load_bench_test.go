package pebblestore

import (
	"fmt"
	"github.com/cellserver/cellserver/persistence"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/cellserver/cellserver/keyspace"
)

// BenchmarkStartupLoad writes 1M CL.THROTTLE-like records (keys
// "load:key:N", gcra values with a far expiry) into a Pebble directory,
// closes it, and then times what a start does: OpenPebble and Load into
// a fresh keyspace (default shape), with the slot index off and on.
//
//	go test ./persistence -run '^$' -bench StartupLoad -benchtime 1x
func BenchmarkStartupLoad(b *testing.B) {
	const keys = 1_000_000
	dir := b.TempDir()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	p, err := Open(dir, Options{Logger: quiet})
	if err != nil {
		b.Fatal(err)
	}
	exp := time.Now().Add(time.Hour).UnixMilli()
	ops := make([]persistence.Op, 0, 1000)
	for i := 0; i < keys; {
		ops = ops[:0]
		for ; len(ops) < cap(ops) && i < keys; i++ {
			v := persistence.EncodeValue(nil, keyspace.Value{Kind: keyspace.KindGCRA, N: uint64(i), Exp: exp})
			ops = append(ops, persistence.Op{Kind: persistence.OpPut, Key: fmt.Appendf(nil, "load:key:%d", i), Value: v})
		}
		if err := p.Write(ops, false); err != nil {
			b.Fatal(err)
		}
	}
	// Compacted, so that no background compaction left by the writes
	// runs during the timed loads.
	if err := p.Compact(); err != nil {
		b.Fatal(err)
	}
	if err := p.Close(); err != nil {
		b.Fatal(err)
	}
	for _, index := range []bool{false, true} {
		b.Run(fmt.Sprintf("slotindex=%v", index), func(b *testing.B) {
			for range b.N {
				start := time.Now()
				p, err := Open(dir, Options{Logger: quiet})
				if err != nil {
					b.Fatal(err)
				}
				opened := time.Since(start)
				ks, err := keyspace.New(keyspace.Config{SlotIndex: index})
				if err != nil {
					b.Fatal(err)
				}
				st, err := persistence.Load(p, ks, time.Now().UnixMilli())
				if err != nil || st.Keys != keys {
					b.Fatalf("loaded %d keys, err %v", st.Keys, err)
				}
				total := time.Since(start)
				if err := p.Close(); err != nil {
					b.Fatal(err)
				}
				b.ReportMetric(opened.Seconds(), "open-s")
				b.ReportMetric(total.Seconds(), "open+load-s")
			}
		})
	}
}
