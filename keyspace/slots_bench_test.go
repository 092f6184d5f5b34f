package keyspace

import (
	"fmt"
	"runtime"
	"testing"
)

// BenchmarkSlotIndexMemory loads 1M limiter keys ("user:N", 16384 slots,
// 256 shards) with the slot index off and on and reports the live heap
// per key, and the time per insert.
//
//	go test ./keyspace -run '^$' -bench SlotIndexMemory -benchtime 1x
func BenchmarkSlotIndexMemory(b *testing.B) {
	const keys = 1_000_000
	for _, on := range []bool{false, true} {
		b.Run(fmt.Sprintf("index=%v", on), func(b *testing.B) {
			for range b.N {
				var m0, m1 runtime.MemStats
				runtime.GC()
				runtime.ReadMemStats(&m0)
				ks, err := New(Config{Databases: 1, SlotIndex: on})
				if err != nil {
					b.Fatal(err)
				}
				key := make([]byte, 0, 32)
				for i := range keys {
					key = fmt.Appendf(key[:0], "user:%d", i)
					ks.Restore(0, key, Value{Kind: KindGCRA, N: uint64(i), Exp: 1 << 50})
				}
				runtime.GC()
				runtime.ReadMemStats(&m1)
				b.ReportMetric(float64(m1.HeapAlloc-m0.HeapAlloc)/keys, "heapB/key")
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/keys/float64(b.N), "ns/insert")
				runtime.KeepAlive(ks)
			}
		})
	}
}

// BenchmarkSlotIndexUpdate: the hot path of a limiter (Lookup then
// Changed on an existing key) with the index off and on.
func BenchmarkSlotIndexUpdate(b *testing.B) {
	for _, on := range []bool{false, true} {
		b.Run(fmt.Sprintf("index=%v", on), func(b *testing.B) {
			ks, _ := New(Config{Databases: 1, SlotIndex: on})
			keys := make([][]byte, 100_000)
			for i := range keys {
				keys[i] = fmt.Appendf(nil, "user:%d", i)
				ks.Restore(0, keys[i], Value{Kind: KindGCRA})
			}
			db := ks.DB(0)
			b.ResetTimer()
			for i := range b.N {
				k := keys[i%len(keys)]
				s := db.Shard(k)
				s.Lock()
				v := s.Lookup(k, 1)
				v.N++
				s.Changed(k, v)
				s.Unlock()
			}
		})
	}
}

// BenchmarkSlotIndexChurn inserts and deletes keys (the paths the index
// hooks) with the index off and on.
func BenchmarkSlotIndexChurn(b *testing.B) {
	for _, on := range []bool{false, true} {
		b.Run(fmt.Sprintf("index=%v", on), func(b *testing.B) {
			ks, _ := New(Config{Databases: 1, SlotIndex: on})
			db := ks.DB(0)
			keys := make([][]byte, 1<<16)
			for i := range keys {
				keys[i] = fmt.Appendf(nil, "user:%d", i)
			}
			b.ResetTimer()
			for i := range b.N {
				k := keys[i&(1<<16-1)]
				s := db.Shard(k)
				s.Lock()
				if i&(1<<16) == 0 {
					s.Set(k, Value{Kind: KindGCRA})
				} else {
					s.Delete(k, 0)
				}
				s.Unlock()
			}
		})
	}
}
