package commands

import (
	"strings"

	"github.com/cellserver/cellserver/stream"
)

// StreamEntries returns the entries of the stream at key in database 0,
// each as "id field value field value ...", and the key's kind ("" when
// absent), read under the key's shard lock.
func StreamEntries(s *Service, key string) (kind string, entries []string) {
	sh := s.ks.DB(0).Shard([]byte(key))
	sh.Lock()
	defer sh.Unlock()
	v := sh.Peek([]byte(key), s.clock().UnixMilli())
	if v == nil {
		return "", nil
	}
	kind = v.Kind.String()
	st, ok := v.Obj.(*stream.Stream)
	if !ok {
		return kind, nil
	}
	st.Range(stream.ID{}, stream.MaxID, false, func(e stream.Entry) bool {
		parts := []string{e.ID.String()}
		for _, f := range e.Fields {
			parts = append(parts, string(f))
		}
		entries = append(entries, strings.Join(parts, " "))
		return true
	})
	return kind, entries
}

// SetAuditRand replaces the draws of audit_sample (rand.Uint64).
func SetAuditRand(s *Service, f func() uint64) { s.pol.rand = f }

// ShardAfter reports whether the shard of key b comes after key a's in
// the lock order (database 0): then CL.APPLY a with b as its audit stream
// waits for b's lock when busy; when a's comes after b's, it only tries
// it, and runs again if busy (lazyAudit).
func ShardAfter(s *Service, a, b string) bool {
	db := s.ks.DB(0)
	return shardCompare(db.Shard([]byte(a)), db.Shard([]byte(b))) < 0
}

// LockKeyShard takes the lock of key's shard (database 0) and returns the
// func that releases it.
func LockKeyShard(s *Service, key string) (unlock func()) {
	sh := s.ks.DB(0).Shard([]byte(key))
	sh.Lock()
	return sh.Unlock
}

// KeyShardFree reports whether the lock of key's shard (database 0) is
// free, taking and releasing it if so.
func KeyShardFree(s *Service, key string) bool {
	sh := s.ks.DB(0).Shard([]byte(key))
	if !sh.TryLock() {
		return false
	}
	sh.Unlock()
	return true
}

// AuditRedos is how many calls were run again because their audit
// stream's lock, out of the lock order, was busy.
func AuditRedos(s *Service) int64 { return s.pol.auditRedos.Load() }

// SetMaxStreamSize sets the size cap of a stream (stream.MaxSize) and
// returns a func that restores it.
func SetMaxStreamSize(n int) (restore func()) {
	old := maxStreamSize
	maxStreamSize = n
	return func() { maxStreamSize = old }
}
