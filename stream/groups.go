package stream

// SCAFFOLD: consumer groups are being written (groups.go is theirs); these
// placeholders let the package compile meanwhile and fix the hooks the
// entries' code calls.

// groups is a stream's consumer groups by name.
type groups struct{}

type pelTree struct{}

type consumerTree struct{}

// appendBinary appends the groups' part of the whole encoding.
func (g *groups) appendBinary(dst []byte) []byte { return appendUvarint(dst, 0) }

// decodeGroups reads the groups' part of the whole encoding into s.
func decodeGroups(r *reader, s *Stream) {
	if r.uvarint() != 0 {
		r.fail()
	}
}

// memSize is the groups' estimated memory.
func (g *groups) memSize() int { return 0 }

// clone returns a deep copy of g belonging to s.
func (g *groups) clone(s *Stream) groups { return groups{} }

// applyGroupOp applies one delta operation of the groups (op >=
// firstGroupOp), reading its payload from r, through the same methods
// that recorded it (so that it is recorded again in s's delta).
func (s *Stream) applyGroupOp(op byte, r *reader) { r.fail() }

// firstGroupOp is the first delta operation code of the groups; the
// entries' codes are below it.
const firstGroupOp = 64
