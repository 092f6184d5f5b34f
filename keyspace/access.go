package keyspace

import "math/rand/v2"

// Access bookkeeping: each entry keeps 24 bits about its accesses in
// entry.meta, above its Kind, as Redis keeps them in its objects' lru
// field, and nothing else (no byte is added per key). Under AllKeysLRU
// and NoEviction they hold the last access time in seconds, modulo 2^24
// (about 194 days, as Redis's LRU clock); under AllKeysLFU the minute of
// the last decay, modulo 2^16, in the high 16 bits and Redis's 8-bit
// logarithmic access counter in the low 8 (Redis's ldt and counter, with
// its default lfu-log-factor 10 and lfu-decay-time 1).
//
// An access is a Lookup or a Peek (every command that reads or writes the
// key, TOUCH among them); Inspect (OBJECT) is not one.

const (
	lfuInitVal   = 5  // Redis's LFU_INIT_VAL: a new key's counter
	lfuLogFactor = 10 // Redis's default lfu-log-factor
)

// lfuMinutes is Redis's LFUGetTimeInMinutes at sec (s since the Unix epoch).
func lfuMinutes(sec int64) uint32 { return uint32(sec/60) & 0xffff }

// lfuCount is Redis's LFUDecrAndReturn: the counter in access bits a,
// less one per minute elapsed since its last decay at sec.
func lfuCount(a uint32, sec int64) uint32 {
	ldt, counter := a>>8, a&0xff
	now := lfuMinutes(sec)
	elapsed := now - ldt
	if now < ldt {
		elapsed = 0xffff - ldt + now
	}
	if elapsed >= counter {
		return 0
	}
	return counter - elapsed
}

// lfuIncr is Redis's LFULogIncr: the counter grows by one with a
// probability that falls as it grows, so that 255 takes about a million
// accesses.
func lfuIncr(counter uint32) uint32 {
	if counter == 255 {
		return 255
	}
	base := float64(counter) - lfuInitVal
	if base < 0 {
		base = 0
	}
	if rand.Float64() < 1/(base*lfuLogFactor+1) {
		counter++
	}
	return counter
}

// newAccess returns the access bits of a key created now.
func (s *Shard) newAccess() uint32 {
	if s.lfu {
		return lfuMinutes(s.sec)<<8 | lfuInitVal
	}
	return uint32(s.sec) & atimeMask
}

// touchLFU records an access to e at s.sec under AllKeysLFU (Lookup and
// Peek call it, or entry.touch otherwise): Redis's updateLFU, decay then
// maybe increment. s.mu must be held.
func (s *Shard) touchLFU(e *entry) {
	c := lfuIncr(lfuCount(e.atime(), s.sec))
	e.meta = e.meta&0xff | (lfuMinutes(s.sec)<<8|c)<<8
}

// Access is what a key's entry records of its accesses (OBJECT IDLETIME
// and FREQ): Inspect reads it, SetAccess moves it to another key (RENAME,
// which Redis does by moving the object).
type Access struct {
	bits uint32
	lfu  bool
}

// Idle returns the seconds since the access Inspect read at now (ms), and
// false under AllKeysLFU, which does not keep the time of the last access.
func (a Access) Idle(now int64) (int64, bool) {
	if a.lfu {
		return 0, false
	}
	return int64((uint32(now/1000) - a.bits) & atimeMask), true
}

// Freq returns Redis's logarithmic access counter of the access Inspect
// read, decayed to now (ms), and false unless the policy is AllKeysLFU.
func (a Access) Freq(now int64) (int, bool) {
	if !a.lfu {
		return 0, false
	}
	return int(lfuCount(a.bits, now/1000)), true
}

// InspectHash returns the live value of key at now (ms) and what its entry
// records of its accesses, without counting this as an access (Redis's
// LOOKUP_NOTOUCH) or removing an expired entry; nil when absent. The
// Value is the shard's view, as Lookup's. s.mu must be held.
func (s *Shard) InspectHash(key []byte, h uint64, now int64) (*Value, Access) {
	idx, _, ok := s.t.lookup(key, h)
	if !ok {
		return nil, Access{}
	}
	e := s.t.at(idx)
	if e.exp != 0 && now > e.exp {
		return nil, Access{}
	}
	return s.load(idx), Access{bits: e.atime(), lfu: s.lfu}
}

// SetAccessHash makes key's entry record a (read from another key of the
// same keyspace by InspectHash), if key exists. It is not a change: the
// journal is not told. s.mu must be held.
func (s *Shard) SetAccessHash(key []byte, h uint64, a Access) {
	if a.lfu != s.lfu {
		return
	}
	if idx, _, ok := s.t.lookup(key, h); ok {
		e := s.t.at(idx)
		e.meta = e.meta&0xff | a.bits<<8
	}
}

// Positions is the size of the shard's table, live, free and expired
// entries alike: RandomDraw's range. s.mu must be held.
func (s *Shard) Positions() int {
	if s.t.live == 0 {
		return 0
	}
	return int(s.t.next)
}

// RandomDraw probes one random position of the table and returns its key
// when it holds a live entry at now (ms), else nil. A caller that weighs
// shards by Positions and retries on nil draws every live key of the
// database with the same probability. s.mu must be held.
func (s *Shard) RandomDraw(now int64) []byte {
	if s.t.live == 0 || s.t.next == 0 {
		return nil
	}
	if e := s.t.at(rand.Uint32N(s.t.next)); e.meta != 0 && (e.exp == 0 || now <= e.exp) {
		return append([]byte(nil), s.t.key(e)...)
	}
	return nil
}

// RandomKey returns a live key of the shard at now (ms), chosen at
// random, or nil when it has none. It probes random positions of the
// table, each live entry as likely as the others, and after 64 misses
// (a table mostly free or expired) walks on from the last one, so its
// work is bounded by the table's size. Expired entries are skipped, not
// removed. s.mu must be held.
func (s *Shard) RandomKey(now int64) []byte {
	if s.t.live == 0 || s.t.next == 0 {
		return nil
	}
	n := s.t.next
	var i uint32
	for range 64 {
		i = rand.Uint32N(n)
		if e := s.t.at(i); e.meta != 0 && (e.exp == 0 || now <= e.exp) {
			return append([]byte(nil), s.t.key(e)...)
		}
	}
	for range n {
		if e := s.t.at(i); e.meta != 0 && (e.exp == 0 || now <= e.exp) {
			return append([]byte(nil), s.t.key(e)...)
		}
		if i++; i == n {
			i = 0
		}
	}
	return nil
}
