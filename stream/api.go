package stream

// This file is the package's API as the commands use it. The bodies live
// in stream.go (entries, encoding, deltas) and groups.go (consumer groups).

// Redis 7.0.15's defaults for a stream's nodes.
const (
	// NodeMaxBytes is stream-node-max-bytes: a node whose listpack would
	// reach it takes no more entries.
	NodeMaxBytes = 4096
	// NodeMaxEntries is stream-node-max-entries.
	NodeMaxEntries = 100
)

// Invalid is Redis's SCG_INVALID_ENTRIES_READ and SCG_INVALID_LAG: an
// entries-read counter (or lag) that is not known.
const Invalid int64 = -1

// TrimArgs says how XADD and XTRIM trim (Redis's streamAddTrimArgs).
type TrimArgs struct {
	// ByID: trim entries whose ID is below MinID (MINID); else keep at
	// most MaxLen entries (MAXLEN).
	ByID   bool
	MaxLen int64
	MinID  ID
	// Approx (~): remove whole nodes only, stopping before the node that
	// would take the stream past the threshold.
	Approx bool
	// Limit: with Approx, the most entries removed (0: no limit; the
	// caller applies Redis's default of 100 * NodeMaxEntries when LIMIT
	// is not given).
	Limit int64
}

// Entry is one entry as Range hands it over: Fields alternates names and
// values and is only valid during the callback.
type Entry struct {
	ID     ID
	Fields [][]byte
}

// Pending is one entry of a group's pending entries list (Redis's
// streamNACK): delivered to Consumer, not yet acknowledged.
type Pending struct {
	ID            ID
	Consumer      *Consumer
	DeliveryTime  int64 // ms since the Unix epoch
	DeliveryCount uint64
}

// Consumer is one consumer of a group (Redis's streamConsumer).
type Consumer struct {
	Name     string
	SeenTime int64 // ms since the Unix epoch of its last read or claim
	group    *Group
	pel      *pelTree // its pending entries, by ID (shares the group's *Pending)
}

// Group is one consumer group (Redis's streamCG).
type Group struct {
	Name        string
	LastID      ID    // last delivered ID
	EntriesRead int64 // Invalid when not known
	s           *Stream
	pel         *pelTree // pending entries by ID
	consumers   *consumerTree
}

// Fresh reports whether the stream is new to its key since it was last
// journaled (made, decoded, cloned, renamed: MarkFull), as opposed to
// changed in place (even when that change is written whole, as the first
// one a journal sees is): a key's blocked readers are woken by a stream made
// there, and by an in-place change only when the command says so (XADD,
// XGROUP DESTROY), as Redis signals them.
func (s *Stream) Fresh() bool { return s.fresh }
