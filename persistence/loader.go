package persistence

import (
	"errors"
	"fmt"
	"time"

	"github.com/cellserver/cellserver/keyspace"
)

// LoadStats describes a startup load.
type LoadStats struct {
	Keys     int           // live keys loaded
	Expired  int           // expired records dropped (and deleted from the store)
	Duration time.Duration // how long the load took
	// SkippedDeltas counts the stream deltas of the change log that did
	// not apply to the key as it stood (another incarnation of the key,
	// made whole again by a later record).
	SkippedDeltas int
}

// Load reads every record of store into ks, which must be empty and not
// yet serving, dropping the records already expired at nowMS (ms since the
// Unix epoch) and deleting them from the store. A record that does not
// decode, or names a database ks does not have, fails the load: starting
// with part of the state silently missing would hand out fresh limits.
//
// With a Replayer store and a keyspace that tracks changes, the base is
// read first and then the store's log is applied on top, each change
// tracked (keyspace.RestoreChange), and the expired records are noted as
// removed instead of being deleted from the store at once: the next
// checkpoint writes both.
func Load(store Store, ks *keyspace.Keyspace, nowMS int64) (LoadStats, error) {
	if r, ok := store.(Replayer); ok && ks.TracksChanges() {
		return loadReplay(r, ks, nowMS)
	}
	start := time.Now()
	var st LoadStats
	var expired []Op
	err := store.Load(func(db int, key, value []byte) error {
		if db >= ks.NumDB() {
			return fmt.Errorf("%w: key %q is in database %d, but only %d databases are configured (--databases)", ErrCorrupt, key, db, ks.NumDB())
		}
		v, err := DecodeValue(value)
		if err != nil {
			return fmt.Errorf("key %q in database %d: %w", key, db, err)
		}
		if v.Expired(nowMS) {
			st.Expired++
			expired = append(expired, Op{Kind: OpDelete, DB: db, Key: append([]byte(nil), key...)})
			return nil
		}
		ks.Restore(db, key, v)
		st.Keys++
		return nil
	})
	if err != nil {
		return st, err
	}
	for len(expired) > 0 {
		n := min(len(expired), 4096)
		if err := store.Write(expired[:n], false); err != nil {
			return st, err
		}
		expired = expired[n:]
	}
	st.Duration = time.Since(start)
	return st, nil
}

// loadReplay is Load from a Replayer into a keyspace that tracks changes.
func loadReplay(r Replayer, ks *keyspace.Keyspace, nowMS int64) (LoadStats, error) {
	start := time.Now()
	var st LoadStats
	checkDB := func(db int, key []byte) error {
		if db >= ks.NumDB() {
			return fmt.Errorf("%w: key %q is in database %d, but only %d databases are configured (--databases)", ErrCorrupt, key, db, ks.NumDB())
		}
		return nil
	}
	// A stream expired at load stays while the log is replayed: a later
	// delta of it may change its expiry (PERSIST, EXPIRE) and needs it.
	// Those still expired after the log go at the end.
	var expiredStreams []dbKey
	err := r.LoadBase(func(db int, key, value []byte) error {
		if err := checkDB(db, key); err != nil {
			return err
		}
		v, err := DecodeValue(value)
		if err != nil {
			return fmt.Errorf("key %q in database %d: %w", key, db, err)
		}
		if v.Expired(nowMS) && v.Kind != keyspace.KindStream {
			st.Expired++
			ks.RestoreChange(db, key, nil) // the next checkpoint deletes it from the store
			return nil
		}
		if v.Expired(nowMS) {
			expiredStreams = append(expiredStreams, dbKey{db, string(key)})
		}
		ks.Restore(db, key, v)
		return nil
	})
	if err != nil {
		return st, err
	}
	err = r.Replay(func(op Op) error {
		switch op.Kind {
		case OpPut:
			if err := checkDB(op.DB, op.Key); err != nil {
				return err
			}
			if IsDelta(op.Value) {
				if err := replayDelta(ks, op, nowMS, &st); err != nil {
					return fmt.Errorf("change log: key %q in database %d: %w", op.Key, op.DB, err)
				}
				return nil
			}
			v, err := DecodeValue(op.Value)
			if err != nil {
				return fmt.Errorf("change log: key %q in database %d: %w", op.Key, op.DB, err)
			}
			if v.Expired(nowMS) && v.Kind != keyspace.KindStream {
				ks.RestoreChange(op.DB, op.Key, nil)
				return nil
			}
			if v.Expired(nowMS) {
				expiredStreams = append(expiredStreams, dbKey{op.DB, string(op.Key)})
			}
			ks.RestoreChange(op.DB, op.Key, &v)
		case OpDelete:
			if err := checkDB(op.DB, op.Key); err != nil {
				return err
			}
			ks.RestoreChange(op.DB, op.Key, nil)
		case OpDeleteDB:
			if err := checkDB(op.DB, nil); err != nil {
				return err
			}
			ks.RestoreFlush(op.DB)
		case OpDeleteAll:
			ks.RestoreFlush(-1)
		}
		return nil
	})
	if err != nil {
		return st, err
	}
	for _, k := range expiredStreams {
		key := []byte(k.key)
		expired := false
		ks.RestoreApply(k.db, key, func(cur *keyspace.Value) (*keyspace.Value, error) {
			expired = cur != nil && cur.Kind == keyspace.KindStream && cur.Expired(nowMS)
			return nil, nil
		})
		if expired {
			st.Expired++
			ks.RestoreChange(k.db, key, nil)
		}
	}
	for d := 0; d < ks.NumDB(); d++ {
		st.Keys += ks.DB(d).Size(false)
	}
	st.Duration = time.Since(start)
	return st, nil
}

// replayDelta applies a logged delta (a stream's change) to the key's
// value as the base and the earlier records left it. A delta the value
// already holds (the base is a checkpoint taken after it) is skipped; so
// is one of another incarnation of the key (a stream deleted and made
// again after the checkpoint read it: a later record of the log makes
// the key whole again), which is counted (LoadStats.SkippedDeltas).
// A stream expired at load is kept while the log is replayed (a delta
// may change its expiry) and removed at the end if it is still expired.
func replayDelta(ks *keyspace.Keyspace, op Op, nowMS int64, st *LoadStats) error {
	return ks.RestoreApply(op.DB, op.Key, func(cur *keyspace.Value) (*keyspace.Value, error) {
		v, applied, err := ApplyChange(cur, op.Value)
		switch {
		case errors.Is(err, ErrNotBase):
			st.SkippedDeltas++
			return nil, nil
		case err != nil:
			return nil, err
		case !applied:
			return nil, nil
		}
		return &v, nil
	})
}

// dbKey names a key of a database.
type dbKey struct {
	db  int
	key string
}
