package limiter

// Each calls fn for every lease, live or not yet pruned, in increasing
// token order. Persistence uses it to encode the state.
func (ls *Leases) Each(fn func(token string, expireAt int64)) {
	for i, e := range ls.ents {
		fn(string(ls.token(i)), e.exp)
	}
}

// Put records a lease for token ending at expireAt (ns), replacing
// token's lease if it has one. Persistence uses it to decode the state;
// putting tokens in increasing order costs O(1) each.
func (ls *Leases) Put(token string, expireAt int64) {
	tok := []byte(token)
	if i, ok := ls.find(tok); ok {
		ls.ents[i].exp = expireAt
	} else {
		ls.insert(i, tok, expireAt)
	}
}

// MemSize estimates the memory of the leases in bytes: the Leases itself
// (two slice headers and the first arrays) plus the capacity of its
// entries and token bytes when they have moved to the heap.
func (ls *Leases) MemSize() int {
	n := leasesBytes
	if cap(ls.ents) > 0 && &ls.ents[:1][0] != &ls.ent0[0] {
		n += cap(ls.ents) * leaseBytes
	}
	if cap(ls.toks) > 0 && &ls.toks[:1][0] != &ls.tok0[0] {
		n += cap(ls.toks)
	}
	return n
}

// leasesBytes is the size of a Leases on 64-bit machines.
const leasesBytes = 80

// MemSize estimates the memory of the log in bytes: LogEntryBytes per
// entry of capacity, plus the slice header and the total.
func (l *Log) MemSize() int { return 32 + cap(l.Entries)*LogEntryBytes }
