package replication

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"testing"

	"github.com/cellserver/cellserver/keyspace"
	"github.com/cellserver/cellserver/persistence"
)

// BenchmarkJournalChain is one limiter change (a GCRA value, as
// CL.THROTTLE stores) through the journal chain server.New sets, without
// the WATCH link: with persistence or not, on a primary whose backlog
// records (a replica has come) or not. With both, the Writer and the
// backlog each encode the value (persistence.EncodeValue); compare with
// persistence's BenchmarkEncodeValue for what encoding it once would save.
func BenchmarkJournalChain(b *testing.B) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	for _, persist := range []bool{false, true} {
		for _, recording := range []bool{false, true} {
			b.Run(fmt.Sprintf("persist=%v/recording=%v", persist, recording), func(b *testing.B) {
				ks, err := keyspace.New(keyspace.Config{Databases: 1, Shards: 1})
				if err != nil {
					b.Fatal(err)
				}
				r, err := New(Config{Keyspace: ks, Logger: log})
				if err != nil {
					b.Fatal(err)
				}
				if recording {
					r.mu.Lock()
					r.activateBacklog()
					r.mu.Unlock()
				}
				var persisted keyspace.Journal
				if persist {
					w := persistence.NewWriter(nopStore{}, persistence.FsyncNo, log)
					ctx, cancel := context.WithCancel(context.Background())
					go w.Run(ctx)
					defer func() { cancel(); w.Close() }()
					persisted = w
				}
				ks.SetJournal(keyspace.Chain(persisted, r.Journal()))
				keys := make([][]byte, 1024)
				for i := range keys {
					keys[i] = fmt.Appendf(nil, "bench:key:%d", i)
				}
				sh := ks.DB(0).Shard(keys[0])
				b.ReportAllocs()
				b.ResetTimer()
				for i := range b.N {
					sh.Lock()
					sh.Set(keys[i&1023], keyspace.Value{Kind: keyspace.KindGCRA, N: uint64(i), Exp: 1 << 40})
					sh.Unlock()
				}
			})
		}
	}
}

// nopStore takes every batch and keeps nothing, so that the benchmark
// measures the chain rather than a store.
type nopStore struct{}

func (nopStore) Write([]persistence.Op, bool) error               { return nil }
func (nopStore) Sync() error                                      { return nil }
func (nopStore) Load(func(db int, key, value []byte) error) error { return nil }
func (nopStore) DiskUsage() int64                                 { return 0 }
func (nopStore) Close() error                                     { return nil }
