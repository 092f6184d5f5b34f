package limiter

import (
	"errors"
	"math"
	"slices"
	"sort"
	"time"
)

// Reservations: units admitted before their real cost is known
// (CL.RESERVE). A reservation is decided and counted exactly as a plain
// request of Reserved units at the instant it is made; settling it later
// with the actual units applies the difference to the limiter's state
// (FixedSettle, SlidingSettle, Log.Settle, gcra.Settle): units given back
// when actual < reserved, units taken when actual > reserved. Taking more
// is never refused: the state may go past the limit (into debt), and
// later requests are refused until it recedes. A reservation that is not
// settled before its deadline simply ends: its units stay used in full.
//
// Units can only be given back while they still count: in the window
// they were counted in (fixed window; the previous one too for the
// sliding counter), in their log entry while it is inside the period
// (sliding log), and down to a full bucket (GCRA). Once they stopped
// counting, giving them back changes nothing. Units taken are counted at
// the settle: in the current window, in the log's newest entry (a new one
// at the settle when the log is empty), or on the TAT.

// Reservation is one reservation of a key.
type Reservation struct {
	// ID identifies the reservation within its key (see Reservations.Add).
	ID int64
	// At is the instant, in ns, its units were counted at: the window or
	// the log entry that holds them.
	At int64
	// Deadline is the instant, in ns, after which the reservation is
	// forgotten; unsettled, its units stay used.
	Deadline int64
	// Reserved is the units admitted at At; Actual the units it settled
	// with, or -1 while it is open. A settled reservation is kept until
	// its deadline so that settling it again answers the same.
	Reserved, Actual int64
	// Unit is what a settle needs of the limiter's parameters: the
	// emission interval in ns for GCRA, the period in ns for the windows
	// and the log.
	Unit int64
}

// ReservationBytes is the memory one reservation takes in a key.
const ReservationBytes = 48

// reservationsBytes is the memory of a Reservations beyond its records
// (64 bytes).
const reservationsBytes = 64

// MaxReservations is the most reservations one key holds (open, or
// settled and kept until their deadline): past it, Add forgets the
// settled ones, and refuses a new one only when all are open. A call on
// the key scans them only when one has ended (Prune) or at the cap.
const MaxReservations = 10000

// Errors of Reservations.
var (
	ErrTooManyReservations = errors.New("limiter: too many reservations on the key")
	ErrNoReservation       = errors.New("limiter: no such reservation")
	ErrSettled             = errors.New("limiter: reservation already settled with another actual")
)

// Reservations are the reservations of one key, in increasing ID order,
// with what the key's expiry needs. The zero value holds none.
type Reservations struct {
	List []Reservation
	// LastID is the highest ID given so far (kept while the key lives, so
	// that IDs never repeat within it).
	LastID int64
	// StateExp is when the limiter's own state ends, in ms since the Unix
	// epoch (0: never). The key lives until the later of StateExp and the
	// last deadline (Expiry); past StateExp, the state counts as absent.
	StateExp int64

	// first and last are the earliest and the latest deadline of List,
	// when known (first != 0): Prune then scans only once a reservation
	// has ended, and Expiry not at all. A Reservations built by hand (or
	// decoded) learns them at its first Prune. tidyAt is when Tidy may
	// scan again.
	first, last, tidyAt int64
}

// Prune forgets the reservations whose deadline is before now (ns). It
// scans them only when one may have ended.
func (rs *Reservations) Prune(now int64) {
	if rs.first != 0 && now <= rs.first {
		return
	}
	n := 0
	rs.first, rs.last = math.MaxInt64, math.MinInt64
	for _, r := range rs.List {
		if now <= r.Deadline {
			rs.List[n] = r
			n++
			rs.first, rs.last = min(rs.first, r.Deadline), max(rs.last, r.Deadline)
		}
	}
	clear(rs.List[n:])
	rs.List = rs.List[:n]
	if cap(rs.List) > 16 && n < cap(rs.List)/4 {
		rs.List = append([]Reservation(nil), rs.List...)
	}
}

// tidyEvery is the least time between two scans of Tidy.
const tidyEvery = int64(time.Millisecond)

// Tidy is Prune at most once per tidyEvery: on a busy key a reservation
// ends every few microseconds, and Prune would then scan the others on
// every call. An ended reservation is invisible (Find, Live, Open,
// CanAdd and Add check deadlines), so keeping it up to tidyEvery longer
// only delays the release of its 48 bytes.
func (rs *Reservations) Tidy(now int64) {
	if rs.first != 0 && (now <= rs.first || now <= rs.tidyAt) {
		return
	}
	rs.Prune(now)
	rs.tidyAt = now + tidyEvery
}

// dropSettled forgets the settled reservations, to make room in one pass
// for as many new ones; it reports whether there was one.
func (rs *Reservations) dropSettled() bool {
	n := len(rs.List)
	rs.List = slices.DeleteFunc(rs.List, func(r Reservation) bool { return r.Actual >= 0 })
	rs.first = 0 // relearn at the next Prune
	return len(rs.List) < n
}

// Add records a reservation of reserved units counted at at (ns), made at
// now and ending at deadline, and returns its ID: now in microseconds
// since the Unix epoch, or one more than the last ID if that is not
// higher. IDs thus increase within a key and stay below 2^53 (exact in a
// JavaScript number) until the year 2255. When the key holds
// MaxReservations, Add first forgets the ended ones, then the settled
// ones (a repeated settle of one then answers ErrNoReservation); it fails
// with ErrTooManyReservations when all of them are open.
func (rs *Reservations) Add(now, at, deadline, reserved, unit int64) (int64, error) {
	if len(rs.List) >= MaxReservations {
		rs.Prune(now)
	}
	if len(rs.List) >= MaxReservations && !rs.dropSettled() {
		return 0, ErrTooManyReservations
	}
	switch {
	case len(rs.List) == 0:
		rs.first, rs.last = deadline, deadline
	case rs.first != 0:
		rs.first, rs.last = min(rs.first, deadline), max(rs.last, deadline)
	}
	id := floorDiv(now, 1000)
	if id <= rs.LastID {
		id = rs.LastID + 1
	}
	rs.LastID = id
	rs.List = append(rs.List, Reservation{ID: id, At: at, Deadline: deadline, Reserved: reserved, Actual: -1, Unit: unit})
	return id, nil
}

// Find returns the reservation with id, alive at now (ns), or nil.
func (rs *Reservations) Find(now, id int64) *Reservation {
	i := sort.Search(len(rs.List), func(i int) bool { return rs.List[i].ID >= id })
	if i < len(rs.List) && rs.List[i].ID == id && now <= rs.List[i].Deadline {
		return &rs.List[i]
	}
	return nil
}

// Settle settles reservation id with actual >= 0 units at now (ns) and
// returns it as settled and the units to apply to the limiter's state,
// actual - reserved (negative: given back; both are >= 0, so it does not
// overflow). A reservation already settled
// with the same actual answers the same with apply false: nothing changes.
// Errors: ErrNegative (actual < 0), ErrNoReservation (unknown, or past
// its deadline), ErrSettled (settled with another actual; r holds it).
func (rs *Reservations) Settle(now, id, actual int64) (r Reservation, delta int64, apply bool, err error) {
	if actual < 0 {
		// -1 is the mark of an open reservation: storing it would let
		// every repeat apply the delta again.
		return Reservation{}, 0, false, ErrNegative
	}
	p := rs.Find(now, id)
	if p == nil {
		return Reservation{}, 0, false, ErrNoReservation
	}
	if p.Actual >= 0 {
		if p.Actual != actual {
			return *p, 0, false, ErrSettled
		}
		return *p, actual - p.Reserved, false, nil
	}
	p.Actual = actual
	return *p, actual - p.Reserved, true, nil
}

// Live returns how many reservations are alive at now (ns): not past
// their deadline, open or settled.
func (rs *Reservations) Live(now int64) int {
	n := 0
	for _, r := range rs.List {
		if now <= r.Deadline {
			n++
		}
	}
	return n
}

// Open returns how many reservations are alive at now (ns) and not
// settled yet.
func (rs *Reservations) Open(now int64) int {
	n := 0
	for _, r := range rs.List {
		if r.Actual < 0 && now <= r.Deadline {
			n++
		}
	}
	return n
}

// Expiry returns when the key holding rs ends, in ms since the Unix
// epoch: the later of StateExp and the last deadline (rounded up to a
// millisecond), or 0 (never) when StateExp is 0.
func (rs *Reservations) Expiry() int64 {
	if rs.StateExp == 0 {
		return 0
	}
	if len(rs.List) == 0 {
		return rs.StateExp
	}
	last := rs.last
	if rs.first == 0 {
		last = math.MinInt64
		for _, r := range rs.List {
			last = max(last, r.Deadline)
		}
	}
	ms := floorDiv(last, 1e6)
	if last%1e6 != 0 {
		ms++
	}
	return max(rs.StateExp, ms)
}

// CanAdd reports whether Add at now would find room: fewer than
// MaxReservations held, or one of them ended or settled.
func (rs *Reservations) CanAdd(now int64) bool {
	if len(rs.List) < MaxReservations {
		return true
	}
	for _, r := range rs.List {
		if r.Actual >= 0 || now > r.Deadline {
			return true
		}
	}
	return false
}

// MemSize is the memory rs takes.
func (rs *Reservations) MemSize() int { return reservationsBytes + cap(rs.List)*ReservationBytes }

// FixedSettle applies delta units of a reservation counted at at (ns) to
// a fixed window's state at now under r (see Fixed for st, exists and the
// clock going back; r.Limit is not read): units given back leave the count if at is in the current
// window (never below zero), and are lost otherwise; units taken are added
// to the current window, beyond the limit if need be (saturating). It
// returns the state to store when store is true, and the window's end.
func FixedSettle(st FixedState, exists bool, now int64, r Rule, at, delta int64) (next FixedState, store bool, expireAt int64) {
	period := r.Period
	w := floorDiv(now, period)
	if exists && st.Window > w {
		w = st.Window
	}
	count := int64(0)
	if exists && st.Window == w {
		count = st.Count
	}
	switch {
	case delta > 0:
		count = addSat(count, delta)
		store = true
	case delta < 0 && count > 0 && floorDiv(at, period) == w:
		count = max(count+delta, 0)
		store = true
	}
	return FixedState{Window: w, Count: count}, store, (w + 1) * period
}

// SlidingSettle applies delta units of a reservation counted at at (ns) to
// a sliding-window counter's state at now under r (see Sliding; r.Limit is
// not read): units given back
// leave the count of the window they were counted in, current or previous
// (never below zero), and are lost if that window is older; units taken
// are added to the current window, beyond the limit if need be, up to
// MaxSlidingLimit (the counts are stored in 32 bits). It returns the state
// to store when store is true, and when the state ends.
func SlidingSettle(st SlidingState, exists bool, now int64, r Rule, at, delta int64) (next SlidingState, store bool, expireAt int64) {
	period := r.Period
	w := floorDiv(now, period)
	if exists && st.Window > w {
		w = st.Window
	}
	prev, cur := st.counts(exists, w)
	switch aw := floorDiv(at, period); {
	case delta > 0:
		cur = min(addSat(cur, delta), MaxSlidingLimit)
		store = true
	case delta < 0 && aw == w && cur > 0:
		cur = max(cur+delta, 0)
		store = true
	case delta < 0 && aw == w-1 && prev > 0:
		prev = max(prev+delta, 0)
		store = true
	}
	return SlidingState{Window: w, Prev: prev, Cur: cur}, store, (w + 2) * period
}

// Settle applies delta units of a reservation counted at at (ns) to the
// log at now for r.Period ns (r.Limit is not read), after dropping the entries that left the
// window: units given back leave the entry at at while it is inside the
// window (it is removed once empty), and are lost otherwise; units taken
// are added to the newest entry, and leave the window with it (recorded
// at now, as Apply does, when the log is empty), so that settles never
// add entries: a log holds at most one per admitted request. The log's
// units saturate at math.MaxInt64. It returns the instant in ns after
// which the log is empty.
func (l *Log) Settle(now int64, r Rule, at, delta int64) (expireAt int64) {
	period := r.Period
	expireAt = l.Apply(now, r, 0)
	switch {
	case delta > 0:
		// Units (and so every entry) stay within int64: a wrapped sum
		// would read as room in the log.
		delta = min(delta, math.MaxInt64-l.Units)
		if n := len(l.Entries); n > 0 {
			// Into the newest entry, so that the log keeps at most one
			// entry per admitted request however many settles take more.
			l.Entries[n-1].N += delta
			l.Units += delta
			return l.Entries[n-1].T + period
		}
		return l.Apply(now, r, delta)
	case delta == 0:
		return expireAt
	}
	i := sort.Search(len(l.Entries), func(i int) bool { return l.Entries[i].T >= at })
	if i == len(l.Entries) || l.Entries[i].T != at {
		return expireAt
	}
	take := min(l.Entries[i].N, -max(delta, -math.MaxInt64)) // -MinInt64 overflows
	l.Entries[i].N -= take
	l.Units -= take
	if l.Entries[i].N == 0 {
		l.Entries = append(l.Entries[:i], l.Entries[i+1:]...)
	}
	if len(l.Entries) == 0 {
		return now
	}
	return l.Entries[len(l.Entries)-1].T + period
}

// addSat returns a+b for b >= 0, saturating at math.MaxInt64.
func addSat(a, b int64) int64 {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}
