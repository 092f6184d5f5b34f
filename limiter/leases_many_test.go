package limiter

import (
	"fmt"
	"testing"
)

// fillLeases returns Leases holding n live leases at now (16-byte tokens
// "lease-%010d", each lease lasting an hour) and a token that none holds,
// sorting in the middle.
func fillLeases(n int, now int64) (*Leases, []byte) {
	ls := new(Leases)
	for i := range n {
		ls.Put(fmt.Sprintf("lease-%010d", i), now+3600*s)
	}
	return ls, []byte(fmt.Sprintf("lease-%010d", n/2) + "x")
}

// BenchmarkAcquireManyLeases is CL.ACQUIRE's work on a key that holds n
// live leases: a new token acquires (Acquire, Apply) and releases its lease
// (Release), so the key keeps n leases from one iteration to the next.
// The cost is linear in n; the commands refuse a limit above MaxLeases, so
// n = 200,000 (built with Put, as decoding a data directory does) shows
// what that bound prevents.
func BenchmarkAcquireManyLeases(b *testing.B) {
	for _, n := range []int{10, 1000, MaxLeases, 200000} {
		b.Run(fmt.Sprintf("leases=%d", n), func(b *testing.B) {
			now := t0
			ls, tok := fillLeases(n, now)
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				now++
				if d := ls.Acquire(now, 60*s, int64(n)+1, tok); d.Limited {
					b.Fatalf("limited: %s", ds(d))
				}
				ls.Apply(now, 60*s, tok)
				ls.Release(now, tok)
			}
		})
	}
}
