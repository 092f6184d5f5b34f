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
