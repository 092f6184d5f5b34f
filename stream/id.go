package stream

import "strconv"

// ID is a stream entry ID: a millisecond time and a sequence number.
type ID struct{ Ms, Seq uint64 }

// MaxID is the greatest ID (Redis's "+" in XRANGE).
var MaxID = ID{^uint64(0), ^uint64(0)}

// Compare returns -1, 0 or +1 as a is less than, equal to or greater than b.
func (a ID) Compare(b ID) int {
	switch {
	case a.Ms < b.Ms:
		return -1
	case a.Ms > b.Ms:
		return 1
	case a.Seq < b.Seq:
		return -1
	case a.Seq > b.Seq:
		return 1
	}
	return 0
}

// Less reports whether a < b.
func (a ID) Less(b ID) bool { return a.Compare(b) < 0 }

// IsZero reports whether id is 0-0.
func (id ID) IsZero() bool { return id == ID{} }

// Incr returns the ID after id; ok is false when id is MaxID (Redis's
// streamIncrID overflow).
func (id ID) Incr() (next ID, ok bool) {
	switch {
	case id.Seq != ^uint64(0):
		return ID{id.Ms, id.Seq + 1}, true
	case id.Ms != ^uint64(0):
		return ID{id.Ms + 1, 0}, true
	}
	return id, false
}

// Decr returns the ID before id; ok is false when id is 0-0.
func (id ID) Decr() (prev ID, ok bool) {
	switch {
	case id.Seq != 0:
		return ID{id.Ms, id.Seq - 1}, true
	case id.Ms != 0:
		return ID{id.Ms - 1, ^uint64(0)}, true
	}
	return id, false
}

// AppendText appends id as Redis writes it, "<ms>-<seq>".
func (id ID) AppendText(dst []byte) []byte {
	dst = strconv.AppendUint(dst, id.Ms, 10)
	dst = append(dst, '-')
	return strconv.AppendUint(dst, id.Seq, 10)
}

// String returns id as Redis writes it.
func (id ID) String() string { return string(id.AppendText(nil)) }
