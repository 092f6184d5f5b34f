package persistence

import (
	"fmt"
	"time"

	"github.com/cellserver/cellserver/keyspace"
)

// LoadStats describes a startup load.
type LoadStats struct {
	Keys     int           // live keys loaded
	Expired  int           // expired records dropped (and deleted from the store)
	Duration time.Duration // how long the load took
}

// Load reads every record of store into ks, which must be empty and not
// yet serving, dropping the records already expired at nowMS (ms since the
// Unix epoch) and deleting them from the store. A record that does not
// decode, or names a database ks does not have, fails the load: starting
// with part of the state silently missing would hand out fresh limits.
func Load(store Store, ks *keyspace.Keyspace, nowMS int64) (LoadStats, error) {
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
