package stream

// SCAFFOLD: the signatures below are the API the commands use; the bodies
// are being written (entries, encoding, deltas). Nothing calls them yet.

// Stream is one stream key's value. The zero value is not usable: New.
type Stream struct {
	length       uint64 // live entries
	lastID       ID
	maxDeletedID ID
	entriesAdded uint64
	cg           groups // consumer groups (groups.go)

	inc   uint64 // incarnation (see the package doc)
	ver   uint64 // operations applied since the incarnation began
	delta []byte // operations since the last ResetDelta; nil with full set
	full  bool   // the next journal write must be the whole value
}

// New returns an empty stream with a new incarnation; its first journal
// write is the whole value (Delta's ok is false).
func New() *Stream { panic("stream: not built yet") }

// Len returns the number of live entries (XLEN).
func (s *Stream) Len() uint64 { return s.length }

// LastID is the greatest ID ever added (or set by SetID).
func (s *Stream) LastID() ID { return s.lastID }

// MaxDeletedID is the greatest ID deleted by XDEL, XTRIM or trimming.
func (s *Stream) MaxDeletedID() ID { return s.maxDeletedID }

// EntriesAdded counts every entry ever added (XINFO's entries-added).
func (s *Stream) EntriesAdded() uint64 { return s.entriesAdded }

// FirstID returns the first live entry's ID (0-0, false when empty).
func (s *Stream) FirstID() (ID, bool) { panic("stream: not built yet") }

// LastEntryID returns the last live entry's ID (0-0, false when empty).
func (s *Stream) LastEntryID() (ID, bool) { panic("stream: not built yet") }

// Append adds an entry; id must be greater than LastID (the caller checks,
// Append panics otherwise) and fields must hold an even number (>= 2) of
// names and values. The bytes are copied.
func (s *Stream) Append(id ID, fields [][]byte) { panic("stream: not built yet") }

// Trim removes entries as a says and returns how many (Redis's
// streamTrim).
func (s *Stream) Trim(a TrimArgs) int64 { panic("stream: not built yet") }

// Delete removes the entry id and reports whether it was live (XDEL).
func (s *Stream) Delete(id ID) bool { panic("stream: not built yet") }

// SetID sets the last ID, entries added and greatest deleted ID (XSETID);
// the caller has checked them as Redis does.
func (s *Stream) SetID(last ID, entriesAdded uint64, maxDeleted ID) {
	panic("stream: not built yet")
}

// Range calls fn for each live entry with start <= ID <= end, in ID order
// (rev: descending), until fn returns false. The Entry is valid only
// during the call. The stream must not change meanwhile.
func (s *Stream) Range(start, end ID, rev bool, fn func(e Entry) bool) {
	panic("stream: not built yet")
}

// Get returns the fields of the live entry id (valid until the stream
// changes), or ok false.
func (s *Stream) Get(id ID) (fields [][]byte, ok bool) { panic("stream: not built yet") }

// Nodes returns the number of nodes (XINFO STREAM's radix-tree-keys).
func (s *Stream) Nodes() int { panic("stream: not built yet") }

// MemSize returns the stream's estimated memory in bytes, entries and
// groups (keyspace.Sizer). It is O(1).
func (s *Stream) MemSize() int { panic("stream: not built yet") }

// Clone returns a deep copy with a new incarnation (COPY).
func (s *Stream) Clone() *Stream { panic("stream: not built yet") }

// AppendBinary appends the whole stream's encoding (entries, nodes as
// they are, groups, incarnation and version) to dst.
func (s *Stream) AppendBinary(dst []byte) []byte { panic("stream: not built yet") }

// Decode returns the stream b encodes (AppendBinary's output), refusing
// anything malformed with an error; it never panics on any input.
func Decode(b []byte) (*Stream, error) { panic("stream: not built yet") }

// Delta, ResetDelta and ApplyDelta are in delta.go; their contract:
//
// Delta returns the operations applied since the last ResetDelta, as
// ApplyDelta takes them; ok is false when the whole value must be written
// instead (a new stream, or a clone). The bytes are valid until the next
// change.
//
// ResetDelta forgets the operations recorded so far: the keyspace calls it
// once its journal has been told of the change.
//
// ApplyDelta applies d, a Delta of a stream of the same incarnation at the
// version d starts from. It returns applied false, and no error, when s
// already holds every operation of d; ErrNotBase when d does not start from
// s's state (another incarnation, or a gap); ErrCorrupt when d is malformed,
// after which s may hold part of d and must be dropped (a replica resyncs).
// It records d in s's own delta, so that a replica passes the same change
// on. Every operation's payload is checked before it is applied: no input
// makes it panic.
