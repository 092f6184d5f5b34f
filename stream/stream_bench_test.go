package stream

import (
	"strconv"
	"testing"
)

// BenchmarkAppendAudit is what an audit entry costs the stream (commands'
// CL.APPLY with audit: limited or all): Append of a 7-field entry (the
// audit entry's names; keys of 1024 in turn, numbers as the decision
// gives them), then, as the audit does, Trim (MAXLEN ~ 100000, LIMIT
// 10000) once the length passes 100000, and ResetDelta as the keyspace
// does after the journal has seen the change.
func BenchmarkAppendAudit(b *testing.B) {
	const keys, maxLen = 1024, 100000
	entries := make([][][]byte, keys)
	for i := range entries {
		decision, retry := "allowed", "-1"
		if i%10 == 9 {
			decision, retry = "limited", strconv.Itoa(1000+i)
		}
		entries[i] = [][]byte{
			[]byte("key"), []byte("bench:key:" + strconv.Itoa(i)),
			[]byte("policy"), []byte("all"),
			[]byte("decision"), []byte(decision),
			[]byte("remaining"), []byte(strconv.Itoa(999999000 + i)),
			[]byte("retry_after_ms"), []byte(retry),
			[]byte("quantity"), []byte("1"),
			[]byte("client"), []byte("127.0.0.1:53122"),
		}
	}
	s := New()
	s.ResetDelta()
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		s.Append(ID{Ms: 1700000000000 + uint64(i/8), Seq: uint64(i % 8)}, entries[i%keys])
		if s.Len() > maxLen {
			s.Trim(TrimArgs{MaxLen: maxLen, Approx: true, Limit: 100 * NodeMaxEntries})
		}
		s.ResetDelta()
	}
}
