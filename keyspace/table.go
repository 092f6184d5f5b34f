package keyspace

import (
	"bytes"
	"encoding/binary"
	"hash/maphash"

	"github.com/cellserver/cellserver/keyslot"
)

// A shard's keys live in a table built for memory per key, not in a Go
// map: a map[string]*Value costs about 150 bytes per limiter key (the
// map's slot, the key's string allocation, the Value allocation) where the
// table costs about 65 (one 56-byte entry holding a short key, a 4-byte
// index slot at load 3/8..3/4).
//
//   - entries: fixed 56-byte records without pointers, in chunks of
//     chunkLen that never move (growing adds a chunk; nothing is copied,
//     so growth leaves no garbage and the garbage collector never scans
//     them). A removed entry goes on a free list threaded through koff.
//   - slots: open addressing with linear probing over a power-of-two
//     []uint32; a slot holds 8 bits of the key's hash (a tag that rejects
//     most non-matching probes without touching the entry) and the entry's
//     index plus one. 0 is empty; tombstone marks a removed slot.
//   - key bytes: a key of up to inlineKey bytes (most limiter keys) is
//     kept in its entry, so finding it touches the slot and the entry
//     only. Longer ones are packed into pages of pageSize bytes; a page whose keys are
//     all gone is released, and the pages are compacted when more than half
//     of their bytes are dead. Keys longer than bigKey bytes, and the
//     non-scalar state of some kinds (Value.Obj), live in objs.
const (
	chunkBits = 8 // 256 entries: 14336 bytes, a size class of its own
	chunkLen  = 1 << chunkBits
	// Object slots come in chunks too: growing a slice of them would copy
	// it and leave the old array (pointers, so scanned) as garbage.
	objChunkBits = 6 // 64 slots: 3 KiB, a size class of its own
	objChunkLen  = 1 << objChunkBits
	pageBits     = 14
	pageSize     = 1 << pageBits
	bigKey       = 1024
	inlineKey    = 23   // the longest key kept in its entry
	longKey      = 0xff // kb[0] of an entry whose key is not inline
	idxMask      = 1<<24 - 1
	tombstone    = idxMask // a slot's index field: removed
	maxEntries   = idxMask - 1
	bigKeyOff    = ^uint32(0) // koff of a key kept in objs
	atimeMask    = 1<<24 - 1
	minSlots     = 8
)

// entry is one key's record. meta holds the Kind in its low 8 bits and the
// last access time (seconds, modulo 2^24, as Redis's LRU clock) above.
//
// kb holds the key. A key of up to inlineKey bytes is inline: kb[0] is its
// length and kb[1:] its bytes. Otherwise kb[0] is longKey, kb[4:8] koff
// (page<<pageBits | offset, or bigKeyOff for a key kept in objs) and
// kb[8:12] the key's length. A free entry keeps the next free entry + 1
// in kb[4:8].
type entry struct {
	n    uint64
	m    int64
	exp  int64
	meta uint32 // 0: a free entry
	obj  uint32 // index+1 into objs; 0: none
	kb   [inlineKey + 1]byte
}

// klen returns the length of e's key.
func (e *entry) klen() uint32 {
	if l := e.kb[0]; l != longKey {
		return uint32(l)
	}
	return binary.LittleEndian.Uint32(e.kb[8:12])
}

// inline reports whether e's key is kept in e.
func (e *entry) inline() bool { return e.kb[0] != longKey }

func (e *entry) koff() uint32     { return binary.LittleEndian.Uint32(e.kb[4:8]) }
func (e *entry) setKoff(v uint32) { binary.LittleEndian.PutUint32(e.kb[4:8], v) }

func (e *entry) kind() Kind      { return Kind(e.meta) }
func (e *entry) atime() uint32   { return e.meta >> 8 }
func (e *entry) touch(sec int64) { e.meta = e.meta&0xff | uint32(sec)&atimeMask<<8 }

// objSlot holds what does not fit an entry's scalars.
type objSlot struct {
	v    any    // Value.Obj
	key  []byte // the key's bytes when it is longer than bigKey
	size uint32 // v's accounted bytes (see objSize)
}

type table struct {
	slots  []uint32
	live   int // entries in use
	filled int // slots not empty (live + tombstones)

	chunks []*[chunkLen]entry
	next   uint32 // entries ever handed out (the high-water mark)
	free   uint32 // first free entry + 1; 0: none

	pages     [][]byte
	pageLive  []uint32 // live key bytes per page
	freePages []uint32
	cur       int // page being filled; -1: none
	curOff    uint32
	keyBytes  int // live key bytes in pages

	objs    []*[objChunkLen]objSlot // in chunks that never move, as entries
	objFree []uint32
	nobjs   uint32 // object slots ever handed out

	limit       int    // most live entries (maxEntries; lowered by tests)
	cursor      uint32 // where the next sweep or eviction sample starts
	compactions int    // page compactions so far (for tests)

	sx *slotIndex // the slot index (slots.go); nil without Config.SlotIndex
}

func (t *table) at(i uint32) *entry { return &t.chunks[i>>chunkBits][i&(chunkLen-1)] }

// objAt returns object slot i (an entry's obj - 1).
func (t *table) objAt(i uint32) *objSlot { return &t.objs[i>>objChunkBits][i&(objChunkLen-1)] }

// key returns e's key bytes (valid until the table changes).
func (t *table) key(e *entry) []byte {
	if l := e.kb[0]; l != longKey {
		return e.kb[1 : 1+l : 1+l]
	}
	koff, klen := e.koff(), e.klen()
	if koff == bigKeyOff {
		return t.objAt(e.obj - 1).key
	}
	p := koff >> pageBits
	off := koff & (pageSize - 1)
	return t.pages[p][off : off+klen : off+klen]
}

// hasKey reports whether e (in use) holds key.
func (t *table) hasKey(e *entry, key []byte) bool {
	if l := e.kb[0]; l != longKey {
		return int(l) == len(key) && string(e.kb[1:1+l]) == string(key)
	}
	return int(e.klen()) == len(key) && bytes.Equal(t.key(e), key)
}

func slotTag(h uint64) uint32 { return uint32(h>>24) & 0xff << 24 }

func slotPos(h uint64) uint64 { return h >> 32 }

// find returns key's entry index and slot position, or found false and the
// slot where key would be inserted (the first tombstone on its probe path,
// else the empty slot that ended it). t.slots must not be empty.
func (t *table) find(key []byte, h uint64) (idx uint32, pos int, found bool) {
	mask := uint64(len(t.slots) - 1)
	tag := slotTag(h)
	ins := -1
	for i := slotPos(h) & mask; ; i = (i + 1) & mask {
		s := t.slots[i]
		switch {
		case s == 0:
			if ins < 0 {
				ins = int(i)
			}
			return 0, ins, false
		case s&idxMask == tombstone:
			if ins < 0 {
				ins = int(i)
			}
		case s&^idxMask == tag:
			if t.hasKey(t.at(s&idxMask-1), key) {
				return s&idxMask - 1, int(i), true
			}
		}
	}
}

// lookup returns key's entry index and slot position.
func (t *table) lookup(key []byte, h uint64) (idx uint32, pos int, found bool) {
	if t.live == 0 {
		return 0, 0, false
	}
	return t.find(key, h)
}

// insert adds a new entry for key (which must be absent) with kind and
// returns its index. t.limit must leave room (the caller evicts first).
func (t *table) insert(seed maphash.Seed, key []byte, h uint64, kind Kind) uint32 {
	if (t.filled+1)*4 > len(t.slots)*3 {
		t.rehash(seed)
	}
	_, pos, _ := t.find(key, h)
	idx := t.newEntry()
	e := t.at(idx)
	*e = entry{meta: uint32(kind)}
	t.storeKey(e, key)
	if t.slots[pos] == 0 {
		t.filled++
	}
	t.slots[pos] = slotTag(h) | (idx + 1)
	t.live++
	if t.sx != nil {
		t.sx.add(idx, keyslot.Of(key))
	}
	return idx
}

// rehash resizes the slots for one more entry: doubled when more than
// half of them would be live, else the same size without tombstones.
func (t *table) rehash(seed maphash.Seed) {
	n := max(len(t.slots), minSlots)
	for (t.live+1)*2 > n {
		n *= 2
	}
	t.slots = make([]uint32, n)
	t.filled = 0
	mask := uint64(n - 1)
	for i := uint32(0); i < t.next; i++ {
		e := t.at(i)
		if e.meta == 0 {
			continue
		}
		h := maphash.Bytes(seed, t.key(e))
		j := slotPos(h) & mask
		for t.slots[j] != 0 {
			j = (j + 1) & mask
		}
		t.slots[j] = slotTag(h) | (i + 1)
		t.filled++
	}
}

func (t *table) newEntry() uint32 {
	if t.free != 0 {
		idx := t.free - 1
		t.free = t.at(idx).koff()
		return idx
	}
	idx := t.next
	if int(idx>>chunkBits) == len(t.chunks) {
		t.chunks = append(t.chunks, new([chunkLen]entry))
	}
	t.next++
	return idx
}

// remove frees entry idx, whose slot is at pos.
func (t *table) remove(idx uint32, pos int) {
	e := t.at(idx)
	if t.sx != nil {
		t.sx.remove(idx, keyslot.Of(t.key(e)))
	}
	t.releaseKey(e)
	if e.obj != 0 {
		*t.objAt(e.obj - 1) = objSlot{}
		t.objFree = append(t.objFree, e.obj-1)
	}
	*e = entry{}
	e.setKoff(t.free)
	t.free = idx + 1
	t.live--
	mask := len(t.slots) - 1
	if t.slots[(pos+1)&mask] == 0 {
		t.slots[pos] = 0 // the end of a probe run needs no tombstone
		t.filled--
	} else {
		t.slots[pos] = tombstone
	}
	if t.live == 0 {
		*t = table{limit: t.limit, cur: -1, compactions: t.compactions, sx: t.sx} // drop every chunk, page and slot
		if t.sx != nil {
			t.sx.reset() // its lists are empty: this drops the links
		}
		return
	}
	if held := (len(t.pages) - len(t.freePages)) * pageSize; held > 4*pageSize && t.keyBytes < held/2 {
		t.compactPages()
	}
}

// storeKey copies key into e (a short key), a page, or objs (a long key),
// and sets e.kb.
func (t *table) storeKey(e *entry, key []byte) {
	if len(key) <= inlineKey {
		e.kb[0] = byte(len(key))
		copy(e.kb[1:], key)
		return
	}
	e.kb[0] = longKey
	binary.LittleEndian.PutUint32(e.kb[8:12], uint32(len(key)))
	if len(key) > bigKey {
		e.setKoff(bigKeyOff)
		t.objSlotOf(e).key = append([]byte(nil), key...)
		return
	}
	if t.pages == nil {
		t.cur = -1
	}
	if t.cur < 0 || int(t.curOff)+len(key) > pageSize {
		t.newPage()
	}
	copy(t.pages[t.cur][t.curOff:], key)
	e.setKoff(uint32(t.cur)<<pageBits | t.curOff)
	t.curOff += uint32(len(key))
	t.pageLive[t.cur] += uint32(len(key))
	t.keyBytes += len(key)
}

func (t *table) newPage() {
	if n := len(t.freePages); n > 0 {
		t.cur = int(t.freePages[n-1])
		t.freePages = t.freePages[:n-1]
		t.pages[t.cur] = make([]byte, pageSize)
	} else {
		t.cur = len(t.pages)
		t.pages = append(t.pages, make([]byte, pageSize))
		t.pageLive = append(t.pageLive, 0)
	}
	t.curOff = 0
}

// releaseKey gives e's key bytes back; a page left without live keys is
// released at once.
func (t *table) releaseKey(e *entry) {
	if e.inline() {
		return
	}
	if e.koff() == bigKeyOff {
		t.objAt(e.obj - 1).key = nil
		return
	}
	p := int(e.koff() >> pageBits)
	t.pageLive[p] -= e.klen()
	t.keyBytes -= int(e.klen())
	if t.pageLive[p] == 0 {
		t.pages[p] = nil
		t.freePages = append(t.freePages, uint32(p))
		if p == t.cur {
			t.cur = -1
		}
	}
}

// compactPages copies every live key into fresh pages: remove calls it
// once more than half of the pages' bytes are dead.
func (t *table) compactPages() {
	t.compactions++
	old := t.pages
	t.pages, t.pageLive, t.freePages, t.cur, t.keyBytes = nil, nil, nil, -1, 0
	for i := uint32(0); i < t.next; i++ {
		e := t.at(i)
		if e.meta == 0 || e.inline() || e.koff() == bigKeyOff {
			continue
		}
		koff, klen := e.koff(), e.klen()
		off := koff & (pageSize - 1)
		t.storeKey(e, old[koff>>pageBits][off:off+klen])
	}
}

// objSlotOf returns e's objs slot, giving it one if it has none.
func (t *table) objSlotOf(e *entry) *objSlot {
	if e.obj == 0 {
		e.obj = t.objSlotIndex()
	}
	return t.objAt(e.obj - 1)
}

func (t *table) objSlotIndex() uint32 {
	if n := len(t.objFree); n > 0 {
		i := t.objFree[n-1]
		t.objFree = t.objFree[:n-1]
		return i + 1
	}
	i := t.nobjs
	if int(i>>objChunkBits) == len(t.objs) {
		t.objs = append(t.objs, new([objChunkLen]objSlot))
	}
	t.nobjs++
	return i + 1
}

// setObj stores o as e's object with its accounted size; nil removes it.
func (t *table) setObj(e *entry, o any) {
	switch {
	case o != nil:
		s := t.objSlotOf(e)
		s.v, s.size = o, objSize(o)
	case e.obj == 0:
	case !e.inline() && e.koff() == bigKeyOff: // the slot keeps the key
		s := t.objAt(e.obj - 1)
		s.v, s.size = nil, 0
	default:
		*t.objAt(e.obj - 1) = objSlot{}
		t.objFree = append(t.objFree, e.obj-1)
		e.obj = 0
	}
}

// obj returns e's object (nil if none).
func (t *table) obj(e *entry) any {
	if e.obj == 0 {
		return nil
	}
	return t.objAt(e.obj - 1).v
}

// size is the accounted memory of e: its key, EntryOverhead (plus
// SlotIndexOverhead with the slot index) and its object.
func (t *table) size(e *entry) int64 {
	n := int64(e.klen()) + EntryOverhead + t.indexOverhead()
	if e.obj != 0 {
		n += int64(t.objAt(e.obj - 1).size)
	}
	return n
}

// indexOverhead is what the slot index adds to each entry's accounted
// memory.
func (t *table) indexOverhead() int64 {
	if t.sx != nil {
		return SlotIndexOverhead
	}
	return 0
}

// sample returns up to n live entry indexes starting at the rotating
// cursor, for eviction and sweeping.
func (t *table) sample(n int, out []uint32) []uint32 {
	if t.next == 0 {
		return out
	}
	for looked := uint32(0); looked < t.next && len(out) < n; looked++ {
		if t.cursor >= t.next {
			t.cursor = 0
		}
		i := t.cursor
		t.cursor++
		if t.at(i).meta != 0 {
			out = append(out, i)
		}
	}
	return out
}
