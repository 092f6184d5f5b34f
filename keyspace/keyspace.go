package keyspace

import (
	"errors"
	"hash/maphash"
	"math/bits"
	"sync"
)

// Kind says which command family owns a key and how its Value is read.
type Kind uint8

// String returns the kind's name as CL.INFO and the metrics report it.
func (k Kind) String() string {
	switch k {
	case KindString:
		return "string"
	case KindGCRA:
		return "gcra"
	case KindFixed:
		return "fixed"
	case KindSliding:
		return "sliding"
	case KindLog:
		return "slidinglog"
	case KindLeases:
		return "concurrency"
	}
	return "unknown"
}

// The kinds of value a key can hold.
const (
	// KindString is a plain Redis string written by SET. Obj holds its bytes
	// as a []byte.
	KindString Kind = iota + 1
	// KindGCRA is CL.THROTTLE state. N holds the theoretical arrival time
	// (TAT) in nanoseconds since the Unix epoch, modulo 2^64, exactly the
	// number redis-cell stores as a decimal string.
	KindGCRA
	// KindFixed is CL.FIXED state: N holds the window's count, M the
	// window's start in ns since the Unix epoch.
	KindFixed
	// KindSliding is CL.SLIDING state: N holds the previous window's count
	// in its high 32 bits and the current window's in its low 32 bits, M
	// the current window's start in ns since the Unix epoch.
	KindSliding
	// KindLog is CL.SLIDINGLOG state: Obj holds a *limiter.Log.
	KindLog
	// KindLeases is CL.ACQUIRE state: Obj holds a *limiter.Leases.
	KindLeases
)

// Value is the typed state of one key. The zero Value is not a valid entry:
// every stored Value has a Kind.
type Value struct {
	N   uint64 // first scalar of the kind's state (KindGCRA: TAT in ns)
	M   int64  // second scalar of the kind's state (unused by KindGCRA)
	Exp int64  // absolute expiry in ms since the Unix epoch; 0 means none
	Obj any    // kind-specific state that is not scalar (KindString: []byte)
	Kind
}

// Expired reports whether v has an expiry and it lies before now (ms). As in
// Redis, a key whose expiry equals now is still alive for that millisecond.
func (v *Value) Expired(now int64) bool { return v.Exp != 0 && now > v.Exp }

// Journal receives every change to a Keyspace in the order the changes
// happen, so that a durable copy can follow it. Its methods are called
// with the affected shard locks held (all of a database's for DeleteDB,
// all for DeleteAll) and must not block on other shards. key and v are
// only valid during the call.
type Journal interface {
	Put(db int, key []byte, v *Value)
	Delete(db int, key []byte)
	DeleteDB(db int)
	DeleteAll()
}

// Config sets the shape of a Keyspace. The zero value is valid.
type Config struct {
	// Journal, if not nil, is told about every change (persistence).
	Journal Journal
	// Databases is the number of numbered databases (SELECT 0..n-1).
	// The default value is 16.
	Databases int
	// Shards is the number of shards per database, rounded up to a power of
	// two. The default value is 256.
	Shards int
}

// ErrConfig reports an invalid Config.
var ErrConfig = errors.New("keyspace: invalid config")

func (c *Config) ensureDefaults() {
	if c.Databases == 0 {
		c.Databases = 16
	}
	if c.Shards == 0 {
		c.Shards = 256
	}
}

// Keyspace is the set of databases. It is safe for concurrent use.
type Keyspace struct {
	seed    maphash.Seed
	dbs     []*DB
	journal Journal
}

// New returns an empty Keyspace.
func New(cfg Config) (*Keyspace, error) {
	cfg.ensureDefaults()
	if cfg.Databases < 1 || cfg.Databases > 1<<16 {
		return nil, errors.Join(ErrConfig, errors.New("keyspace: databases must be between 1 and 65536"))
	}
	if cfg.Shards < 1 || cfg.Shards > 1<<20 {
		return nil, errors.Join(ErrConfig, errors.New("keyspace: shards must be between 1 and 1048576"))
	}
	n := 1 << bits.Len(uint(cfg.Shards-1))
	ks := &Keyspace{seed: maphash.MakeSeed(), dbs: make([]*DB, cfg.Databases), journal: cfg.Journal}
	for i := range ks.dbs {
		db := &DB{ks: ks, index: i, shards: make([]Shard, n), mask: uint64(n - 1)}
		for j := range db.shards {
			db.shards[j].db = i
			db.shards[j].index = j
			db.shards[j].journal = cfg.Journal
		}
		ks.dbs[i] = db
	}
	return ks, nil
}

// NumDB returns the number of databases.
func (ks *Keyspace) NumDB() int { return len(ks.dbs) }

// DB returns database i; it panics if i is out of range (callers check
// SELECT's argument first).
func (ks *Keyspace) DB(i int) *DB { return ks.dbs[i] }

// LockAll locks every shard of every database in the global order. It is
// what MULTI/EXEC uses to run a transaction atomically.
func (ks *Keyspace) LockAll() {
	for _, db := range ks.dbs {
		for i := range db.shards {
			db.shards[i].mu.Lock()
		}
	}
}

// UnlockAll releases what LockAll took.
func (ks *Keyspace) UnlockAll() {
	for _, db := range ks.dbs {
		for i := range db.shards {
			db.shards[i].mu.Unlock()
		}
	}
}

// DB is one numbered database.
type DB struct {
	ks     *Keyspace
	index  int
	mask   uint64
	shards []Shard
}

// Index returns the database number.
func (db *DB) Index() int { return db.index }

// NumShards returns the number of shards (a power of two).
func (db *DB) NumShards() int { return len(db.shards) }

// Shard returns the shard that holds key.
func (db *DB) Shard(key []byte) *Shard {
	return &db.shards[maphash.Bytes(db.ks.seed, key)&db.mask]
}

// ShardAt returns shard i (0 <= i < NumShards), for scans in shard order.
func (db *DB) ShardAt(i int) *Shard { return &db.shards[i] }

// Shard is one lock domain of a DB.
type Shard struct {
	mu sync.Mutex // guards m

	m       map[string]*Value
	journal Journal
	db      int // database index, for lock ordering
	index int // shard index within the database, for lock ordering

	_ [64]byte // keep neighbouring shards' locks off one cache line
}

// Lock takes the shard lock.
func (s *Shard) Lock() { s.mu.Lock() }

// Unlock releases the shard lock.
func (s *Shard) Unlock() { s.mu.Unlock() }

// Order returns the shard's position in the global lock order.
func (s *Shard) Order() (db, index int) { return s.db, s.index }

// Lookup returns the live value of key, or nil if it is absent or expired at
// now (ms); an expired entry is removed. The pointer stays valid until the
// shard is unlocked or the key is deleted. s.mu must be held.
func (s *Shard) Lookup(key []byte, now int64) *Value {
	v := s.m[string(key)]
	if v == nil {
		return nil
	}
	if v.Expired(now) {
		delete(s.m, string(key))
		if s.journal != nil {
			s.journal.Delete(s.db, key)
		}
		return nil
	}
	return v
}

// Peek returns the live value of key like Lookup, but never removes an
// expired entry: read-only commands use it so that they write nothing.
// s.mu must be held.
func (s *Shard) Peek(key []byte, now int64) *Value {
	v := s.m[string(key)]
	if v == nil || v.Expired(now) {
		return nil
	}
	return v
}

// Set stores v under key, replacing any previous value. s.mu must be held.
func (s *Shard) Set(key []byte, v Value) {
	s.Replace(key, s.m[string(key)], v)
}

// Replace stores nv under key, where cur is key's current entry as Lookup
// returned it (nil when absent): it saves Set's second lookup on hot paths.
// s.mu must be held.
func (s *Shard) Replace(key []byte, cur *Value, nv Value) {
	if cur == nil {
		if s.m == nil {
			s.m = make(map[string]*Value)
		}
		cur = new(Value)
		s.m[string(key)] = cur
	}
	*cur = nv
	if s.journal != nil {
		s.journal.Put(s.db, key, cur)
	}
}

// Restore inserts v under key in database db without telling the journal:
// it is how persisted state is loaded at startup, before serving. It locks
// the key's shard.
func (ks *Keyspace) Restore(db int, key []byte, v Value) {
	sh := ks.dbs[db].Shard(key)
	sh.mu.Lock()
	if sh.m == nil {
		sh.m = make(map[string]*Value)
	}
	p := new(Value)
	*p = v
	sh.m[string(key)] = p
	sh.mu.Unlock()
}

// Changed records that the caller modified v, key's entry, in place (its
// expiry, or its object). s.mu must be held.
func (s *Shard) Changed(key []byte, v *Value) {
	if s.journal != nil {
		s.journal.Put(s.db, key, v)
	}
}

// Delete removes key and reports whether a live value was removed.
// s.mu must be held.
func (s *Shard) Delete(key []byte, now int64) bool {
	v := s.m[string(key)]
	if v == nil {
		return false
	}
	delete(s.m, string(key))
	if s.journal != nil {
		s.journal.Delete(s.db, key)
	}
	return !v.Expired(now)
}

// Len returns the number of entries, expired ones not yet removed included.
// s.mu must be held.
func (s *Shard) Len() int { return len(s.m) }

// Range calls fn for every live entry at now (ms) until fn returns false.
// fn must not modify the shard. s.mu must be held.
func (s *Shard) Range(now int64, fn func(key string, v *Value) bool) {
	for k, v := range s.m {
		if v.Expired(now) {
			continue
		}
		if !fn(k, v) {
			return
		}
	}
}

// Flush removes every key of db (FLUSHDB), holding all of its shard locks
// at once so that the journal sees one consistent cut; locked means the
// caller already holds them (EXEC).
func (db *DB) Flush(locked bool) {
	if !locked {
		for i := range db.shards {
			db.shards[i].mu.Lock()
		}
		defer func() {
			for i := range db.shards {
				db.shards[i].mu.Unlock()
			}
		}()
	}
	for i := range db.shards {
		db.shards[i].m = nil
	}
	if db.ks.journal != nil {
		db.ks.journal.DeleteDB(db.index)
	}
}

// FlushAll removes every key of every database (FLUSHALL); locked means
// the caller holds every shard lock (EXEC).
func (ks *Keyspace) FlushAll(locked bool) {
	if !locked {
		ks.LockAll()
		defer ks.UnlockAll()
	}
	for _, db := range ks.dbs {
		for i := range db.shards {
			db.shards[i].m = nil
		}
	}
	if ks.journal != nil {
		ks.journal.DeleteAll()
	}
}

// Sweep removes up to max expired entries at now (ms), looking at no more
// than 4*max entries, and returns how many it removed and how many it
// looked at. s.mu must be held.
func (s *Shard) Sweep(now int64, max int) (removed, seen int) {
	for k, v := range s.m { // map iteration starts at a random point
		if seen >= 4*max || removed >= max {
			break
		}
		seen++
		if v.Expired(now) {
			delete(s.m, k)
			if s.journal != nil {
				s.journal.Delete(s.db, []byte(k))
			}
			removed++
		}
	}
	return removed, seen
}

// Size returns the number of keys in db, counting like Redis's DBSIZE:
// expired keys not yet removed are included. It locks one shard at a time
// unless locked is true (the caller holds every shard lock).
func (db *DB) Size(locked bool) int {
	n := 0
	for i := range db.shards {
		s := &db.shards[i]
		if !locked {
			s.mu.Lock()
		}
		n += len(s.m)
		if !locked {
			s.mu.Unlock()
		}
	}
	return n
}

// Stats is a point-in-time count for INFO keyspace.
type Stats struct {
	Keys    int // live keys
	Expires int // live keys with an expiry
	ByKind  [8]int
}

// Stats counts db's live keys at now (ms), locking one shard at a time
// unless locked is true (the caller holds every shard lock).
func (db *DB) Stats(now int64, locked bool) Stats {
	var st Stats
	for i := range db.shards {
		s := &db.shards[i]
		if !locked {
			s.mu.Lock()
		}
		for _, v := range s.m {
			if v.Expired(now) {
				continue
			}
			st.Keys++
			if int(v.Kind) < len(st.ByKind) {
				st.ByKind[v.Kind]++
			}
			if v.Exp != 0 {
				st.Expires++
			}
		}
		if !locked {
			s.mu.Unlock()
		}
	}
	return st
}

// SweepConfig bounds one active-expiry pass.
type SweepConfig struct {
	// PerShard is the most keys removed from one shard in one round.
	PerShard int
	// Rounds is the most rounds over a shard in one pass; another round runs
	// only while more than a quarter of the keys looked at had expired.
	Rounds int
}

// Sweep runs one bounded active-expiry pass over every shard of every
// database at now (ms), locking one shard at a time, and returns the number
// of keys removed.
func (ks *Keyspace) Sweep(now int64, cfg SweepConfig) int {
	total := 0
	for _, db := range ks.dbs {
		for i := range db.shards {
			s := &db.shards[i]
			for r := 0; r < cfg.Rounds; r++ {
				s.mu.Lock()
				removed, seen := s.Sweep(now, cfg.PerShard)
				s.mu.Unlock()
				total += removed
				if seen == 0 || removed*4 <= seen {
					break
				}
			}
		}
	}
	return total
}
