package stream

import (
	"encoding/binary"
	"math/rand/v2"
	"slices"
	"sort"
)

// Stream is one stream key's value. The zero value is not usable: New.
//
// The fields every Append reads or writes come first, so that an entry
// (an audit entry on a busy server, say) touches few cache lines.
type Stream struct {
	length       uint64 // live entries
	lastID       ID
	entriesAdded uint64
	mem          int    // the entries' estimated memory (MemSize without the groups)
	ver          uint64 // operations applied since the incarnation began
	full         bool   // the next journal write must be the whole value
	fresh        bool   // new to its key since it was last journaled (MarkFull)
	// recording: a journal consumer has asked for a delta (Delta), so
	// the operations' payloads are appended to delta; off in a new,
	// decoded or cloned stream.
	recording bool
	// namedNode is a node whose master entry's names are named's
	// (AppendNamedSized): entries appended to it with those names are not
	// compared with the master's again.
	namedNode *node
	named     *Names
	// nodes are the entries' nodes in ID order (each node's IDs are
	// below the next node's master ID): a node is found by binary search.
	nodes []*node
	cg    groups // consumer groups (groups.go)
	delta []byte // operations since the last ResetDelta; nil with full set
	inc   uint64 // incarnation (see the package doc)

	maxDeletedID ID
	// scratch holds the fields handed to Range's callback.
	scratch [][]byte
	// spare is the data buffer of a node trim removed, kept (and counted
	// in mem) for the next new node: a stream trimmed as it grows, as an
	// audit stream is, seldom allocates a node buffer once it is full
	// (only for a node larger than the spare).
	spare []byte
}

// The entries' delta operations (codes below firstGroupOp).
const (
	opAppend byte = 1 + iota // id, count of strings, the strings
	opTrim                   // flags (1 by ID, 2 approx), maxlen, min ID, limit
	opDelete                 // id
	opSetID                  // last ID, entries added, max deleted ID
)

// MaxEntryBytes bounds the total length of one entry's field names and
// values, as Redis's STREAM_LISTPACK_MAX_SIZE does (XADD's "Elements are
// too large to be stored").
const MaxEntryBytes = 1 << 30

// Estimated memory of a stream and of a node beyond their entries' bytes.
const (
	streamOverhead = 128
	nodeOverhead   = 96
)

// A node is one of Redis's listpack nodes. Its data holds the master
// entry's field names (each length-prefixed), then one record per entry
// ever added to the node, deleted ones included:
//
//	flags     1 byte: flagDeleted, flagSameFields (Redis's values)
//	ms        uvarint: the ID's ms minus the master's
//	seq       uvarint: the ID's seq minus the master's when ms is 0, else the seq
//	[n]       uvarint: the number of name/value pairs, without flagSameFields
//	strings   length-prefixed: the values (flagSameFields), else names and values
type node struct {
	master  ID
	last    ID // the last record's ID, deleted or not
	data    []byte
	start   int // offset of the first record in data
	nmf     int // the master entry's field count
	lpBytes int // the bytes Redis's listpack would have
	live    int // Redis's master entry "count"
	deleted int // Redis's master entry "deleted"
}

const (
	flagDeleted    = 1
	flagSameFields = 2
)

// New returns an empty stream with a new incarnation; its first journal
// write is the whole value (Delta's ok is false).
func New() *Stream {
	return &Stream{inc: rand.Uint64(), full: true, mem: streamOverhead}
}

// Len returns the number of live entries (XLEN).
func (s *Stream) Len() uint64 { return s.length }

// LastID is the greatest ID ever added (or set by SetID).
func (s *Stream) LastID() ID { return s.lastID }

// MaxDeletedID is the greatest ID deleted by XDEL (as in Redis 7.0, trimming
// does not move it).
func (s *Stream) MaxDeletedID() ID { return s.maxDeletedID }

// EntriesAdded counts every entry ever added (XINFO's entries-added).
func (s *Stream) EntriesAdded() uint64 { return s.entriesAdded }

// FirstID returns the first live entry's ID (0-0, false when empty).
func (s *Stream) FirstID() (ID, bool) {
	for _, n := range s.nodes {
		if n.live == 0 {
			continue
		}
		var it recIter
		for it.init(n); it.next(); {
			if it.flags&flagDeleted == 0 {
				return it.id, true
			}
		}
	}
	return ID{}, false
}

// LastEntryID returns the last live entry's ID (0-0, false when empty).
func (s *Stream) LastEntryID() (ID, bool) {
	for i := len(s.nodes) - 1; i >= 0; i-- {
		n := s.nodes[i]
		if n.live == 0 {
			continue
		}
		var last ID
		var it recIter
		for it.init(n); it.next(); {
			if it.flags&flagDeleted == 0 {
				last = it.id
			}
		}
		return last, true
	}
	return ID{}, false
}

// Append adds an entry; id must be greater than LastID (the caller checks,
// Append panics otherwise) and fields must hold an even number (>= 2) of
// names and values. The bytes are copied.
func (s *Stream) Append(id ID, fields [][]byte) {
	if len(fields) < 2 || len(fields)%2 != 0 {
		panic("stream: Append with odd fields")
	}
	s.append(id, nil, fields, -1)
}

// Names is a list of field names fixed for the program's life, for
// AppendNamedSized. NewNames makes one.
type Names struct {
	list       [][]byte
	total, enc int // the names' bytes, and their length-prefixed encoding's
}

// NewNames returns the Names of names (at least one; copied).
func NewNames(names ...string) *Names {
	if len(names) == 0 {
		panic("stream: NewNames of no name")
	}
	n := &Names{list: make([][]byte, len(names))}
	for i, s := range names {
		n.list[i] = []byte(s)
		n.total += len(s)
		n.enc += uvarintLen(uint64(len(s))) + len(s)
	}
	return n
}

// AppendNamedSized is Append of the entry whose field names are names
// and whose values are values (one per name, else it panics), lp being
// the sum over the values of LPSize (LPIntSize of a value written as an
// integer's decimal form, which is the same), as Redis's node bounds
// count them. The names are compared with a node's master entry once per
// node rather than once per entry, and counted once per program; the
// caller counts the values, sparing the parse of those it formatted from
// integers.
func (s *Stream) AppendNamedSized(id ID, names *Names, values [][]byte, lp int) {
	if len(values) != len(names.list) || lp < 0 {
		panic("stream: AppendNamedSized with a value count unlike the names', or a negative size")
	}
	s.append(id, names, values, lp)
}

// append is Append (names nil: fields holds names and values
// interleaved; lpv -1: the values' listpack bytes are counted here) and
// AppendNamedSized (fields holds the values of names, lpv their listpack
// bytes).
func (s *Stream) append(id ID, names *Names, fields [][]byte, lpv int) {
	if !s.lastID.Less(id) {
		panic("stream: Append out of order")
	}
	// The field names and values: name i is nl[n0+i*step], value i
	// vl[v0+i*step].
	nl, vl, n0, v0, step := fields, fields, 0, 1, 2
	if names != nil {
		nl, n0, v0, step = names.list, 0, 0, 1
	}
	numFields := (len(fields) + step - 1) / step
	// The strings' bytes, and their length-prefixed encoding's: all of
	// them, the values'.
	total, enc, encValues := 0, 0, 0
	for i := v0; i < len(vl); i += step {
		f := vl[i]
		total += len(f)
		encValues += uvarintLen(uint64(len(f))) + len(f)
	}
	if names != nil {
		total += names.total
		enc = encValues + names.enc
	} else {
		for i := 0; i < len(nl); i += 2 {
			f := nl[i]
			total += len(f)
			enc += uvarintLen(uint64(len(f))) + len(f)
		}
		enc += encValues
	}
	if s.op(opAppend) {
		s.delta = slices.Grow(s.delta, 2*binary.MaxVarintLen64+uvarintLen(uint64(2*numFields))+enc)
		s.delta = appendID(s.delta, id)
		s.delta = appendUvarint(s.delta, uint64(2*numFields))
		s.delta = putPairs(s.delta, nl, vl, n0, v0, step)
	}

	// streamAppendItem: a new node when the tail's listpack plus the
	// entry's raw bytes would reach the node's bytes, or when the tail
	// holds max entries, live and deleted.
	// After XSETID set the last ID below deleted entries of the tail
	// node (Redis checks it against the live ones only), the entry
	// cannot follow them in order: trailing nodes left with deleted
	// entries only go, and a tail holding live entries takes no more
	// (where Redis appends to its listpack out of order), so that IDs
	// stay sorted within and across nodes.
	for k := len(s.nodes); k > 0 && s.nodes[k-1].live == 0 && !s.nodes[k-1].last.Less(id); k-- {
		s.mem -= nodeOverhead + cap(s.nodes[k-1].data)
		s.forgetNode(s.nodes[k-1])
		s.nodes[k-1] = nil
		s.nodes = s.nodes[:k-1]
	}
	var n *node
	size := 0 // the closed tail's data bytes: the new node's likely size
	if k := len(s.nodes); k > 0 {
		n = s.nodes[k-1]
		if n.lpBytes+total >= NodeMaxBytes || n.live+n.deleted >= NodeMaxEntries || !n.last.Less(id) {
			s.shrink(n)
			size = len(n.data)
			n = nil
		}
	}
	same, oldCap := true, 0
	if n != nil {
		oldCap = cap(n.data)
	}
	if n == nil {
		n = &node{master: id, lpBytes: 7, nmf: numFields}
		n.lpBytes += lpIntSize(1) + lpIntSize(0) + lpIntSize(int64(numFields))
		// A node's data is allocated once, rather than grown from
		// small by doubling: at the size of the node before it when
		// that is not more than a full node's bytes (entries alike
		// fill nodes alike), and a sixteenth more, so that a node a
		// little larger fits without growing; shrink gives it its
		// exact size when it closes wasting more than an eighth.
		// Trim's spare buffer (keepSpare) is taken when it holds that
		// size.
		if size > NodeMaxBytes || size < enc {
			size = enc
		}
		if sp := s.spare; sp != nil && cap(sp) >= size {
			n.data = sp[:0]
			s.spare = nil
			s.mem -= cap(sp)
		} else {
			n.data = make([]byte, 0, size+size/16)
		}
		if names != nil {
			s.namedNode, s.named = n, names
		}
		for i := n0; i < len(nl); i += step {
			n.data = appendBytes(n.data, nl[i])
			n.lpBytes += lpStringSize(nl[i])
		}
		n.lpBytes += lpIntSize(0)
		n.start = len(n.data)
		s.nodes = append(s.nodes, n)
		s.mem += nodeOverhead
	} else if names != nil && n == s.namedNode && names == s.named {
		same = true
	} else {
		same = numFields == n.nmf && sameNames(n.data[:n.start], nl, n0, step)
		if same && names != nil {
			s.namedNode, s.named = n, names
		}
	}
	flags := byte(0)
	if same {
		flags = flagSameFields
	}
	dms, dseq := id.Ms-n.master.Ms, id.Seq-n.master.Seq
	seq := id.Seq
	if dms == 0 {
		seq = dseq
	}
	lpCount := int64(numFields + 3)
	n.lpBytes += lpIntSize(int64(flags)) + lpIntSize(int64(dms)) + lpIntSize(int64(dseq))
	if lpv < 0 { // Append: the values' listpack bytes, counted here
		lpv = 0
		for i := v0; i < len(vl); i += step {
			lpv += lpStringSize(vl[i])
		}
	}
	n.lpBytes += lpv
	if same {
		n.data = slices.Grow(n.data, 1+uvarintLen(dms)+uvarintLen(seq)+encValues)
		n.data = append(n.data, flags)
		n.data = appendUvarint(n.data, dms)
		n.data = appendUvarint(n.data, seq)
		n.data = putStrings(n.data, vl, v0, step)
	} else {
		n.data = slices.Grow(n.data, 1+uvarintLen(dms)+uvarintLen(seq)+uvarintLen(uint64(numFields))+enc)
		n.data = append(n.data, flags)
		n.data = appendUvarint(n.data, dms)
		n.data = appendUvarint(n.data, seq)
		n.data = appendUvarint(n.data, uint64(numFields))
		n.lpBytes += lpIntSize(int64(numFields))
		lpCount += int64(numFields + 1)
		n.data = putPairs(n.data, nl, vl, n0, v0, step)
		for i := range numFields {
			n.lpBytes += lpStringSize(nl[n0+i*step])
		}
	}
	n.lpBytes += lpIntSize(lpCount)
	s.mem += cap(n.data) - oldCap
	n.live++
	n.last = id
	s.length++
	s.entriesAdded++
	s.lastID = id
}

// putPairs appends the names and values nl[n0+i*step], vl[v0+i*step] in
// turn, length-prefixed (appendBytes).
func putPairs(dst []byte, nl, vl [][]byte, n0, v0, step int) []byte {
	for i := v0; i < len(vl); i += step {
		dst = appendBytes(dst, nl[n0+i-v0])
		dst = appendBytes(dst, vl[i])
	}
	return dst
}

// sameNames reports whether the names nl[from], nl[from+step], ... are
// the master entry's, names its encoding (the node's data up to its first
// record): they are compared in place, a name's length prefix one byte
// when under 128.
func sameNames(names []byte, nl [][]byte, from, step int) bool {
	for i := from; i < len(nl); i += step {
		f := nl[i]
		if l := len(f); l < 0x80 {
			if len(names) <= l || names[0] != byte(l) || string(names[1:1+l]) != string(f) {
				return false
			}
			names = names[1+l:]
			continue
		}
		r := reader{b: names}
		if string(r.bytes()) != string(f) || r.err != nil {
			return false
		}
		names = r.b
	}
	return len(names) == 0
}

// putStrings appends fields[from], fields[from+step], ... to dst,
// length-prefixed (appendBytes): in place, without append's checks, when
// a string under 128 bytes fits dst's capacity (the caller made room).
func putStrings(dst []byte, fields [][]byte, from, step int) []byte {
	for i := from; i < len(fields); i += step {
		f := fields[i]
		if l, o := len(f), len(dst); l < 0x80 && cap(dst)-o > l {
			dst = dst[:o+1+l]
			dst[o] = byte(l)
			copy(dst[o+1:], f)
			continue
		}
		dst = appendBytes(dst, f)
	}
	return dst
}

// uvarintLen is the bytes of v's uvarint.
func uvarintLen(v uint64) int {
	n := 1
	for ; v >= 0x80; v >>= 7 {
		n++
	}
	return n
}

// shrink gives a node that takes no more entries its exact size (Redis's
// lpShrinkToFit) when it wastes more than an eighth of its buffer.
func (s *Stream) shrink(n *node) {
	if c := cap(n.data); c-len(n.data) > c/8 {
		n.data = exactCopy(n.data)
		s.mem += cap(n.data) - c
	}
}

// exactCopy returns a copy of b with the capacity the allocator gives
// its length (its size class, which MemSize counts).
func exactCopy(b []byte) []byte { return append([]byte(nil), b...) }

// Trim removes entries as a says and returns how many (Redis's
// streamTrim).
//
// A trim that removes nothing records no operation, so that a command
// that changes nothing leaves no operation for the journal to miss.
func (s *Stream) Trim(a TrimArgs) int64 {
	deleted := s.trim(a)
	if deleted > 0 && s.op(opTrim) {
		var f byte
		if a.ByID {
			f |= 1
		}
		if a.Approx {
			f |= 2
		}
		s.delta = append(s.delta, f)
		s.delta = appendInt64(s.delta, a.MaxLen)
		s.delta = appendID(s.delta, a.MinID)
		s.delta = appendInt64(s.delta, a.Limit)
	}
	return deleted
}

func (s *Stream) trim(a TrimArgs) int64 {
	var deleted int64
	gone := 0 // whole nodes removed from the front
	for _, n := range s.nodes {
		if !a.ByID && int64(s.length) <= a.MaxLen {
			break
		}
		entries := int64(n.live)
		if a.Limit != 0 && deleted+entries > a.Limit {
			break
		}
		var remove bool
		if a.ByID {
			remove = n.last.Less(a.MinID)
		} else {
			remove = int64(s.length)-entries >= a.MaxLen
		}
		if remove {
			s.mem -= nodeOverhead + cap(n.data)
			s.forgetNode(n)
			s.keepSpare(n.data)
			s.length -= uint64(entries)
			deleted += entries
			gone++
			continue
		}
		if a.Approx {
			break
		}
		// Mark entries deleted from the node's start until the
		// threshold.
		var it recIter
		for it.init(n); it.next(); {
			var stop bool
			if a.ByID {
				stop = !it.id.Less(a.MinID)
			} else {
				stop = int64(s.length) <= a.MaxLen
			}
			if stop {
				break
			}
			if it.flags&flagDeleted == 0 {
				n.data[it.off] |= flagDeleted
				n.live--
				n.deleted++
				s.length--
				deleted++
			}
		}
		break
	}
	if gone > 0 {
		clear(s.nodes[:gone])
		s.nodes = s.nodes[gone:]
	}
	return deleted
}

// forgetNode drops the stream's references to n, a node removed, so
// that they do not keep it alive.
func (s *Stream) forgetNode(n *node) {
	if s.namedNode == n {
		s.namedNode, s.named = nil, nil
	}
}

// keepSpare keeps data, a removed node's buffer, as the stream's spare
// (counted in mem) when it is larger than the spare held and not more
// than twice a full node's bytes.
func (s *Stream) keepSpare(data []byte) {
	if c := cap(data); c > cap(s.spare) && c <= 2*NodeMaxBytes {
		s.mem += c - cap(s.spare)
		s.spare = data[:0]
	}
}

// Delete removes the entry id and reports whether it was live (XDEL); it
// raises MaxDeletedID to id when it was.
//
// Deleting an entry that is not live records no operation.
func (s *Stream) Delete(id ID) bool {
	if !s.delete(id) {
		return false
	}
	if s.op(opDelete) {
		s.delta = appendID(s.delta, id)
	}
	return true
}

func (s *Stream) delete(id ID) bool {
	i := s.nodeFor(id)
	if i < 0 {
		return false
	}
	n := s.nodes[i]
	var it recIter
	for it.init(n); it.next(); {
		if c := it.id.Compare(id); c > 0 {
			return false
		} else if c < 0 {
			continue
		}
		if it.flags&flagDeleted != 0 {
			return false
		}
		if n.live == 1 {
			// streamIteratorRemoveEntry: the node's last live entry
			// takes the node with it.
			s.mem -= nodeOverhead + cap(n.data)
			s.forgetNode(n)
			if i == 0 { // the oldest node (a queue's XDEL): no shift
				s.nodes[0] = nil
				s.nodes = s.nodes[1:]
			} else {
				copy(s.nodes[i:], s.nodes[i+1:])
				s.nodes[len(s.nodes)-1] = nil
				s.nodes = s.nodes[:len(s.nodes)-1]
			}
		} else {
			n.data[it.off] |= flagDeleted
			n.live--
			n.deleted++
		}
		s.length--
		if s.maxDeletedID.Less(id) {
			s.maxDeletedID = id
		}
		return true
	}
	return false
}

// SetID sets the last ID, entries added and greatest deleted ID (XSETID);
// the caller has checked them as Redis does (last is not below the last
// entry's ID).
func (s *Stream) SetID(last ID, entriesAdded uint64, maxDeleted ID) {
	if s.op(opSetID) {
		s.delta = appendID(s.delta, last)
		s.delta = appendUvarint(s.delta, entriesAdded)
		s.delta = appendID(s.delta, maxDeleted)
	}
	s.lastID = last
	s.entriesAdded = entriesAdded
	s.maxDeletedID = maxDeleted
}

// nodeFor returns the index of the node that would hold id (the last one
// whose master ID is not above id), or -1.
func (s *Stream) nodeFor(id ID) int {
	return sort.Search(len(s.nodes), func(i int) bool { return id.Less(s.nodes[i].master) }) - 1
}

// Range calls fn for each live entry with start <= ID <= end, in ID order
// (rev: descending), until fn returns false. The Entry is valid only
// during the call. The stream must not change meanwhile.
func (s *Stream) Range(start, end ID, rev bool, fn func(e Entry) bool) {
	if end.Less(start) {
		return
	}
	if !rev {
		i := max(s.nodeFor(start), 0)
		for ; i < len(s.nodes); i++ {
			n := s.nodes[i]
			if end.Less(n.master) {
				return
			}
			if n.live == 0 || n.last.Less(start) {
				continue
			}
			var it recIter
			for it.init(n); it.next(); {
				if it.id.Less(start) || it.flags&flagDeleted != 0 {
					continue
				}
				if end.Less(it.id) {
					return
				}
				if !fn(Entry{ID: it.id, Fields: s.fields(n, &it)}) {
					return
				}
			}
		}
		return
	}
	var offs [NodeMaxEntries]int
	for i := s.nodeFor(end); i >= 0; i-- {
		n := s.nodes[i]
		if n.last.Less(start) {
			return
		}
		if n.live == 0 {
			continue
		}
		k := 0
		var it recIter
		for it.init(n); it.next() && k < len(offs); {
			offs[k] = it.off
			k++
		}
		for k--; k >= 0; k-- {
			it.seek(n, offs[k])
			if it.flags&flagDeleted != 0 || end.Less(it.id) {
				continue
			}
			if it.id.Less(start) {
				return
			}
			if !fn(Entry{ID: it.id, Fields: s.fields(n, &it)}) {
				return
			}
		}
	}
}

// fields decodes the names and values of the record it is at into
// s.scratch.
func (s *Stream) fields(n *node, it *recIter) [][]byte {
	s.scratch = it.fields(n, s.scratch[:0])
	return s.scratch
}

// Get returns the fields of the live entry id (valid until the stream
// changes), or ok false.
func (s *Stream) Get(id ID) (fields [][]byte, ok bool) {
	i := s.nodeFor(id)
	if i < 0 {
		return nil, false
	}
	n := s.nodes[i]
	var it recIter
	for it.init(n); it.next(); {
		if c := it.id.Compare(id); c > 0 {
			break
		} else if c == 0 {
			if it.flags&flagDeleted != 0 {
				break
			}
			return it.fields(n, nil), true
		}
	}
	return nil, false
}

// Nodes returns the number of nodes (XINFO STREAM's radix-tree-keys).
func (s *Stream) Nodes() int { return len(s.nodes) }

// MemSize returns the stream's estimated memory in bytes, entries and
// groups (keyspace.Sizer). It is O(1).
func (s *Stream) MemSize() int { return s.mem + s.cg.memSize() }

// Clone returns a deep copy with a new incarnation (COPY).
func (s *Stream) Clone() *Stream {
	c := &Stream{
		length: s.length, lastID: s.lastID, maxDeletedID: s.maxDeletedID,
		entriesAdded: s.entriesAdded, mem: streamOverhead,
		inc: rand.Uint64(), full: true,
	}
	c.nodes = make([]*node, len(s.nodes))
	for i, n := range s.nodes {
		cn := *n
		cn.data = exactCopy(n.data)
		c.nodes[i] = &cn
		c.mem += nodeOverhead + cap(cn.data)
	}
	c.cg = s.cg.clone(c)
	return c
}

// encodingVersion is the first byte of AppendBinary's output.
const encodingVersion = 1

// AppendBinary appends the whole stream's encoding (entries, nodes as
// they are, groups, incarnation and version) to dst:
//
//	version byte, incarnation, version (uvarints), last ID, max deleted ID,
//	entries added, node count, then per node its master ID, master field
//	count and data (length-prefixed), then the groups
//
// A node's counters and listpack size are recomputed by Decode from its
// records.
func (s *Stream) AppendBinary(dst []byte) []byte {
	dst = append(dst, encodingVersion)
	dst = appendUvarint(dst, s.inc)
	dst = appendUvarint(dst, s.ver)
	dst = appendID(dst, s.lastID)
	dst = appendID(dst, s.maxDeletedID)
	dst = appendUvarint(dst, s.entriesAdded)
	dst = appendUvarint(dst, uint64(len(s.nodes)))
	for _, n := range s.nodes {
		dst = appendID(dst, n.master)
		dst = appendUvarint(dst, uint64(n.nmf))
		dst = appendBytes(dst, n.data)
	}
	return s.cg.appendBinary(dst)
}

// Decode returns the stream b encodes (AppendBinary's output), refusing
// anything malformed with an error; it never panics on any input.
func Decode(b []byte) (*Stream, error) {
	r := reader{b: b}
	if r.byte() != encodingVersion {
		return nil, ErrCorrupt
	}
	s := &Stream{mem: streamOverhead}
	s.inc = r.uvarint()
	s.ver = r.uvarint()
	s.lastID = r.id()
	s.maxDeletedID = r.id()
	s.entriesAdded = r.uvarint()
	k := r.count(4)
	if r.err != nil {
		return nil, ErrCorrupt
	}
	s.nodes = make([]*node, 0, k)
	// The masters increase, and every live entry is below the next
	// nodes' masters and not above the last ID (a deleted entry may be
	// above both: XSETID, Append).
	var prevMaster, maxLive ID
	hasLive := false
	for i := 0; i < k; i++ {
		n := &node{master: r.id()}
		nmf := r.uvarint()
		data := r.bytes()
		if r.err != nil || (i > 0 && !prevMaster.Less(n.master)) || (hasLive && !maxLive.Less(n.master)) ||
			nmf == 0 || nmf > uint64(len(data)) {
			return nil, ErrCorrupt
		}
		n.nmf = int(nmf)
		n.data = exactCopy(data)
		if !n.check() {
			return nil, ErrCorrupt
		}
		var it recIter
		for it.init(n); it.next(); {
			if it.flags&flagDeleted == 0 {
				maxLive, hasLive = it.id, true
			}
		}
		prevMaster = n.master
		s.length += uint64(n.live)
		s.mem += nodeOverhead + cap(n.data)
		s.nodes = append(s.nodes, n)
	}
	// XSETID keeps entries-added at or above the length and the greatest
	// deleted ID at or below the last ID; lag and distances rely on it.
	if hasLive && s.lastID.Less(maxLive) || s.entriesAdded < s.length || s.lastID.Less(s.maxDeletedID) {
		return nil, ErrCorrupt
	}
	decodeGroups(&r, s)
	if r.err != nil || len(r.b) != 0 {
		return nil, ErrCorrupt
	}
	return s, nil
}

// check validates a decoded node's data and computes its counters, last
// ID and listpack size.
func (n *node) check() bool {
	r := reader{b: n.data}
	n.lpBytes = 7 + lpIntSize(1) + lpIntSize(0) + lpIntSize(int64(n.nmf)) + lpIntSize(0)
	for i := 0; i < n.nmf; i++ {
		n.lpBytes += lpStringSize(r.bytes())
	}
	if r.err != nil {
		return false
	}
	n.start = len(n.data) - len(r.b)
	prev, first := n.master, true
	for len(r.b) > 0 {
		if n.live+n.deleted >= NodeMaxEntries {
			return false
		}
		flags := r.byte()
		ms := r.uvarint()
		seq := r.uvarint()
		if flags&^(flagDeleted|flagSameFields) != 0 || ms > ^uint64(0)-n.master.Ms ||
			(ms == 0 && seq > ^uint64(0)-n.master.Seq) {
			return false
		}
		id := ID{n.master.Ms + ms, seq}
		if ms == 0 {
			id.Seq = n.master.Seq + seq
		}
		if first && id != n.master || !first && !prev.Less(id) {
			return false
		}
		first = false
		prev = id
		numFields := n.nmf
		if flags&flagSameFields == 0 {
			numFields = int(r.uvarint())
			if numFields == 0 || numFields > len(r.b) {
				return false
			}
		}
		lpCount := int64(numFields + 3)
		n.lpBytes += lpIntSize(int64(flags)) + lpIntSize(int64(id.Ms-n.master.Ms)) +
			lpIntSize(int64(id.Seq-n.master.Seq))
		total := 0
		for j := 0; j < numFields; j++ {
			if flags&flagSameFields == 0 {
				f := r.bytes()
				total += len(f)
				n.lpBytes += lpStringSize(f)
			}
			v := r.bytes()
			total += len(v)
			n.lpBytes += lpStringSize(v)
		}
		if flags&flagSameFields == 0 {
			n.lpBytes += lpIntSize(int64(numFields))
			lpCount += int64(numFields + 1)
		}
		n.lpBytes += lpIntSize(lpCount)
		if r.err != nil || total > MaxEntryBytes {
			return false
		}
		if flags&flagDeleted != 0 {
			n.deleted++
		} else {
			n.live++
		}
	}
	if first {
		return false
	}
	n.last = prev
	return true
}

// recIter walks a node's records.
type recIter struct {
	r     reader
	off   int // the current record's offset in the node's data
	flags byte
	id    ID
	body  []byte // the current record's strings (and pair count)
	data  []byte
	nmf   int
	mast  ID
}

func (it *recIter) init(n *node) {
	it.data, it.nmf, it.mast = n.data, n.nmf, n.master
	it.r = reader{b: n.data[n.start:]}
}

// seek positions it at the record at off (an offset next returned).
func (it *recIter) seek(n *node, off int) {
	it.data, it.nmf, it.mast = n.data, n.nmf, n.master
	it.r = reader{b: n.data[off:]}
	it.next()
}

// next moves to the next record, reporting false at the node's end.
func (it *recIter) next() bool {
	if len(it.r.b) == 0 || it.r.err != nil {
		return false
	}
	it.off = len(it.data) - len(it.r.b)
	it.flags = it.r.byte()
	ms := it.r.uvarint()
	seq := it.r.uvarint()
	it.id = ID{it.mast.Ms + ms, seq}
	if ms == 0 {
		it.id.Seq = it.mast.Seq + seq
	}
	it.body = it.r.b
	numFields := it.nmf
	if it.flags&flagSameFields == 0 {
		numFields = int(it.r.uvarint()) * 2
	}
	for j := 0; j < numFields; j++ {
		it.r.bytes()
	}
	return it.r.err == nil
}

// fields appends the current record's names and values to dst.
func (it *recIter) fields(n *node, dst [][]byte) [][]byte {
	r := reader{b: it.body}
	if it.flags&flagSameFields == 0 {
		k := int(r.uvarint()) * 2
		for j := 0; j < k; j++ {
			dst = append(dst, r.bytes())
		}
		return dst
	}
	names := reader{b: n.data[:n.start]}
	for j := 0; j < n.nmf; j++ {
		dst = append(dst, names.bytes(), r.bytes())
	}
	return dst
}

// lpIntSize is the bytes of an integer element of Redis's listpack,
// its backlen included (listpack.c lpEncodeIntegerGetType).
func lpIntSize(v int64) int {
	switch {
	case v >= 0 && v <= 127:
		return 2
	case v >= -4096 && v <= 4095:
		return 3
	case v >= -32768 && v <= 32767:
		return 4
	case v >= -8388608 && v <= 8388607:
		return 5
	case v >= -2147483648 && v <= 2147483647:
		return 6
	}
	return 10
}

// LPSize is the bytes of b as an element of Redis's listpack, its
// backlen included: what a stream node's bound counts for a field name
// or value (AppendNamedSized).
func LPSize(b []byte) int { return lpStringSize(b) }

// LPIntSize is LPSize of v's decimal form (strconv.AppendInt's), without
// parsing it.
func LPIntSize(v int64) int { return lpIntSize(v) }

// lpStringSize is the bytes of a string element of Redis's listpack,
// its backlen included: a string that reads as a 64-bit integer is
// stored as one (lpEncodeGetType).
func lpStringSize(b []byte) int {
	if len(b) > 0 && len(b) < 21 && (b[0] == '-' || b[0]-'0' <= 9) { // else not an integer
		if v, ok := lpStringToInt64(b); ok {
			return lpIntSize(v)
		}
	}
	var enc int
	switch n := len(b); {
	case n < 64:
		enc = 1 + n
	case n < 4096:
		enc = 2 + n
	default:
		enc = 5 + n
	}
	return enc + lpBacklenSize(enc)
}

// lpBacklenSize is listpack.c's lpEncodeBacklen for an element of l
// bytes.
func lpBacklenSize(l int) int {
	switch {
	case l <= 127:
		return 1
	case l < 16383:
		return 2
	case l < 2097151:
		return 3
	case l < 268435455:
		return 4
	}
	return 5
}

// lpStringToInt64 is listpack.c's: a decimal without leading zeros, "+"
// or spaces, that fits an int64.
func lpStringToInt64(s []byte) (int64, bool) {
	if len(s) == 0 || len(s) >= 21 {
		return 0, false
	}
	if len(s) == 1 && s[0] == '0' {
		return 0, true
	}
	p, neg := s, false
	if p[0] == '-' {
		neg, p = true, p[1:]
		if len(p) == 0 {
			return 0, false
		}
	}
	if p[0] < '1' || p[0] > '9' {
		return 0, false
	}
	if len(p) <= 18 { // below 10^18: no overflow
		var v int64
		for _, c := range p {
			if c < '0' || c > '9' {
				return 0, false
			}
			v = v*10 + int64(c-'0')
		}
		if neg {
			v = -v
		}
		return v, true
	}
	var v uint64
	for _, c := range p {
		if c < '0' || c > '9' {
			return 0, false
		}
		if v > ^uint64(0)/10 {
			return 0, false
		}
		v *= 10
		if v > ^uint64(0)-uint64(c-'0') {
			return 0, false
		}
		v += uint64(c - '0')
	}
	if neg {
		if v > 1<<63 {
			return 0, false
		}
		return -int64(v), true
	}
	if v > 1<<63-1 {
		return 0, false
	}
	return int64(v), true
}
