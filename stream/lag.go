package stream

// The consumer groups' read counters and lag (XINFO's entries-read and
// lag, XREADGROUP's progress), as Redis 7.0.15 computes them from the
// stream's counters (t_stream.c).

// RangeHasTombstones reports whether start <= ID <= end may hold a deleted
// entry: the greatest deleted ID falls inside it while the stream is not
// empty and that ID is not before its first entry (streamRangeHasTombstones,
// with start 0-0 and end MaxID for Redis's NULLs).
func (s *Stream) RangeHasTombstones(start, end ID) bool {
	if s.length == 0 || s.maxDeletedID.IsZero() {
		return false
	}
	if first, _ := s.FirstID(); s.maxDeletedID.Less(first) {
		return false
	}
	return !s.maxDeletedID.Less(start) && !end.Less(s.maxDeletedID)
}

// EstimateDistance returns id's logical read counter, its distance from the
// first entry ever added, or Invalid when it cannot be known
// (streamEstimateDistanceFromFirstEverEntry).
func (s *Stream) EstimateDistance(id ID) int64 {
	if s.entriesAdded == 0 {
		return 0
	}
	cmpLast := id.Compare(s.lastID)
	if s.length == 0 && cmpLast < 1 {
		return int64(s.entriesAdded)
	}
	switch {
	case cmpLast == 0:
		return int64(s.entriesAdded)
	case cmpLast > 0:
		return Invalid
	}
	first, _ := s.FirstID()
	if s.maxDeletedID.IsZero() || s.maxDeletedID.Less(first) {
		switch id.Compare(first) {
		case -1:
			return int64(s.entriesAdded - s.length)
		case 0:
			return int64(s.entriesAdded - s.length + 1)
		}
	}
	return Invalid
}

// Lag returns the number of entries not yet delivered to g, ok false when
// it cannot be known (streamReplyWithCGLag's null).
func (s *Stream) Lag(g *Group) (lag int64, ok bool) {
	switch {
	case s.entriesAdded == 0:
		return 0, true
	case g.EntriesRead != Invalid && !s.RangeHasTombstones(g.LastID, MaxID):
		return int64(s.entriesAdded) - g.EntriesRead, true
	}
	read := s.EstimateDistance(g.LastID)
	if read == Invalid {
		return 0, false
	}
	return int64(s.entriesAdded) - read, true
}

// Deliver moves g's last delivered ID to id when id is past it, counting
// the read as XREADGROUP does for each entry it serves (the counter goes
// on when it is known and no deleted entry lies ahead, else it is
// estimated again).
func (s *Stream) Deliver(g *Group, id ID) {
	if !g.LastID.Less(id) {
		return
	}
	read := g.EntriesRead
	if read != Invalid && !s.RangeHasTombstones(id, MaxID) {
		read++
	} else if s.entriesAdded != 0 {
		read = s.EstimateDistance(id)
	}
	s.SetGroupLast(g, id, read)
}
