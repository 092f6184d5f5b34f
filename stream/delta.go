package stream

import "encoding/binary"

// A delta is a fixed header followed by operations:
//
//	offset size  field
//	0      8     incarnation (little-endian)
//	8      8     version the delta starts from
//	16     4     number of operations n
//	20     ...   n operations: a code byte, then the code's payload
//
// Codes below firstGroupOp are the entries' (stream.go, applyEntryOp),
// the others the groups' (groups.go, applyGroupOp). Every mutating method
// calls op once, then appends its payload to s.delta when op says so.
const deltaHeader = 8 + 8 + 4

// op counts one operation of code and reports whether its payload must be
// appended to s.delta (false while the whole value will be written, or
// while no journal consumer has asked for a delta: see Delta).
func (s *Stream) op(code byte) bool {
	s.ver++
	if s.full || !s.recording {
		return false
	}
	if len(s.delta) == 0 {
		s.delta = binary.LittleEndian.AppendUint64(s.delta, s.inc)
		s.delta = binary.LittleEndian.AppendUint64(s.delta, s.ver-1)
		s.delta = binary.LittleEndian.AppendUint32(s.delta, 0)
	}
	n := binary.LittleEndian.Uint32(s.delta[16:])
	binary.LittleEndian.PutUint32(s.delta[16:], n+1)
	s.delta = append(s.delta, code)
	return true
}

// Delta: see api.go. A stream records its operations only once a journal
// consumer has asked for a delta: until then (a server that persists and
// replicates nothing never asks) Append and the others only count their
// versions, and the first Delta returns the whole value (nil, false) —
// always correct — and starts recording from the next change on. It also
// marks the stream full, so that every other consumer of this same change
// is told the same (nil, false) until ResetDelta.
func (s *Stream) Delta() (d []byte, ok bool) {
	if !s.recording {
		s.recording = true
		s.full = true
		s.delta = s.delta[:0]
	}
	if s.full {
		return nil, false
	}
	if len(s.delta) == 0 {
		// A change of the key but not of the stream (its expiry): one
		// operation of none, so that the change has a version of its
		// own and a replay orders it among the others.
		s.op(opNop)
	}
	return s.delta, true
}

// opNop is the operation of a journaled change that changed nothing in
// the stream (its key's expiry).
const opNop = firstGroupOp - 1

// MarkFull makes the next journal write the whole value (the keyspace
// calls it when the stream is new to its key).
func (s *Stream) MarkFull() {
	s.full, s.fresh = true, true
	s.delta = s.delta[:0]
}

// ResetDelta: see api.go.
func (s *Stream) ResetDelta() {
	s.full, s.fresh = false, false
	if cap(s.delta) > 64<<10 {
		s.delta = nil
	} else {
		s.delta = s.delta[:0]
	}
}

// ApplyDelta: see api.go.
func (s *Stream) ApplyDelta(d []byte) (applied bool, err error) {
	if len(d) < deltaHeader {
		return false, ErrCorrupt
	}
	inc := binary.LittleEndian.Uint64(d)
	base := binary.LittleEndian.Uint64(d[8:])
	n := uint64(binary.LittleEndian.Uint32(d[16:]))
	switch {
	case base+n < base:
		return false, ErrCorrupt
	case inc != s.inc:
		return false, ErrNotBase
	case s.ver >= base+n:
		return false, nil
	case s.ver != base:
		return false, ErrNotBase
	}
	r := reader{b: d[deltaHeader:]}
	for i := uint64(0); i < n && r.err == nil; i++ {
		code := r.byte()
		if r.err != nil {
			break
		}
		if code == opNop {
			s.op(opNop)
			continue
		}
		if code >= firstGroupOp {
			s.applyGroupOp(code, &r)
		} else {
			s.applyEntryOp(code, &r)
		}
	}
	if r.err != nil || len(r.b) != 0 {
		return true, ErrCorrupt
	}
	return true, nil
}

// applyEntryOp applies one entries' operation (code < firstGroupOp),
// reading its payload from r, through the method that recorded it.
func (s *Stream) applyEntryOp(code byte, r *reader) {
	switch code {
	case opAppend:
		id := r.id()
		k := r.count(1)
		if r.err != nil || k < 2 || k%2 != 0 || !s.lastID.Less(id) {
			r.fail()
			return
		}
		fields := make([][]byte, k)
		total := 0
		for i := range fields {
			fields[i] = r.bytes()
			total += len(fields[i])
		}
		if r.err != nil || total > MaxEntryBytes {
			r.fail()
			return
		}
		s.Append(id, fields)
	case opTrim:
		f := r.byte()
		a := TrimArgs{ByID: f&1 != 0, Approx: f&2 != 0}
		a.MaxLen = r.int64()
		a.MinID = r.id()
		a.Limit = r.int64()
		if r.err != nil || f&^3 != 0 || a.MaxLen < 0 || a.Limit < 0 {
			r.fail()
			return
		}
		if s.Trim(a) == 0 {
			r.fail() // only a trim that removed entries is recorded
		}
	case opDelete:
		id := r.id()
		if r.err != nil {
			return
		}
		if !s.Delete(id) {
			r.fail() // only a deletion is recorded
		}
	case opSetID:
		last := r.id()
		added := r.uvarint()
		maxDel := r.id()
		if r.err != nil {
			return
		}
		if top, ok := s.LastEntryID(); ok && last.Less(top) || added < s.length || last.Less(maxDel) {
			r.fail() // XSETID refuses these (its checks): no valid delta holds them
			return
		}
		s.SetID(last, added, maxDel)
	default:
		r.fail()
	}
}
