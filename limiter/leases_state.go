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
const leasesBytes = 104

// MemSize estimates the memory of the log in bytes: LogEntryBytes per
// entry of capacity, plus the slice header and the total.
func (l *Log) MemSize() int {
	n := 40 + cap(l.Entries)*LogEntryBytes
	if l.Res != nil {
		n += l.Res.MemSize()
	}
	return n
}

// PackedTokenLen is the longest token that a packed Leases holds.
const PackedTokenLen = 7

// Pack returns the compact form of ls when it holds exactly one lease and
// that lease's token has at most PackedTokenLen bytes: the token with its
// length (never 0) and the lease's end in ns. A store can keep those two
// integers instead of the Leases, and Unpack gives the Leases back. ok is
// false for any other ls.
func (ls *Leases) Pack() (tok uint64, exp int64, ok bool) {
	if len(ls.ents) != 1 || ls.ents[0].end > PackedTokenLen {
		return 0, 0, false
	}
	t := ls.toks[:ls.ents[0].end]
	tok = uint64(len(t)) + 1
	for i, b := range t {
		tok |= uint64(b) << (8 * (i + 1))
	}
	return tok, ls.ents[0].exp, true
}

// Unpack sets ls to the leases that Pack described: none when tok is 0,
// otherwise the one lease of tok's token ending at exp. ls must not be
// shared: it is reset in place, and its storage is reused.
func (ls *Leases) Unpack(tok uint64, exp int64) {
	ls.ents, ls.toks = ls.ent0[:0], ls.tok0[:0]
	if tok == 0 {
		return
	}
	n := min(max(int(tok&0xff)-1, 0), PackedTokenLen)
	for i := range n {
		ls.toks = append(ls.toks, byte(tok>>(8*(i+1))))
	}
	ls.ents = append(ls.ents, lease{exp: exp, end: n})
}

// Clone returns a copy of ls that shares no memory with it.
func (ls *Leases) Clone() *Leases {
	c := new(Leases)
	for i, e := range ls.ents {
		c.insert(i, ls.token(i), e.exp)
	}
	return c
}
