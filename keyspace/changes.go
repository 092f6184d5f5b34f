package keyspace

import "encoding/binary"

// Change tracking (Config.TrackChanges) is what lets persistence write a
// checkpoint of the keys changed since the previous one, read from the
// keyspace itself, instead of every change it logged: a key written a
// thousand times between two checkpoints is stored once.
//
// Each shard keeps, under its lock:
//   - a bitmap with one bit per entry: set by the first change to the
//     entry since the last collection (a bit test on every later one);
//   - the list of the entries whose bit was set (4 bytes each);
//   - the keys removed since the last collection (their bytes and a
//     length prefix), because a removed key's entry no longer says what
//     it held.
//
// A FLUSHDB or FLUSHALL drops all of it for the shards it clears and
// marks the database flushed: its next collection reports FlushedDB and
// then every live key of the database.
//
// Only changes the Journal is told about are tracked (Restore, the
// startup load, is not): the tracking describes what the store has not
// yet been given.

// changes is one shard's tracking state.
type changes struct {
	bits  []uint64 // one bit per entry index
	list  []uint32 // entries whose bit is set, in the order first changed
	dels  []byte   // removed keys: uvarint length, then the bytes
	ndels int      // keys in dels
}

// mark records a change to entry idx.
func (c *changes) mark(idx uint32) {
	w := int(idx >> 6)
	if w >= len(c.bits) {
		c.bits = append(c.bits, make([]uint64, w+1-len(c.bits)+len(c.bits)/4)...)
	}
	bit := uint64(1) << (idx & 63)
	if c.bits[w]&bit == 0 {
		c.bits[w] |= bit
		c.list = append(c.list, idx)
	}
}

// removed records the removal of key.
func (c *changes) removed(key []byte) {
	c.dels = binary.AppendUvarint(c.dels, uint64(len(key)))
	c.dels = append(c.dels, key...)
	c.ndels++
}

// reset forgets everything (the shard was cleared, or collected whole).
func (c *changes) reset() {
	clear(c.bits)
	c.list = c.list[:0]
	c.dels = c.dels[:0]
	c.ndels = 0
	c.shrink()
}

// shrink drops buffers a burst grew large, so that they do not stay
// allocated until the next burst.
func (c *changes) shrink() {
	const keep = 1 << 16
	if cap(c.list) > keep {
		c.list = nil
	}
	if cap(c.dels) > 16*keep {
		c.dels = nil
	}
}

// bytes is the memory the tracking holds.
func (c *changes) bytes() int64 {
	return int64(8*cap(c.bits) + 4*cap(c.list) + cap(c.dels))
}

// ChangeSink receives what CollectChanges finds. Keys and values are
// valid only during the call (the sink copies what it keeps), which is
// made with the key's shard locked: a sink only records.
type ChangeSink interface {
	// FlushedDB: every key of db was removed (FLUSHDB, FLUSHALL) since
	// the previous collection; every live key of db follows.
	FlushedDB(db int)
	// Removed: key is no longer in db (unless a later Changed sets it).
	Removed(db int, key []byte)
	// Changed: key holds v in db (v may have expired: the state as it is).
	Changed(db int, key []byte, v *Value)
	// ShardDone is called after each shard's changes, with no lock held:
	// the place to write out what was recorded.
	ShardDone()
}

// TracksChanges reports whether Config.TrackChanges is on.
func (ks *Keyspace) TracksChanges() bool { return ks.track }

// CollectChanges hands sink every change made since the previous call
// (or since New) and forgets them: per database, FlushedDB then every
// live key if the database was flushed since, otherwise the keys removed
// (Removed) and then the keys set (Changed), one shard at a time, each
// under its lock (ShardDone after each). The caller holds no shard lock.
//
// Changes made while it runs are reported now or by the next call, never
// lost: a value handed over is the key's state at that moment, at least
// as new as every change the key had before the call began. Without
// Config.TrackChanges it does nothing.
func (ks *Keyspace) CollectChanges(sink ChangeSink) {
	if !ks.track {
		return
	}
	for _, db := range ks.dbs {
		all := db.flushed.Swap(false)
		if all {
			sink.FlushedDB(db.index)
		}
		for i := range db.shards {
			s := &db.shards[i]
			s.mu.Lock()
			if s.t.live > 0 || len(s.chg.list) > 0 || s.chg.ndels > 0 {
				s.collect(all, sink)
			}
			s.Unlock() // forgets the view collect loaded
			sink.ShardDone()
		}
	}
}

// collect is CollectChanges for one shard. s.mu must be held.
func (s *Shard) collect(all bool, sink ChangeSink) {
	c := s.chg
	if all {
		for i := uint32(0); i < s.t.next; i++ {
			if e := s.t.at(i); e.meta != 0 {
				sink.Changed(s.db, s.t.key(e), s.load(i))
			}
		}
		c.reset()
		return
	}
	for b := c.dels; len(b) > 0; {
		n, m := binary.Uvarint(b)
		b = b[m:]
		sink.Removed(s.db, b[:n:n])
		b = b[n:]
	}
	for _, idx := range c.list {
		c.bits[idx>>6] &^= 1 << (idx & 63)
		// A removed entry's bit stays set until now; if the entry was
		// handed to another key since, that key was changed (inserted),
		// so reporting the entry's current key is right either way. (A
		// table whose last key goes drops its chunks: idx may be past
		// its end.)
		if idx >= s.t.next {
			continue
		}
		if e := s.t.at(idx); e.meta != 0 {
			sink.Changed(s.db, s.t.key(e), s.load(idx))
		}
	}
	c.list = c.list[:0]
	c.dels = c.dels[:0]
	c.ndels = 0
	c.shrink()
}

// ChangeStats are the change tracking's figures.
type ChangeStats struct {
	Dirty   int   // entries changed since the last collection (an upper bound)
	Removed int   // keys removed since the last collection
	Bytes   int64 // memory the tracking holds
}

// Changes returns the change tracking's figures, locking one shard at a
// time.
func (ks *Keyspace) Changes() ChangeStats {
	var st ChangeStats
	if !ks.track {
		return st
	}
	for _, db := range ks.dbs {
		for i := range db.shards {
			s := &db.shards[i]
			s.mu.Lock()
			st.Dirty += len(s.chg.list)
			st.Removed += s.chg.ndels
			st.Bytes += s.chg.bytes()
			s.mu.Unlock()
		}
	}
	return st
}

// discard is the Journal RestoreChange lends a shard: the change it applies
// is tracked (a Journal is what turns tracking on) but logged nowhere,
// because it comes from the log.
type discard struct{}

func (discard) Put(int, []byte, *Value) {}
func (discard) Delete(int, []byte)      {}
func (discard) DeleteDB(int)            {}
func (discard) DeleteAll()              {}

// RestoreChange applies one change replayed from persistence's change log
// at startup (before serving): v is key's new value, nil its removal
// (noted for the next CollectChanges even if key is absent: the store may
// hold it). Unlike Restore, the change is tracked, so the next
// collection hands it to the store; like Restore, the Journal is not
// told. Without Config.TrackChanges it is Restore, or a plain removal.
func (ks *Keyspace) RestoreChange(db int, key []byte, v *Value) {
	sh := ks.dbs[db].Shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	j := sh.journal
	if sh.chg != nil {
		sh.journal = discard{}
	} else {
		sh.journal = nil
	}
	defer func() { sh.journal = j }()
	if v != nil {
		sh.Replace(key, nil, *v)
		return
	}
	if sh.chg != nil {
		sh.chg.removed(key)
	}
	if idx, pos, ok := sh.t.lookup(key, sh.hash(key)); ok {
		sh.journal = nil // noted above
		sh.removeAt(idx, pos, key)
	}
}

// RestoreApply is RestoreChange of a change that depends on key's value
// as it stands (a stream's delta): fn gets that value (nil when absent;
// an expired value is still given, since the change log holds what
// followed it) and returns the new one, or nil to leave the key as it is
// (nothing to apply), or an error, which RestoreApply returns.
func (ks *Keyspace) RestoreApply(db int, key []byte, fn func(cur *Value) (*Value, error)) error {
	sh := ks.dbs[db].Shard(key)
	sh.mu.Lock()
	var cur *Value
	if idx, _, ok := sh.t.lookup(key, sh.hash(key)); ok {
		cur = sh.load(idx)
	}
	nv, err := fn(cur)
	if nv != nil {
		v := *nv
		nv = &v // the view changes with the next lookup
	}
	sh.mu.Unlock()
	if err != nil || nv == nil {
		return err
	}
	ks.RestoreChange(db, key, nv)
	return nil
}

// RestoreFlush applies a FLUSHDB (db >= 0) or FLUSHALL (db < 0) replayed
// from the change log at startup: tracked (the next collection writes the
// range deletion), not told to the Journal.
func (ks *Keyspace) RestoreFlush(db int) {
	for _, d := range ks.dbs {
		if db < 0 || d.index == db {
			d.flush(false, false)
		}
	}
}
