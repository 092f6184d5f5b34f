package keyspace

import (
	"errors"
	"hash/maphash"
	"math/bits"
	"sync"
	"sync/atomic"
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

	atime uint32 // last access, seconds since the Unix epoch (approximate LRU)
	size  uint32 // bytes accounted for this entry (see entrySize)
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

// Policy is what happens when MaxMemory is reached.
type Policy uint8

// The maxmemory policies.
const (
	// AllKeysLRU evicts the least recently used of a few sampled keys of
	// the shard that needs room (Redis's allkeys-lru, approximated as
	// Redis does). An evicted limiter key simply starts afresh.
	AllKeysLRU Policy = iota
	// NoEviction refuses to create keys past the limit (the OOM error).
	NoEviction
)

// EntryOverhead is the estimated memory of one entry beyond its key bytes
// and its object: the map slot, the key's string header and the Value.
const EntryOverhead = 96

// Sizer is implemented by objects (Value.Obj) that report their memory.
type Sizer interface{ MemSize() int }

func entrySize(key []byte, v *Value) uint32 {
	n := len(key) + EntryOverhead
	switch o := v.Obj.(type) {
	case []byte:
		n += cap(o) + 24
	case Sizer:
		n += o.MemSize()
	}
	return uint32(min(n, 1<<31))
}

// Config sets the shape of a Keyspace. The zero value is valid.
type Config struct {
	// MaxMemory caps the estimated memory of the keys, in bytes (key bytes
	// plus EntryOverhead plus objects); 0 means no cap. The default value
	// is 0.
	MaxMemory int64
	// Policy says what happens at MaxMemory. The default is AllKeysLRU.
	Policy Policy
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
	seed      maphash.Seed
	dbs       []*DB
	journal   Journal
	maxMemory int64
	policy    Policy
	used      atomic.Int64 // estimated bytes of every entry
	evicted   atomic.Int64 // keys evicted by AllKeysLRU
}

// MemoryStats reports the estimated memory of the keys and the evictions.
type MemoryStats struct {
	Used      int64
	MaxMemory int64
	Policy    Policy
	Evicted   int64
}

// Memory returns the keyspace's memory figures.
func (ks *Keyspace) Memory() MemoryStats {
	return MemoryStats{Used: ks.used.Load(), MaxMemory: ks.maxMemory, Policy: ks.policy, Evicted: ks.evicted.Load()}
}

// CanInsert reports whether a new key may be created: always with
// AllKeysLRU (room is made by eviction), and under NoEviction only while
// the estimated memory is below MaxMemory.
func (ks *Keyspace) CanInsert() bool {
	return ks.maxMemory == 0 || ks.policy != NoEviction || ks.used.Load() < ks.maxMemory
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
	if cfg.MaxMemory < 0 {
		return nil, errors.Join(ErrConfig, errors.New("keyspace: maxmemory must not be negative"))
	}
	ks := &Keyspace{seed: maphash.MakeSeed(), dbs: make([]*DB, cfg.Databases), journal: cfg.Journal,
		maxMemory: cfg.MaxMemory, policy: cfg.Policy}
	for i := range ks.dbs {
		db := &DB{ks: ks, index: i, shards: make([]Shard, n), mask: uint64(n - 1)}
		for j := range db.shards {
			db.shards[j].db = i
			db.shards[j].index = j
			db.shards[j].journal = cfg.Journal
			db.shards[j].ks = ks
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
	bytes   int64 // estimated memory of m's entries
	ks      *Keyspace
	journal Journal
	db      int // database index, for lock ordering
	index   int // shard index within the database, for lock ordering

	_ [64]byte // keep neighbouring shards' locks off one cache line
}

// account adds delta bytes to the shard's and the keyspace's figures.
// s.mu must be held.
func (s *Shard) account(delta int64) {
	if delta != 0 {
		s.bytes += delta
		s.ks.used.Add(delta)
	}
}

// remove deletes key's entry v from the map, with accounting and journal.
// s.mu must be held.
func (s *Shard) remove(key string, v *Value, keyBytes []byte) {
	delete(s.m, key)
	s.account(-int64(v.size))
	if s.journal != nil {
		if keyBytes == nil {
			keyBytes = []byte(key)
		}
		s.journal.Delete(s.db, keyBytes)
	}
}

// makeRoom evicts up to 16 least recently used entries among samples of
// this shard until need more bytes fit under MaxMemory. Only the locked
// shard is touched, which keeps the lock order; keys are spread evenly
// over shards, so sampling one shard approximates sampling all of them.
// s.mu must be held.
func (s *Shard) makeRoom(need int64) {
	ks := s.ks
	for round := 0; round < 16 && ks.used.Load()+need > ks.maxMemory && len(s.m) > 0; round++ {
		var victimKey string
		var victim *Value
		seen := 0
		for k, v := range s.m { // iteration starts at a random entry
			if victim == nil || v.atime < victim.atime {
				victimKey, victim = k, v
			}
			if seen++; seen == 5 {
				break
			}
		}
		s.remove(victimKey, victim, nil)
		ks.evicted.Add(1)
	}
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
		s.remove(string(key), v, key)
		return nil
	}
	v.atime = uint32(now / 1000)
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
	v.atime = uint32(now / 1000) // recency only: not a change to persist
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
	size := entrySize(key, &nv)
	if cur == nil {
		if s.ks.maxMemory > 0 && s.ks.policy == AllKeysLRU {
			s.makeRoom(int64(size))
		}
		if s.m == nil {
			s.m = make(map[string]*Value)
		}
		cur = new(Value)
		s.m[string(key)] = cur
	} else {
		nv.atime = cur.atime
	}
	s.account(int64(size) - int64(cur.size))
	*cur = nv
	cur.size = size
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
	p.size = entrySize(key, p)
	sh.account(int64(p.size))
	sh.m[string(key)] = p
	sh.mu.Unlock()
}

// Changed records that the caller modified v, key's entry, in place (its
// expiry, or its object). s.mu must be held.
func (s *Shard) Changed(key []byte, v *Value) {
	size := entrySize(key, v)
	s.account(int64(size) - int64(v.size))
	v.size = size
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
	s.remove(string(key), v, key)
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
		sh := &db.shards[i]
		sh.m = nil
		sh.account(-sh.bytes)
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
			sh := &db.shards[i]
			sh.m = nil
			sh.account(-sh.bytes)
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
			s.remove(k, v, nil)
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
