package keyspace

import (
	"cmp"
	"errors"
	"hash/maphash"
	"math/bits"
	"runtime"
	"sync"
	"sync/atomic"

	"github.com/cellserver/cellserver/keyslot"
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
	case KindStream:
		return "stream"
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
	// KindLeases is CL.ACQUIRE state: Obj holds a *limiter.Leases, or is
	// nil when the one lease is packed into N and M (limiter.Leases.Pack).
	KindLeases
	// KindStream is a Redis stream (XADD ...): Obj holds a *stream.Stream,
	// changed in place. Its journal writes carry the stream's delta
	// (DeltaValue) rather than the whole value.
	KindStream
)

// DeltaValue is implemented by objects whose changes are journaled as
// deltas (a stream's): after the journal has been told of a change to
// such an object, the keyspace calls ResetDelta.
type DeltaValue interface {
	Delta() (d []byte, ok bool)
	ResetDelta()
	// MarkFull makes the next journal write the whole value: the keyspace
	// calls it when the object is new to its key (a new key, RENAME, a
	// replaced value), whose delta would not apply to what the journal's
	// consumers hold.
	MarkFull()
}

// Value is the typed state of one key. The zero Value is not a valid entry:
// every stored Value has a Kind.
type Value struct {
	N   uint64 // first scalar of the kind's state (KindGCRA: TAT in ns)
	M   int64  // second scalar of the kind's state (unused by KindGCRA)
	Exp int64  // absolute expiry in ms since the Unix epoch; 0 means none
	Obj any    // kind-specific state that is not scalar (KindString: []byte)
	Kind

	ref uint32 // the entry it was read from, plus one (0: not read from a shard)
}

// The fixed window's and the sliding counter's states are two scalars,
// packed into N and M as the Kind constants say; these accessors are the
// only code that knows the packing.

// WindowStart returns the start in ns since the Unix epoch of the window
// a KindFixed or KindSliding value counts (M).
func (v *Value) WindowStart() int64 { return v.M }

// FixedCount returns the units a KindFixed value counts in its window.
func (v *Value) FixedCount() int64 { return int64(v.N) }

// SlidingCounts returns the units a KindSliding value counts in the window
// before its window (prev) and in its window (cur).
func (v *Value) SlidingCounts() (prev, cur int64) {
	return int64(v.N >> 32), int64(uint32(v.N))
}

// SetFixed makes v a KindFixed value counting count units (non-negative)
// in the window starting at start ns. Exp and Obj are left as they are.
func (v *Value) SetFixed(start, count int64) {
	v.Kind, v.N, v.M = KindFixed, uint64(count), start
}

// SetSliding makes v a KindSliding value counting prev units in the window
// before the one starting at start ns and cur in that one; both are in
// [0, math.MaxUint32] (limiter.MaxSlidingLimit). Exp and Obj are left as
// they are.
func (v *Value) SetSliding(start, prev, cur int64) {
	v.Kind, v.N, v.M = KindSliding, uint64(prev)<<32|uint64(cur), start
}

// Expired reports whether v has an expiry and it lies before now (ms). As in
// Redis, a key whose expiry equals now is still alive for that millisecond.
func (v *Value) Expired(now int64) bool { return v.Exp != 0 && now > v.Exp }

// Policy is what happens when MaxMemory is reached.
type Policy uint8

// The maxmemory policies.
const (
	// AllKeysLRU evicts the least recently used of a few sampled keys of
	// the shard that needs room, and of every shard in turn when values
	// grew (Evict) (Redis's allkeys-lru, approximated as Redis does). An
	// evicted limiter key simply starts afresh.
	AllKeysLRU Policy = iota
	// NoEviction refuses to create keys or grow values past the limit
	// (the OOM error; see CanInsert and CanReplace).
	NoEviction
	// AllKeysLFU evicts the least frequently used of a few sampled keys,
	// as AllKeysLRU does by recency (Redis's allkeys-lfu): each key keeps
	// Redis's 8-bit logarithmic access counter, which decays by one a
	// minute, in the bits that hold its last access time otherwise
	// (access.go), so it costs no memory.
	AllKeysLFU
)

// evicts reports whether p makes room by evicting keys.
func (p Policy) evicts() bool { return p == AllKeysLRU || p == AllKeysLFU }

// EntryOverhead is the estimated memory of one entry beyond its key bytes
// and its object: the 56-byte entry (which holds a key of up to 23 bytes
// itself), its index slot at the table's lowest load and a share of the
// partly filled chunk (see table).
const EntryOverhead = 64

// Sizer is implemented by objects (Value.Obj) that report their memory.
type Sizer interface{ MemSize() int }

// objSize is the accounted memory of an object beyond the entry.
func objSize(o any) uint32 {
	if o == nil {
		return 0
	}
	n := 0
	switch o := o.(type) {
	case []byte:
		n = cap(o) + 24
	case Sizer:
		n = o.MemSize()
	}
	return uint32(min(n, 1<<31)) + 32 // plus its objs slot
}

// Config sets the shape of a Keyspace. The zero value is valid.
type Config struct {
	// MaxMemory caps the estimated memory of the keys, in bytes (key bytes
	// plus EntryOverhead plus objects); 0 means no cap. The default value
	// is 0.
	MaxMemory int64
	// Policy says what happens at MaxMemory. The default is AllKeysLRU.
	Policy Policy
	// Journal, if not nil, is told about every change. SetJournal
	// replaces it; server.New sets its whole chain that way (WATCH and
	// tracking, persistence, replication).
	Journal Journal
	// Room, if not nil, bounds the changes background work adds to the
	// Journal's backlog: while Room.Full, an active-expiry pass (Sweep)
	// is skipped (expired keys stay hidden from reads and go at a later
	// pass), and DeleteSlots calls Room.WaitRoom between its batches.
	Room Room
	// Databases is the number of numbered databases (SELECT 0..n-1).
	// The default value is DefaultDatabases (16).
	Databases int
	// Shards is the number of shards per database, rounded up to a power of
	// two. The default value is DefaultShards (256).
	Shards int
	// SlotIndex keeps, per database, an index from hash slot (keyslot.Of)
	// to its keys, so that CountKeysInSlot, KeysInSlot and DeleteSlot need
	// no scan (slots.go). It costs about SlotIndexOverhead bytes per key
	// (8 bytes of links, a bucket per (shard, slot) in use) and a table
	// operation per key created or removed; cluster mode turns it on. The
	// default is off.
	SlotIndex bool
	// TrackChanges keeps, per shard, which keys changed since the last
	// CollectChanges (changes.go): persistence's checkpoints read them.
	// It costs a bit per entry, 4 bytes per key changed and the bytes of
	// each key removed until the next collection, and a bit test per
	// change. The default is off.
	TrackChanges bool
}

// Defaults for the zero fields of [Config].
const (
	// DefaultDatabases is the default Config.Databases (Redis databases).
	DefaultDatabases = 16
	// DefaultShards is the default Config.Shards.
	DefaultShards = 256
)

// ErrConfig reports an invalid Config.
var ErrConfig = errors.New("keyspace: invalid config")

func (c *Config) ensureDefaults() {
	c.Databases = cmp.Or(c.Databases, DefaultDatabases)
	c.Shards = cmp.Or(c.Shards, DefaultShards)
}

// Keyspace is the set of databases. It is safe for concurrent use.
type Keyspace struct {
	seed      maphash.Seed
	dbs       []*DB
	journal   Journal
	grouper   Grouper // the journal's batching consumers (BeginGroup)
	room      Room    // nil: no bound on background changes
	maxMemory int64
	policy    Policy
	used      atomic.Int64 // estimated bytes of every entry
	evicted   atomic.Int64 // keys evicted by AllKeysLRU

	evictCursor atomic.Uint64 // the shard Evict visits next (over every database)

	// replica: the keyspace follows a primary (SetReplica).
	replica atomic.Bool

	slotIndex bool // Config.SlotIndex
	track     bool // Config.TrackChanges
}

// SetReplica switches the keyspace into replica mode (on) or back. In
// replica mode the keyspace never removes a key by itself, as a Redis
// replica does not: Lookup hides an expired key without deleting it, Sweep
// and Evict do nothing, and a new key does not evict another. Deletions
// (of expired keys too) arrive from the primary as changes.
func (ks *Keyspace) SetReplica(on bool) { ks.replica.Store(on) }

// Replica reports whether the keyspace is in replica mode.
func (ks *Keyspace) Replica() bool { return ks.replica.Load() }

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

// CanInsert reports whether a new key may be created, or an existing
// value grown: always with AllKeysLRU (room is made by eviction, see
// Evict), and under NoEviction only while the estimated memory is below
// MaxMemory. As in Redis, the command that passes the check may take the
// memory past MaxMemory by what it adds; the next one is refused.
func (ks *Keyspace) CanInsert() bool {
	return ks.maxMemory == 0 || ks.policy != NoEviction || ks.used.Load() < ks.maxMemory
}

// CanReplace reports whether cur (key's current value as Lookup returned
// it, nil when absent) may be replaced by nv: as CanInsert, except that a
// replacement whose object takes no more memory than cur's is always
// allowed. nv.Obj must be a new object: a change made to cur's object in
// place is not seen here.
func (ks *Keyspace) CanReplace(cur *Value, nv Value) bool {
	return ks.CanInsert() || (cur != nil && objSize(nv.Obj) <= objSize(cur.Obj))
}

// Evict enforces MaxMemory under AllKeysLRU: while the estimated memory
// is above it, it evicts the least recently used of a few sampled keys of
// one shard, going round the shards of every database, one shard lock at
// a time (the caller must hold none). Replace makes room for a new key in
// its own shard only; Evict is what also reclaims the memory of values
// that grew, and of keys whose shard had nothing else to evict. It
// returns the number of keys evicted; it is a no-op (one atomic load)
// below MaxMemory, without a cap, and under NoEviction.
func (ks *Keyspace) Evict() int {
	if ks.replica.Load() || ks.maxMemory == 0 || !ks.policy.evicts() || ks.used.Load() <= ks.maxMemory {
		return 0
	}
	perDB := uint64(len(ks.dbs[0].shards))
	total := uint64(len(ks.dbs)) * perDB
	n, idle := 0, uint64(0)
	// idle counts the shards visited since the last eviction: a whole
	// round without one means every shard is empty.
	for ks.used.Load() > ks.maxMemory && idle < total {
		i := ks.evictCursor.Add(1) % total
		s := &ks.dbs[i/perDB].shards[i%perDB]
		s.mu.Lock()
		if s.t.live > 0 {
			s.evictOne()
			n++
			idle = 0
		} else {
			idle++
		}
		s.mu.Unlock()
	}
	return n
}

// Audit recomputes the memory of every entry from its key and its object
// as they are now (entries), and returns it with the sum of the shards'
// figures (shards) and the keyspace's (total, Memory().Used): the three
// differ if a change escaped the accounting. It holds every shard lock
// (LockAll) meanwhile, so it is a check for tests and debugging, not for
// a busy server.
func (ks *Keyspace) Audit() (entries, shards, total int64) {
	ks.LockAll()
	defer ks.UnlockAll()
	for _, db := range ks.dbs {
		for i := range db.shards {
			s := &db.shards[i]
			for j := uint32(0); j < s.t.next; j++ {
				if e := s.t.at(j); e.meta != 0 {
					entries += int64(e.klen()) + EntryOverhead + s.t.indexOverhead()
					if o := s.t.obj(e); o != nil {
						entries += int64(objSize(o))
					}
				}
			}
			shards += s.bytes
		}
	}
	return entries, shards, ks.used.Load()
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
	ks := &Keyspace{seed: maphash.MakeSeed(), dbs: make([]*DB, cfg.Databases), journal: cfg.Journal, grouper: grouperOf(cfg.Journal), room: cfg.Room,
		maxMemory: cfg.MaxMemory, policy: cfg.Policy, slotIndex: cfg.SlotIndex, track: cfg.TrackChanges}
	for i := range ks.dbs {
		db := &DB{ks: ks, index: i, shards: make([]Shard, n), mask: uint64(n - 1)}
		if cfg.SlotIndex {
			db.slotCounts = new([keyslot.Slots]atomic.Int32)
		}
		for j := range db.shards {
			db.shards[j].db = i
			db.shards[j].index = j
			db.shards[j].journal = cfg.Journal
			db.shards[j].ks = ks
			db.shards[j].lfu = cfg.Policy == AllKeysLFU
			if cfg.TrackChanges {
				db.shards[j].chg = new(changes)
			}
			if cfg.SlotIndex {
				db.shards[j].t.sx = newSlotIndex(db.slotCounts)
			}
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

// UnlockAll releases what LockAll took (forgetting each view's object,
// as Unlock does).
func (ks *Keyspace) UnlockAll() {
	for _, db := range ks.dbs {
		for i := range db.shards {
			db.shards[i].Unlock()
		}
	}
}

// DB is one numbered database.
type DB struct {
	ks     *Keyspace
	index  int
	mask   uint64
	shards []Shard
	// slotCounts is the number of keys per hash slot, with Config.SlotIndex
	// (nil without); each shard keeps its part under its lock (slots.go).
	slotCounts *[keyslot.Slots]atomic.Int32
	// flushed: the database was flushed since the last CollectChanges
	// (with Config.TrackChanges).
	flushed atomic.Bool
}

// Index returns the database number.
func (db *DB) Index() int { return db.index }

// NumShards returns the number of shards (a power of two).
func (db *DB) NumShards() int { return len(db.shards) }

// Shard returns the shard that holds key.
func (db *DB) Shard(key []byte) *Shard {
	return &db.shards[maphash.Bytes(db.ks.seed, key)&db.mask]
}

// Hash returns key's hash, which ShardHash and the Shard methods whose
// names end in Hash take, so that a command hashes each key once.
func (ks *Keyspace) Hash(key []byte) uint64 { return maphash.Bytes(ks.seed, key) }

// ShardHash returns the shard that holds the key whose Hash is h: the
// same as Shard(key).
func (db *DB) ShardHash(h uint64) *Shard { return &db.shards[h&db.mask] }

// ShardAt returns shard i (0 <= i < NumShards), for scans in shard order.
func (db *DB) ShardAt(i int) *Shard { return &db.shards[i] }

// Shard is one lock domain of a DB: a table of entries (see table.go)
// and the view through which callers read and change one of them.
type Shard struct {
	mu sync.Mutex // guards everything below

	t       table
	view    Value // what Lookup, Peek and Range return a pointer to
	jv      Value // what the journal is shown
	bytes   int64 // estimated memory of the entries
	ks      *Keyspace
	journal Journal
	chg     *changes // with Config.TrackChanges: what changed since the last collection
	nchg    uint64   // changes told to the journal (Changes)
	db      int      // database index, for lock ordering
	index   int      // shard index within the database, for lock ordering
	samples [8]uint32
	sec     int64 // the latest now seen by Lookup or Peek, in seconds (new keys' LRU clock)
	lfu     bool  // the policy is AllKeysLFU: entries keep an access counter (access.go)

	_ [64]byte // keep neighbouring shards' locks off one cache line
}

// Changes returns how many changes of the shard's keys its journal has
// been told of: a command that holds the shard's lock can tell whether it
// changed one of them by comparing the counts before and after. (Flushes
// are not counted: they are the keyspace's.) The lock must be held.
func (s *Shard) Changes() uint64 { return s.nchg }

// account adds delta bytes to the shard's and the keyspace's figures.
// s.mu must be held.
func (s *Shard) account(delta int64) {
	if delta != 0 {
		s.bytes += delta
		s.ks.used.Add(delta)
	}
}

func (s *Shard) hash(key []byte) uint64 { return maphash.Bytes(s.ks.seed, key) }

// removeAt deletes entry idx (slot pos), with accounting and journal;
// key is the entry's key when the caller has it (nil: read from the table).
// s.mu must be held.
func (s *Shard) removeAt(idx uint32, pos int, key []byte) {
	e := s.t.at(idx)
	s.account(-s.t.size(e))
	if s.journal != nil {
		if key == nil {
			key = append([]byte(nil), s.t.key(e)...)
		}
		s.journal.Delete(s.db, key)
		s.nchg++
		if s.chg != nil {
			s.chg.removed(key)
		}
	}
	s.t.remove(idx, pos)
}

// removeEntry deletes entry idx, finding its slot by its key.
func (s *Shard) removeEntry(idx uint32) {
	key := s.t.key(s.t.at(idx))
	_, pos, _ := s.t.find(key, s.hash(key))
	s.removeAt(idx, pos, nil)
}

// makeRoom evicts up to 16 least recently used entries among samples of
// this shard until need more bytes fit under MaxMemory; force evicts one
// even without a cap (a full table). Only the locked shard is touched,
// which keeps the lock order; keys are spread evenly over shards, so
// sampling one shard approximates sampling all of them. s.mu must be held.
func (s *Shard) makeRoom(need int64, force bool) {
	ks := s.ks
	for round := 0; round < 16 && s.t.live > 0; round++ {
		if !force && (ks.maxMemory == 0 || ks.used.Load()+need <= ks.maxMemory) {
			return
		}
		force = false
		s.evictOne()
	}
}

// evictOne evicts the least recently used (under AllKeysLFU: the least
// frequently used) of up to 5 sampled entries of the shard, which must
// hold one. s.mu must be held.
func (s *Shard) evictOne() {
	cand := s.t.sample(5, s.samples[:0])
	victim := cand[0]
	lfu := s.lfu
	for _, i := range cand[1:] {
		a, b := s.t.at(i).atime(), s.t.at(victim).atime()
		if lfu && lfuCount(a, s.sec) < lfuCount(b, s.sec) || !lfu && older(a, b) {
			victim = i
		}
	}
	s.removeEntry(victim)
	s.ks.evicted.Add(1)
}

// older reports whether LRU clock a is before b, modulo 2^24 seconds.
func older(a, b uint32) bool { return a != b && (b-a)&atimeMask < 1<<23 }

// Lock takes the shard lock.
func (s *Shard) Lock() { s.mu.Lock() }

// TryLock takes the shard lock if it is free, without waiting, and
// reports whether it did: a caller holding other shards' locks may take
// one out of the lock order so.
func (s *Shard) TryLock() bool { return s.mu.TryLock() }

// Unlock releases the shard lock. It drops the view's reference to the
// object it last showed (forget), so that a value evicted, deleted or
// replaced since is not kept alive by the view.
func (s *Shard) Unlock() {
	s.forget()
	s.mu.Unlock()
}

// forget drops the view's object: a view outlives its lock only as a
// pointer nobody may use (see Lookup), and otherwise it would hold up to
// one object per shard (one evicted 1 MiB string each, say) beyond what
// MaxMemory counts. The scalars stay; ref is checked before use (holds).
// s.mu must be held.
func (s *Shard) forget() {
	if s.view.Obj != nil {
		s.view.Obj = nil
	}
}

// Order returns the shard's position in the global lock order.
func (s *Shard) Order() (db, index int) { return s.db, s.index }

// load fills the shard's view from entry idx and returns it.
func (s *Shard) load(idx uint32) *Value {
	e := s.t.at(idx)
	s.view = Value{N: e.n, M: e.m, Exp: e.exp, Obj: s.t.obj(e), Kind: e.kind(), ref: idx + 1}
	return &s.view
}

// Lookup returns the live value of key, or nil if it is absent or expired at
// now (ms); an expired entry is removed. The Value is the shard's view: it
// stays valid until the next Lookup, Peek or Range on this shard or the
// unlock, and changes made to it are kept only through Changed or Replace.
// s.mu must be held.
func (s *Shard) Lookup(key []byte, now int64) *Value {
	return s.LookupHash(key, s.hash(key), now)
}

// LookupHash is Lookup of a key whose Hash is h. s.mu must be held.
func (s *Shard) LookupHash(key []byte, h uint64, now int64) *Value {
	s.sec = now / 1000
	idx, pos, ok := s.t.lookup(key, h)
	if !ok {
		return nil
	}
	e := s.t.at(idx)
	if e.exp != 0 && now > e.exp {
		if !s.ks.replica.Load() {
			s.removeAt(idx, pos, key)
		}
		return nil
	}
	if s.lfu {
		s.touchLFU(e)
	} else {
		e.touch(s.sec)
	}
	return s.load(idx)
}

// Stored returns key's value as stored, expired or not, without
// counting an access: a replica applies its primary's stream deltas to
// the value it holds (its primary sends the expiry's deletion itself).
// s.mu must be held.
func (s *Shard) Stored(key []byte) *Value {
	idx, _, ok := s.t.lookup(key, s.hash(key))
	if !ok {
		return nil
	}
	return s.load(idx)
}

// Peek returns the live value of key like Lookup, but never removes an
// expired entry: read-only commands use it so that they write nothing.
// s.mu must be held.
func (s *Shard) Peek(key []byte, now int64) *Value {
	return s.PeekHash(key, s.hash(key), now)
}

// PeekHash is Peek of a key whose Hash is h. s.mu must be held.
func (s *Shard) PeekHash(key []byte, h uint64, now int64) *Value {
	idx, _, ok := s.t.lookup(key, h)
	if !ok {
		return nil
	}
	e := s.t.at(idx)
	if e.exp != 0 && now > e.exp {
		return nil
	}
	s.sec = now / 1000
	if s.lfu { // recency or frequency only: not a change to persist
		s.touchLFU(e)
	} else {
		e.touch(s.sec)
	}
	return s.load(idx)
}

// Usage returns the accounted memory of key (as maxmemory counts it: key
// bytes, EntryOverhead and its object), or -1 if it does not exist or has
// expired at now. s.mu must be held.
func (s *Shard) Usage(key []byte, now int64) int64 {
	return s.UsageHash(key, s.hash(key), now)
}

// UsageHash is Usage of a key whose Hash is h. s.mu must be held.
func (s *Shard) UsageHash(key []byte, h uint64, now int64) int64 {
	idx, _, ok := s.t.lookup(key, h)
	if !ok {
		return -1
	}
	e := s.t.at(idx)
	if e.exp != 0 && now > e.exp {
		return -1
	}
	return s.t.size(e)
}

// Set stores v under key, replacing any previous value. s.mu must be held.
func (s *Shard) Set(key []byte, v Value) {
	s.Replace(key, nil, v)
}

// Replace stores nv under key, where cur is key's current value as Lookup
// or Peek returned it (nil when absent or unknown): it saves a second
// lookup on hot paths. s.mu must be held.
func (s *Shard) Replace(key []byte, cur *Value, nv Value) {
	s.ReplaceHash(key, 0, cur, nv)
}

// ReplaceHash is Replace of a key whose Hash is h; h 0 means unknown (it
// is computed if needed, so a key whose hash is 0 is still stored right).
// s.mu must be held.
func (s *Shard) ReplaceHash(key []byte, h uint64, cur *Value, nv Value) {
	var idx uint32
	var old int64
	if cur != nil && cur.ref != 0 && s.holds(cur.ref-1, key) {
		idx = cur.ref - 1
		old = s.t.size(s.t.at(idx))
	} else {
		if h == 0 {
			h = s.hash(key)
		}
		i, _, ok := s.t.lookup(key, h)
		if ok {
			idx, old = i, s.t.size(s.t.at(i))
		} else {
			if s.ks.maxMemory > 0 && s.ks.policy.evicts() && !s.ks.replica.Load() {
				s.makeRoom(int64(len(key))+EntryOverhead+int64(objSize(nv.Obj)), false)
			}
			if s.t.live >= cmp.Or(s.t.limit, maxEntries) {
				s.makeRoom(0, true)
			}
			idx = s.t.insert(s.ks.seed, key, h, nv.Kind)
			s.t.at(idx).meta |= s.newAccess() << 8
		}
	}
	e := s.t.at(idx)
	if nv.Kind == KindStream {
		// A delta applies only where its object was: a stream new to
		// this key is journaled whole.
		if d, ok := nv.Obj.(DeltaValue); ok && (old == 0 || s.t.obj(e) != nv.Obj) {
			d.MarkFull()
		}
	}
	e.n, e.m, e.exp = nv.N, int64(nv.M), nv.Exp
	e.meta = e.meta&^0xff | uint32(nv.Kind)
	s.t.setObj(e, nv.Obj)
	s.account(s.t.size(e) - old)
	if cur != nil {
		*cur = nv
		cur.ref = idx + 1
	}
	s.journalPut(key, idx, nv)
}

// journalPut tells the journal that key (entry idx) now holds nv, and
// resets a stream's delta once the journal has seen it. s.mu must be
// held.
func (s *Shard) journalPut(key []byte, idx uint32, nv Value) {
	if s.journal != nil {
		s.jv = nv
		s.journal.Put(s.db, key, &s.jv)
		s.nchg++
		s.jv.Obj = nil // only valid during Put: keep no object alive
		if s.chg != nil {
			s.chg.mark(idx)
		}
	}
	if nv.Kind == KindStream {
		if d, ok := nv.Obj.(DeltaValue); ok {
			d.ResetDelta()
		}
	}
}

// holds reports whether entry idx is key's (a view's ref can be stale if
// the key was removed since it was read).
func (s *Shard) holds(idx uint32, key []byte) bool {
	if idx >= s.t.next {
		return false
	}
	e := s.t.at(idx)
	return e.meta != 0 && s.t.hasKey(e, key)
}

// Restore inserts v under key in database db without telling the journal:
// it is how persisted state is loaded at startup, before serving. It locks
// the key's shard.
func (ks *Keyspace) Restore(db int, key []byte, v Value) {
	sh := ks.dbs[db].Shard(key)
	sh.mu.Lock()
	j := sh.journal
	sh.journal = nil
	sh.Replace(key, nil, v)
	sh.journal = j
	sh.mu.Unlock()
}

// Changed records that the caller modified v, key's value as Lookup
// returned it, in place (its scalars, its expiry, or its object).
// s.mu must be held.
func (s *Shard) Changed(key []byte, v *Value) {
	// A stream's object is a pointer (comparable; a []byte is not).
	if v.Kind == KindStream && v.ref != 0 && v.Obj != nil && s.holds(v.ref-1, key) {
		if e := s.t.at(v.ref - 1); e.obj != 0 && Kind(e.meta&0xff) == v.Kind {
			if sl := s.t.objAt(e.obj - 1); sl.v == v.Obj {
				// The entry's own stream, changed in place (an entry
				// appended): only its size, scalars and expiry can
				// have moved.
				size := objSize(v.Obj)
				s.account(int64(size) - int64(sl.size))
				sl.size = size
				e.n, e.m, e.exp = v.N, int64(v.M), v.Exp
				s.journalPut(key, v.ref-1, *v)
				return
			}
		}
	}
	s.Replace(key, v, *v)
}

// Delete removes key and reports whether a live value was removed.
// s.mu must be held.
func (s *Shard) Delete(key []byte, now int64) bool {
	return s.DeleteHash(key, s.hash(key), now)
}

// DeleteHash is Delete of a key whose Hash is h. s.mu must be held.
func (s *Shard) DeleteHash(key []byte, h uint64, now int64) bool {
	idx, pos, ok := s.t.lookup(key, h)
	if !ok {
		return false
	}
	e := s.t.at(idx)
	live := e.exp == 0 || now <= e.exp
	s.removeAt(idx, pos, key)
	return live
}

// Len returns the number of entries, expired ones not yet removed included.
// s.mu must be held.
func (s *Shard) Len() int { return s.t.live }

// Range calls fn for every live entry at now (ms) until fn returns false;
// v is the shard's view (see Lookup). fn must not modify the shard.
// s.mu must be held.
func (s *Shard) Range(now int64, fn func(key string, v *Value) bool) {
	for i := uint32(0); i < s.t.next; i++ {
		e := s.t.at(i)
		if e.meta == 0 || (e.exp != 0 && now > e.exp) {
			continue
		}
		if !fn(string(s.t.key(e)), s.load(i)) {
			return
		}
	}
}

// Scan calls fn for the live entries at now (ms) in table order from
// position pos on, looking at no more than max positions (free and
// expired entries count, and the entry fn stops at), until fn returns
// false. It returns the position after the last one looked at, and end
// true when none is left after it. An entry keeps its position while it
// exists (entries never move, and positions start again from 0 only once
// the shard is empty), so calls that each start where the last stopped
// visit every entry that exists throughout exactly once (SCAN's
// guarantee). v is the shard's view (see Lookup); fn must not modify the
// shard. s.mu must be held.
func (s *Shard) Scan(now int64, pos uint32, max int, fn func(key string, v *Value) bool) (next uint32, end bool) {
	i := pos
	for looked := 0; i < s.t.next && looked < max; looked++ {
		e := s.t.at(i)
		i++
		if e.meta == 0 || (e.exp != 0 && now > e.exp) {
			continue
		}
		if !fn(string(s.t.key(e)), s.load(i-1)) {
			break
		}
	}
	return i, i >= s.t.next
}

// clear drops every entry of the shard; the caller zeroes the
// database's slot counts once every shard is cleared. s.mu must be held.
func (s *Shard) clear() {
	if s.t.sx != nil {
		s.t.sx.reset()
	}
	s.t = table{limit: s.t.limit, cur: -1, sx: s.t.sx}
	s.view, s.jv = Value{}, Value{}
	s.account(-s.bytes)
	if s.chg != nil {
		s.chg.reset()
	}
}

// Flush removes every key of db (FLUSHDB), holding all of its shard locks
// at once so that the journal sees one consistent cut; locked means the
// caller already holds them (EXEC).
func (db *DB) Flush(locked bool) {
	db.flush(locked, true)
}

// flush is Flush; journal false does not tell the Journal (RestoreFlush).
func (db *DB) flush(locked, journal bool) {
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
		db.shards[i].clear()
	}
	db.zeroSlotCounts()
	db.flushed.Store(db.ks.track)
	if journal && db.ks.journal != nil {
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
			db.shards[i].clear()
		}
		db.zeroSlotCounts()
		db.flushed.Store(ks.track)
	}
	if ks.journal != nil {
		ks.journal.DeleteAll()
	}
}

// Sweep removes up to max expired entries at now (ms), looking at no more
// than 4*max entries (continuing where the last call stopped), and returns
// how many it removed and how many it looked at. s.mu must be held.
func (s *Shard) Sweep(now int64, max int) (removed, seen int) {
	for seen < 4*max && removed < max && s.t.live > 0 {
		cand := s.t.sample(min(len(s.samples), 4*max-seen), s.samples[:0])
		if len(cand) == 0 {
			break
		}
		for _, i := range cand {
			seen++
			if e := s.t.at(i); e.meta != 0 && e.exp != 0 && now > e.exp {
				s.removeEntry(i)
				if removed++; removed >= max {
					break
				}
			}
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
		n += s.t.live
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
		for j := uint32(0); j < s.t.next; j++ {
			e := s.t.at(j)
			if e.meta == 0 || (e.exp != 0 && now > e.exp) {
				continue
			}
			st.Keys++
			if k := int(e.kind()); k < len(st.ByKind) {
				st.ByKind[k]++
			}
			if e.exp != 0 {
				st.Expires++
			}
		}
		if !locked {
			s.mu.Unlock()
		}
	}
	return st
}

// sweepYieldEvery is how many shards Sweep goes through between two
// runtime.Gosched calls.
const sweepYieldEvery = 32

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
	if ks.replica.Load() || ks.room != nil && ks.room.Full() {
		return 0
	}
	total := 0
	for _, db := range ks.dbs {
		for i := range db.shards {
			if i%sweepYieldEvery == sweepYieldEvery-1 {
				// A pass over every shard takes a few hundred µs; with
				// one P, an event loop waiting for it would wait that long.
				runtime.Gosched()
			}
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
