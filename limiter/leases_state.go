package limiter

// Each calls fn for every lease, live or not yet pruned, in no particular
// order. Persistence uses it to encode the state.
func (ls *Leases) Each(fn func(token string, expireAt int64)) {
	for t, e := range ls.m {
		fn(t, e)
	}
}

// Put records a lease for token ending at expireAt (ns). Persistence uses
// it to decode the state.
func (ls *Leases) Put(token string, expireAt int64) {
	if ls.m == nil {
		ls.m = make(map[string]int64)
	}
	ls.m[token] = expireAt
}

// MemSize estimates the memory of the leases in bytes: per lease, the
// token's bytes plus about 48 bytes of map entry.
func (ls *Leases) MemSize() int {
	n := 48
	for t := range ls.m {
		n += len(t) + 48
	}
	return n
}

// MemSize estimates the memory of the log in bytes: LogEntryBytes per
// entry of capacity, plus the slice header and the total.
func (l *Log) MemSize() int { return 32 + cap(l.Entries)*LogEntryBytes }
