package replication

import (
	"bytes"
	"math/rand/v2"
	"testing"
)

// TestRingMatchesAReference writes random chunks (some larger than the
// ring) and reads random ranges, comparing with the whole stream kept aside.
func TestRingMatchesAReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	checks := 0
	for _, size := range []int64{1, 7, 64, 1000} {
		var r ring
		r.reset(size, 100)
		all := make([]byte, 100) // the stream from offset 0; the first 100 bytes predate the ring
		for step := 0; step < 2000; step++ {
			p := make([]byte, rng.IntN(int(size)*2+3))
			for i := range p {
				p[i] = byte(rng.Uint32())
			}
			r.write(p)
			all = append(all, p...)
			if r.end != int64(len(all)) {
				t.Fatalf("size %d: end %d, want %d", size, r.end, len(all))
			}
			if want := max(int64(len(all))-size, 100); r.start != want {
				t.Fatalf("size %d: start %d, want %d", size, r.start, want)
			}
			off := r.start + rng.Int64N(r.end-r.start+1)
			dst := make([]byte, rng.IntN(int(size)+2))
			n, ok := r.read(off, dst)
			if !ok {
				t.Fatalf("size %d: read at %d in [%d,%d) refused", size, off, r.start, r.end)
			}
			if want := all[off : off+int64(n)]; !bytes.Equal(dst[:n], want) || int64(n) != min(int64(len(dst)), r.end-off) {
				t.Fatalf("size %d: read %d bytes at %d: %x, want %x", size, n, off, dst[:n], want)
			}
			if _, ok := r.read(r.start-1, dst); ok && r.start > 0 {
				t.Fatalf("size %d: read before start accepted", size)
			}
			checks++
		}
	}
	t.Logf("%d writes and reads checked against the reference stream", checks)
}
