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
// (two slice headers) plus the capacity of its entries and token bytes.
func (ls *Leases) MemSize() int {
	return 48 + cap(ls.ents)*leaseBytes + cap(ls.toks)
}

// MemSize estimates the memory of the log in bytes: LogEntryBytes per
// entry of capacity, plus the slice header and the total.
func (l *Log) MemSize() int { return 32 + cap(l.Entries)*LogEntryBytes }
