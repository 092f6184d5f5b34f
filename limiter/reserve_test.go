package limiter

import (
	"errors"
	"fmt"
	"math"
	"math/big"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"
	"unsafe"
)

// us0 is t0 in microseconds: the ID Add gives at t0 on a fresh key.
const us0 = t0 / 1000 // 1735689600000000

// TestReservationsAdd steps Add through explicit instants: the ID is now in
// µs, or LastID+1 when that is not higher (same µs, clock back, negative
// instants).
func TestReservationsAdd(t *testing.T) {
	type step struct {
		now, at, deadline, reserved, unit int64
		wantID                            int64
	}
	for _, tc := range []struct {
		name   string
		lastID int64 // LastID before the first step
		steps  []step
	}{
		{"now in µs, then LastID+1 while not higher", 0, []step{
			{now: t0, at: t0, deadline: t0 + s, reserved: 5, unit: s, wantID: us0},
			// Same instant: one more.
			{now: t0, at: t0, deadline: t0 + s, reserved: 1, unit: s, wantID: us0 + 1},
			// 999 ns later, still µs us0: one more.
			{now: t0 + 999, at: t0 + 999, deadline: t0 + 2*s, reserved: 1, unit: s, wantID: us0 + 2},
			// 10 µs later: now's µs is higher than LastID.
			{now: t0 + 10_000, at: t0 + 10_000, deadline: t0 + 2*s, reserved: 3, unit: s, wantID: us0 + 10},
			// 10_999 ns is still µs us0+10: one more than LastID.
			{now: t0 + 10_999, at: t0 + 10_999, deadline: t0 + 2*s, reserved: 3, unit: s, wantID: us0 + 11},
			// The clock went back 1 s: still increasing.
			{now: t0 - s, at: t0 - s, deadline: t0, reserved: 2, unit: s, wantID: us0 + 12},
			{now: t0 + 20_000, at: t0 + 20_000, deadline: t0 + s, reserved: 2, unit: s, wantID: us0 + 20},
		}},
		{"negative instants on a fresh key start at 1", 0, []step{
			{now: -1500, at: -1500, deadline: 0, reserved: 1, unit: 1, wantID: 1}, // floor(-1.5) = -2 <= 0
			{now: 2500, at: 2500, deadline: 3000, reserved: 1, unit: 1, wantID: 2},
			{now: 5500, at: 5500, deadline: 6000, reserved: 1, unit: 1, wantID: 5},
		}},
		{"LastID kept from records already forgotten", us0 + 500, []step{
			{now: t0, at: t0, deadline: t0 + s, reserved: 7, unit: 100 * ms, wantID: us0 + 501},
		}},
	} {
		rs := Reservations{LastID: tc.lastID}
		for i, sp := range tc.steps {
			id, err := rs.Add(sp.now, sp.at, sp.deadline, sp.reserved, sp.unit)
			if err != nil || id != sp.wantID || rs.LastID != sp.wantID {
				t.Fatalf("%s: step %d: Add at t0%+d = %d, %v (LastID %d), want %d", tc.name, i, sp.now-t0, id, err, rs.LastID, sp.wantID)
			}
			want := Reservation{ID: sp.wantID, At: sp.at, Deadline: sp.deadline, Reserved: sp.reserved, Actual: -1, Unit: sp.unit}
			if got := rs.List[len(rs.List)-1]; got != want {
				t.Fatalf("%s: step %d: recorded %+v, want %+v", tc.name, i, got, want)
			}
			if rs.Open(math.MinInt64) != i+1 || len(rs.List) != i+1 {
				t.Fatalf("%s: step %d: %d records, %d open", tc.name, i, len(rs.List), rs.Open(math.MinInt64))
			}
		}
	}
}

// TestReservationsCap fills a key to MaxReservations: the next Add fails
// and changes nothing while they are all alive; once one has ended, Add
// forgets it and works again, the ID still increasing.
func TestReservationsCap(t *testing.T) {
	var rs Reservations
	for i := range MaxReservations {
		// Deadlines t0+10s+i: the first record ends first.
		if _, err := rs.Add(t0, t0, t0+10*s+int64(i), 1, s); err != nil {
			t.Fatalf("Add %d: %v", i, err)
		}
	}
	last := rs.LastID
	if last != us0+MaxReservations-1 {
		t.Fatalf("LastID %d, want %d", last, us0+MaxReservations-1)
	}
	id, err := rs.Add(t0+5*s, t0+5*s, t0+60*s, 1, s)
	if !errors.Is(err, ErrTooManyReservations) || id != 0 || len(rs.List) != MaxReservations || rs.LastID != last {
		t.Fatalf("Add at the cap: %d, %v, %d records, LastID %d", id, err, len(rs.List), rs.LastID)
	}
	// At t0+10s the first record is alive (now == Deadline): still full.
	if _, err := rs.Add(t0+10*s, t0+10*s, t0+60*s, 1, s); !errors.Is(err, ErrTooManyReservations) {
		t.Fatalf("Add at t0+10s: %v, want ErrTooManyReservations", err)
	}
	if n := rs.Live(t0 + 10*s); n != MaxReservations {
		t.Fatalf("Live(t0+10s) = %d", n)
	}
	// One ns later it has ended: Add forgets it and records the new one.
	now := t0 + 10*s + 1
	if n := rs.Live(now); n != MaxReservations-1 {
		t.Fatalf("Live(t0+10s+1) = %d, want %d", n, MaxReservations-1)
	}
	id, err = rs.Add(now, now, t0+60*s, 1, s)
	if err != nil || id != now/1000 || len(rs.List) != MaxReservations {
		t.Fatalf("Add after the first ended: %d, %v, %d records; want id %d", id, err, len(rs.List), now/1000)
	}
	if rs.Find(now, us0) != nil {
		t.Fatalf("the ended reservation %d is still found", us0)
	}
	if _, err := rs.Add(now, now, t0+60*s, 1, s); !errors.Is(err, ErrTooManyReservations) {
		t.Fatalf("Add at the cap again: %v", err)
	}
	// Open counts the alive, unsettled ones.
	if _, _, _, err := rs.Settle(now, us0+1, 1); err != nil {
		t.Fatal(err)
	}
	if n := rs.Open(now); n != MaxReservations-1 {
		t.Fatalf("Open = %d, want %d", n, MaxReservations-1)
	}
	if n := rs.Open(t0 + 10*s + 3); n != MaxReservations-2 {
		t.Fatalf("Open once the third has ended = %d, want %d", n, MaxReservations-2)
	}
	// Full, none ended, one settled: Add forgets the settled one.
	if !rs.CanAdd(now) {
		t.Fatal("CanAdd with a settled reservation: false")
	}
	id, err = rs.Add(now, now, t0+60*s, 1, s)
	if err != nil || id != now/1000+1 || len(rs.List) != MaxReservations || rs.Find(now, us0+1) != nil {
		t.Fatalf("Add with a settled reservation at the cap: %d, %v, %d records, settled one found: %v",
			id, err, len(rs.List), rs.Find(now, us0+1) != nil)
	}
	if rs.CanAdd(now) {
		t.Fatal("CanAdd with every reservation open: true")
	}
}

// TestReservationsTidy: Tidy scans at most once per tidyEvery; what it
// keeps past its deadline meanwhile is invisible.
func TestReservationsTidy(t *testing.T) {
	var rs Reservations
	for i := range 4 {
		if _, err := rs.Add(t0, t0, t0+int64(i+1)*100, 1, s); err != nil {
			t.Fatal(err)
		}
	}
	rs.Tidy(t0 + 150) // the first ended: a scan
	if len(rs.List) != 3 {
		t.Fatalf("Tidy at t0+150: %d records, want 3", len(rs.List))
	}
	rs.Tidy(t0 + 350) // two more ended, within tidyEvery: no scan
	if len(rs.List) != 3 || rs.Live(t0+350) != 1 || rs.Open(t0+350) != 1 || rs.Find(t0+350, rs.List[0].ID) != nil {
		t.Fatalf("Tidy at t0+350: %d records, %d live, %d open", len(rs.List), rs.Live(t0+350), rs.Open(t0+350))
	}
	rs.Tidy(t0 + 150 + tidyEvery + 1) // past tidyEvery: a scan, all ended
	if len(rs.List) != 0 {
		t.Fatalf("Tidy after tidyEvery: %d records, want 0", len(rs.List))
	}
}

// TestReservationsCachedDeadlines: Prune skips its scan and Expiry reads
// the latest deadline from what Add and Prune remember; over random Adds,
// Prunes, settles and forgotten settled ones (at a small cap of deadlines
// bunched together), the list and Expiry always equal a full recount.
func TestReservationsCachedDeadlines(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 9))
	checks := 0
	for run := range 300 {
		var rs Reservations
		rs.StateExp = 1
		now := t0
		var ref []Reservation // the reservations alive, by brute force
		for range 200 {
			switch rng.IntN(4) {
			case 0, 1:
				d := now + rng.Int64N(3*s)
				if _, err := rs.Add(now, now, d, 1, s); err != nil {
					t.Fatal(err)
				}
			case 2:
				now += rng.Int64N(s)
			default:
				if len(rs.List) > 0 {
					r := rs.List[rng.IntN(len(rs.List))]
					rs.Settle(now, r.ID, 1)
				}
			}
			rs.Prune(now)
			ref = ref[:0]
			last := int64(math.MinInt64)
			for _, r := range rs.List {
				if now <= r.Deadline {
					ref = append(ref, r)
					last = max(last, r.Deadline)
				}
			}
			if len(ref) != len(rs.List) {
				t.Fatalf("run %d at t0%+d: Prune kept %d reservations, %d alive", run, now-t0, len(rs.List), len(ref))
			}
			want := int64(1)
			if len(ref) > 0 {
				want = max(1, (last+1e6-1)/1e6)
			}
			if got := rs.Expiry(); got != want {
				t.Fatalf("run %d at t0%+d: Expiry %d, want %d", run, now-t0, got, want)
			}
			checks++
		}
	}
	t.Logf("%d states checked against a full recount", checks)
}

// resList builds Reservations with the given IDs, deadlines and actuals
// (reserved 10, at t0, unit 1s).
func resList(recs ...[3]int64) Reservations {
	var rs Reservations
	for _, r := range recs {
		rs.List = append(rs.List, Reservation{ID: r[0], At: t0, Deadline: r[1], Reserved: 10, Actual: r[2], Unit: s})
		rs.LastID = r[0]
	}
	return rs
}

func ids(rs *Reservations) []int64 {
	var out []int64
	for _, r := range rs.List {
		out = append(out, r.ID)
	}
	return out
}

// TestReservationsPrune: a reservation is alive up to and including its
// deadline and forgotten one ns after, settled or not; the order and
// LastID stay.
func TestReservationsPrune(t *testing.T) {
	for _, tc := range []struct {
		now  int64
		want []int64
	}{
		{t0, []int64{1, 2, 3, 4}},
		{t0 + s, []int64{1, 2, 3, 4}},  // now == deadline of 1: alive
		{t0 + s + 1, []int64{2, 3, 4}}, // 1 ended
		{t0 + 2*s - 1, []int64{2, 3, 4}},
		{t0 + 2*s, []int64{2, 3, 4}},    // 2 and 4 (settled) end at 2s
		{t0 + 2*s + 1, []int64{3}},      // 3 (settled) ends at 3s
		{t0 + 3*s, []int64{3}},          // settled: kept until its deadline
		{t0 + 3*s + 1, nil},             // all ended
		{t0 - 5*s, []int64{1, 2, 3, 4}}, // clock back
		{math.MinInt64, []int64{1, 2, 3, 4}},
		{math.MaxInt64, nil},
	} {
		rs := resList([3]int64{1, t0 + s, -1}, [3]int64{2, t0 + 2*s, -1}, [3]int64{3, t0 + 3*s, 4}, [3]int64{4, t0 + 2*s, 0})
		rs.Prune(tc.now)
		if got := ids(&rs); !slices.Equal(got, tc.want) || rs.LastID != 4 {
			t.Errorf("Prune(t0%+d): IDs %v LastID %d, want %v LastID 4", tc.now-t0, got, rs.LastID, tc.want)
		}
	}
	// Memory follows the records held: a list mostly pruned is copied
	// into a smaller one.
	var rs Reservations
	for i := range 1000 {
		rs.Add(t0, t0, t0+int64(i), 1, s)
	}
	big := cap(rs.List)
	rs.Prune(t0 + 990)
	if len(rs.List) != 10 || cap(rs.List) >= big/4 || rs.List[0].Deadline != t0+990 {
		t.Fatalf("after pruning 990 of 1000: %d records, capacity %d (was %d), first deadline t0%+d", len(rs.List), cap(rs.List), big, rs.List[0].Deadline-t0)
	}
	rs.Prune(t0 + 2000)
	// A capacity of up to 16 records is kept.
	if len(rs.List) != 0 || cap(rs.List) > 16 || rs.MemSize() != reservationsBytes+cap(rs.List)*ReservationBytes {
		t.Fatalf("all pruned: %d records, capacity %d, MemSize %d", len(rs.List), cap(rs.List), rs.MemSize())
	}
}

// TestReservationsFind: by ID, alive at now (deadline included), as a
// pointer into the list.
func TestReservationsFind(t *testing.T) {
	rs := resList([3]int64{10, t0 + s, -1}, [3]int64{20, t0 + 3*s, 5}, [3]int64{30, t0 + 2*s, -1})
	for _, tc := range []struct {
		now, id int64
		found   bool
	}{
		{t0, 10, true},
		{t0, 20, true},
		{t0, 30, true},
		{t0 + s, 10, true},      // at its deadline
		{t0 + s + 1, 10, false}, // past it, not yet pruned
		{t0 + s + 1, 20, true},
		{t0 + 2*s + 1, 30, false},
		{t0 + 2*s + 1, 20, true}, // settled, still kept
		{t0 + 3*s + 1, 20, false},
		{t0, 0, false},
		{t0, 5, false},
		{t0, 15, false},
		{t0, 31, false},
		{t0, -1, false},
		{t0, math.MaxInt64, false},
		{t0, math.MinInt64, false},
	} {
		p := rs.Find(tc.now, tc.id)
		if (p != nil) != tc.found || (p != nil && p.ID != tc.id) {
			t.Errorf("Find(t0%+d, %d) = %+v, want found %v", tc.now-t0, tc.id, p, tc.found)
		}
	}
	if p := rs.Find(t0, 20); p != &rs.List[1] {
		t.Errorf("Find returned %p, want a pointer into the list %p", p, &rs.List[1])
	}
	var empty Reservations
	if p := empty.Find(t0, 1); p != nil {
		t.Errorf("Find on no reservations: %+v", p)
	}
}

// TestReservationsSettle steps the records of one key through settles at
// explicit instants: each reservation reserved 10 units.
func TestReservationsSettle(t *testing.T) {
	type step struct {
		now, id, actual int64
		wantDelta       int64
		wantApply       bool
		wantErr         error
		wantActual      int64 // Actual of the returned reservation (-2: none returned)
		wantOpen        int
	}
	rs := resList([3]int64{1, t0 + s, -1}, [3]int64{2, t0 + s, -1}, [3]int64{3, t0 + s, -1}, [3]int64{4, t0 + s, -1}, [3]int64{5, t0 + 2*s, -1})
	for i, sp := range []step{
		// Settle down: 4 of 10 used, 6 given back.
		{t0 + 100*ms, 1, 4, -6, true, nil, 4, 4},
		// The same settle again answers the same and applies nothing.
		{t0 + 200*ms, 1, 4, -6, false, nil, 4, 4},
		// Another actual: refused, the reservation as settled returned.
		{t0 + 200*ms, 1, 5, 0, false, ErrSettled, 4, 4},
		{t0 + 200*ms, 1, 0, 0, false, ErrSettled, 4, 4},
		// Settle up: 25 used, 15 more taken.
		{t0 + 300*ms, 2, 25, 15, true, nil, 25, 3},
		{t0 + 300*ms, 2, 25, 15, false, nil, 25, 3},
		// Cancel: actual 0 gives back all 10; cancel again is the same.
		{t0 + 400*ms, 3, 0, -10, true, nil, 0, 2},
		{t0 + 400*ms, 3, 0, -10, false, nil, 0, 2},
		{t0 + 400*ms, 3, 10, 0, false, ErrSettled, 0, 2},
		// Exactly the reserved units: delta 0, still settled once.
		{t0 + 500*ms, 4, 10, 0, true, nil, 10, 1},
		{t0 + 500*ms, 4, 10, 0, false, nil, 10, 1},
		// At the deadline it still settles the same; after it, unknown.
		{t0 + s, 1, 4, -6, false, nil, 4, 1},
		{t0 + s + 1, 1, 4, 0, false, ErrNoReservation, -2, 1},
		{t0 + s + 1, 5, 0, -10, true, nil, 0, 0},
		// Unknown IDs.
		{t0, 6, 1, 0, false, ErrNoReservation, -2, 0},
		{t0, 0, 1, 0, false, ErrNoReservation, -2, 0},
		// Past the deadline of 5 (open or not): unknown.
		{t0 + 2*s + 1, 5, 0, 0, false, ErrNoReservation, -2, 0},
		// Actual huge: delta = MaxInt64-10, no overflow.
	} {
		r, delta, apply, err := rs.Settle(sp.now, sp.id, sp.actual)
		where := fmt.Sprintf("step %d: Settle(t0%+d, %d, %d)", i, sp.now-t0, sp.id, sp.actual)
		if !errors.Is(err, sp.wantErr) || delta != sp.wantDelta || apply != sp.wantApply {
			t.Fatalf("%s = delta %d apply %v err %v, want %d %v %v", where, delta, apply, err, sp.wantDelta, sp.wantApply, sp.wantErr)
		}
		switch {
		case sp.wantActual == -2 && r != (Reservation{}):
			t.Fatalf("%s: returned %+v, want none", where, r)
		case sp.wantActual != -2 && (r.ID != sp.id || r.Actual != sp.wantActual || r.Reserved != 10):
			t.Fatalf("%s: returned %+v, want ID %d Actual %d", where, r, sp.id, sp.wantActual)
		}
		if rs.Open(math.MinInt64) != sp.wantOpen {
			t.Fatalf("%s: %d open, want %d", where, rs.Open(math.MinInt64), sp.wantOpen)
		}
	}

	// Extremes: a reservation of MaxInt64 units cancelled, one of 0 units
	// settled with MaxInt64: the delta does not overflow.
	rs = Reservations{}
	a, _ := rs.Add(t0, t0, t0+s, math.MaxInt64, s)
	b, _ := rs.Add(t0, t0, t0+s, 0, s)
	if _, d, ok, err := rs.Settle(t0, a, 0); err != nil || !ok || d != -math.MaxInt64 {
		t.Errorf("cancel of MaxInt64 units: delta %d apply %v err %v", d, ok, err)
	}
	if _, d, ok, err := rs.Settle(t0, b, math.MaxInt64); err != nil || !ok || d != math.MaxInt64 {
		t.Errorf("settle of 0 units with MaxInt64: delta %d apply %v err %v", d, ok, err)
	}
}

// TestReservationsSettleNegative: an actual below zero is refused and
// leaves the reservation open. (Accepting -1 stored Actual -1, the mark of
// an open reservation: each repeat applied the delta again.)
func TestReservationsSettleNegative(t *testing.T) {
	var rs Reservations
	id, _ := rs.Add(t0, t0, t0+s, 5, s)
	for _, actual := range []int64{-1, -2, math.MinInt64} {
		r, d, apply, err := rs.Settle(t0, id, actual)
		if !errors.Is(err, ErrNegative) || apply || d != 0 || r != (Reservation{}) {
			t.Fatalf("Settle with actual %d: %+v delta %d apply %v err %v, want ErrNegative", actual, r, d, apply, err)
		}
	}
	if rs.Open(math.MinInt64) != 1 {
		t.Fatalf("%d open after refused settles, want 1", rs.Open(math.MinInt64))
	}
	if _, d, apply, err := rs.Settle(t0, id, 2); err != nil || !apply || d != -3 {
		t.Fatalf("Settle with 2 after: delta %d apply %v err %v", d, apply, err)
	}
}

// TestReservationsExpiry: 0 (never) while the state never ends, else the
// later of StateExp and every deadline rounded up to a millisecond.
func TestReservationsExpiry(t *testing.T) {
	const ms0 = t0 / ms // 1735689600000
	for _, tc := range []struct {
		stateExp  int64
		deadlines []int64
		want      int64
	}{
		{0, nil, 0},
		{0, []int64{t0 + s}, 0},
		{ms0, nil, ms0},
		{ms0 + 5000, []int64{t0 + s, t0 + 2*s}, ms0 + 5000}, // the state ends last
		{ms0, []int64{t0 + s, t0 + 3*s, t0 + 2*s}, ms0 + 3000},
		{ms0, []int64{t0 + s + 1}, ms0 + 1001},      // 1 ns past a ms: rounded up
		{ms0, []int64{t0 + s + ms - 1}, ms0 + 1001}, // just under the next ms
		{ms0, []int64{t0 + s + ms}, ms0 + 1001},     // exactly a ms
		{ms0, []int64{t0 - s}, ms0},                 // a deadline before the state's end
		{1, []int64{-1}, 1},                         // negative: ceil(-1 ns) = 0 ms
		{-5, []int64{-1_500_000}, -1},               // ceil(-1.5 ms) = -1
		{-5, []int64{-2_000_000}, -2},
		{1, []int64{math.MaxInt64}, math.MaxInt64/ms + 1},
	} {
		rs := Reservations{StateExp: tc.stateExp}
		for i, d := range tc.deadlines {
			rs.List = append(rs.List, Reservation{ID: int64(i + 1), Deadline: d, Actual: -1})
		}
		if got := rs.Expiry(); got != tc.want {
			t.Errorf("StateExp %d deadlines %v: Expiry %d, want %d", tc.stateExp, tc.deadlines, got, tc.want)
		}
	}
}

// TestReservationsMemSize: the record and header sizes the keyspace
// accounts are the real ones (the header rounded to its 64-byte allocation
// size class), and MemSize follows the capacity.
func TestReservationsMemSize(t *testing.T) {
	if n := unsafe.Sizeof(Reservation{}); n != ReservationBytes {
		t.Errorf("Reservation is %d bytes, ReservationBytes says %d", n, ReservationBytes)
	}
	if n := unsafe.Sizeof(Reservations{}); n > reservationsBytes || reservationsBytes > 64 {
		t.Errorf("Reservations is %d bytes, reservationsBytes says %d", n, reservationsBytes)
	}
	var rs Reservations
	if n := rs.MemSize(); n != 64 {
		t.Errorf("empty: MemSize %d, want 64", n)
	}
	rs.List = make([]Reservation, 3, 8)
	if n := rs.MemSize(); n != 64+8*48 {
		t.Errorf("capacity 8: MemSize %d, want %d", n, 64+8*48)
	}
}

// TestFixedSettle applies settles to explicit fixed-window states (period
// 1 s, windows aligned on t0).
func TestFixedSettle(t *testing.T) {
	w0 := t0 / s
	for _, tc := range []struct {
		name        string
		st          FixedState
		exists      bool
		now, at     int64
		delta       int64
		want        FixedState
		wantStore   bool
		wantExpires int64
	}{
		{"give back in the same window", FixedState{w0, 5}, true, t0 + 500*ms, t0 + 100*ms, -3, FixedState{w0, 2}, true, t0 + s},
		{"give back at the window's last ns", FixedState{w0, 5}, true, t0 + s - 1, t0, -5, FixedState{w0, 0}, true, t0 + s},
		{"give back more than counted: zero", FixedState{w0, 2}, true, t0 + 500*ms, t0, -5, FixedState{w0, 0}, true, t0 + s},
		{"give back on a zero count: nothing to store", FixedState{w0, 0}, true, t0 + 500*ms, t0, -1, FixedState{w0, 0}, false, t0 + s},
		{"window ended: give-back lost", FixedState{w0, 5}, true, t0 + s, t0 + s - 1, -3, FixedState{w0 + 1, 0}, false, t0 + 2*s},
		{"window ended, the new one counts: lost", FixedState{w0 + 1, 4}, true, t0 + s + 1, t0 + 100*ms, -3, FixedState{w0 + 1, 4}, false, t0 + 2*s},
		{"absent state: give-back lost", FixedState{w0, 9}, false, t0 + 500*ms, t0, -3, FixedState{w0, 0}, false, t0 + s},
		{"take more beyond the limit: debt", FixedState{w0, 5}, true, t0 + 500*ms, t0, 4, FixedState{w0, 9}, true, t0 + s},
		{"take more, window ended: the current window", FixedState{w0, 5}, true, t0 + 2*s + 5, t0, 2, FixedState{w0 + 2, 2}, true, t0 + 3*s},
		{"take more on an absent state", FixedState{w0, 9}, false, t0 + 500*ms, t0, 2, FixedState{w0, 2}, true, t0 + s},
		{"take more saturates", FixedState{w0, math.MaxInt64 - 1}, true, t0, t0, 5, FixedState{w0, math.MaxInt64}, true, t0 + s},
		{"take MaxInt64 more", FixedState{w0, 3}, true, t0, t0, math.MaxInt64, FixedState{w0, math.MaxInt64}, true, t0 + s},
		{"give back MaxInt64", FixedState{w0, 10}, true, t0, t0, -math.MaxInt64, FixedState{w0, 0}, true, t0 + s},
		{"delta 0: nothing to store", FixedState{w0, 5}, true, t0 + 500*ms, t0, 0, FixedState{w0, 5}, false, t0 + s},
		{"delta 0 on an old window", FixedState{w0, 5}, true, t0 + 3*s, t0, 0, FixedState{w0 + 3, 0}, false, t0 + 4*s},
		// The clock went back to window w0 while w0+1 is stored: the
		// reservation was counted in w0+1 (At is in it).
		{"clock back: give back in the stored window", FixedState{w0 + 1, 5}, true, t0 + 500*ms, t0 + s + 10*ms, -2, FixedState{w0 + 1, 3}, true, t0 + 2*s},
		{"clock back: take more in the stored window", FixedState{w0 + 1, 5}, true, t0 + 500*ms, t0 + s + 10*ms, 2, FixedState{w0 + 1, 7}, true, t0 + 2*s},
		{"clock back: At in now's window, not the counted one: lost", FixedState{w0 + 1, 5}, true, t0 + 500*ms, t0 + 400*ms, -2, FixedState{w0 + 1, 5}, false, t0 + 2*s},
		// Before 1970: window -1 is [-1s, 0).
		{"negative instants", FixedState{-1, 3}, true, -1, -s, -1, FixedState{-1, 2}, true, 0},
		{"negative instants, At in window -2", FixedState{-1, 3}, true, -1, -s - 1, -1, FixedState{-1, 3}, false, 0},
	} {
		next, store, exp := FixedSettle(tc.st, tc.exists, tc.now, Rule{Period: s}, tc.at, tc.delta)
		if next != tc.want || store != tc.wantStore || exp != tc.wantExpires {
			t.Errorf("%s: FixedSettle(%+v, %v, t0%+d, Rule{Period: 1s}, t0%+d, %d) = %+v %v t0%+d, want %+v %v t0%+d", tc.name, tc.st, tc.exists, tc.now-t0, tc.at-t0, tc.delta,
				next, store, exp-t0, tc.want, tc.wantStore, tc.wantExpires-t0)
		}
	}
}

// TestSlidingSettle applies settles to explicit sliding-counter states
// (period 1 s, windows aligned on t0).
func TestSlidingSettle(t *testing.T) {
	w0 := t0 / s
	for _, tc := range []struct {
		name        string
		st          SlidingState
		exists      bool
		now, at     int64
		delta       int64
		want        SlidingState
		wantStore   bool
		wantExpires int64
	}{
		{"give back in the current window", SlidingState{w0, 4, 6}, true, t0 + 500*ms, t0 + ms, -2, SlidingState{w0, 4, 4}, true, t0 + 2*s},
		{"give back in the previous window (stored as current)", SlidingState{w0, 4, 6}, true, t0 + s + 1, t0 + ms, -2, SlidingState{w0 + 1, 4, 0}, true, t0 + 3*s},
		{"give back in the previous window (stored as previous)", SlidingState{w0, 4, 6}, true, t0 + 5*ms, t0 - 1, -3, SlidingState{w0, 1, 6}, true, t0 + 2*s},
		{"older window: lost", SlidingState{w0, 4, 6}, true, t0 + 2*s + 1, t0 + 1, -2, SlidingState{w0 + 2, 0, 0}, false, t0 + 4*s},
		{"older window, the previous one counts: lost", SlidingState{w0, 4, 6}, true, t0 + 5*ms, t0 - s - 1, -2, SlidingState{w0, 4, 6}, false, t0 + 2*s},
		{"give back more than the current count", SlidingState{w0, 4, 1}, true, t0, t0, -3, SlidingState{w0, 4, 0}, true, t0 + 2*s},
		{"give back more than the previous count", SlidingState{w0, 2, 1}, true, t0, t0 - s, -3, SlidingState{w0, 0, 1}, true, t0 + 2*s},
		{"give back on a zero current count", SlidingState{w0, 4, 0}, true, t0, t0, -1, SlidingState{w0, 4, 0}, false, t0 + 2*s},
		{"give back on a zero previous count", SlidingState{w0, 0, 4}, true, t0, t0 - 1, -1, SlidingState{w0, 0, 4}, false, t0 + 2*s},
		{"take more in the current window: debt", SlidingState{w0, 4, 6}, true, t0 + 500*ms, t0, 5, SlidingState{w0, 4, 11}, true, t0 + 2*s},
		{"take more after the window moved", SlidingState{w0, 4, 6}, true, t0 + s + 1, t0, 5, SlidingState{w0 + 1, 6, 5}, true, t0 + 3*s},
		{"take more saturates at MaxSlidingLimit", SlidingState{w0, 0, MaxSlidingLimit - 1}, true, t0, t0, 10, SlidingState{w0, 0, MaxSlidingLimit}, true, t0 + 2*s},
		{"take MaxInt64 more", SlidingState{w0, 3, 3}, true, t0, t0, math.MaxInt64, SlidingState{w0, 3, MaxSlidingLimit}, true, t0 + 2*s},
		{"give back MaxInt64", SlidingState{w0, 3, 7}, true, t0, t0, -math.MaxInt64, SlidingState{w0, 3, 0}, true, t0 + 2*s},
		{"absent: take more", SlidingState{w0, 9, 9}, false, t0 + 500*ms, t0, 3, SlidingState{w0, 0, 3}, true, t0 + 2*s},
		{"absent: give-back lost", SlidingState{w0, 9, 9}, false, t0 + 500*ms, t0, -3, SlidingState{w0, 0, 0}, false, t0 + 2*s},
		{"delta 0", SlidingState{w0, 4, 6}, true, t0 + 500*ms, t0, 0, SlidingState{w0, 4, 6}, false, t0 + 2*s},
		{"clock back: At in the stored window", SlidingState{w0 + 1, 4, 6}, true, t0 + 500*ms, t0 + s, -2, SlidingState{w0 + 1, 4, 4}, true, t0 + 3*s},
		{"clock back: At in the window before it", SlidingState{w0 + 1, 4, 6}, true, t0 + 500*ms, t0 + 500*ms, -2, SlidingState{w0 + 1, 2, 6}, true, t0 + 3*s},
		{"clock back: take more", SlidingState{w0 + 1, 4, 6}, true, t0 + 500*ms, t0, 1, SlidingState{w0 + 1, 4, 7}, true, t0 + 3*s},
	} {
		next, store, exp := SlidingSettle(tc.st, tc.exists, tc.now, Rule{Period: s}, tc.at, tc.delta)
		if next != tc.want || store != tc.wantStore || exp != tc.wantExpires {
			t.Errorf("%s: SlidingSettle(%+v, %v, t0%+d, Rule{Period: 1s}, t0%+d, %d) = %+v %v t0%+d, want %+v %v t0%+d", tc.name, tc.st, tc.exists, tc.now-t0, tc.at-t0, tc.delta,
				next, store, exp-t0, tc.want, tc.wantStore, tc.wantExpires-t0)
		}
	}
}

// TestLogSettle applies settles to explicit sliding logs (period 1 s).
func TestLogSettle(t *testing.T) {
	e := func(at, n int64) LogEntry { return LogEntry{T: t0 + at, N: n} }
	for _, tc := range []struct {
		name        string
		log         []LogEntry
		now, at     int64 // ns after t0
		delta       int64
		want        []LogEntry
		wantExpires int64 // ns after t0
	}{
		{"give back from its entry", []LogEntry{e(0, 3), e(100*ms, 5)}, 200 * ms, 100 * ms, -4,
			[]LogEntry{e(0, 3), e(100*ms, 1)}, 1100 * ms},
		{"give back from an entry merged with others at the same T", []LogEntry{e(0, 3), e(100*ms, 7)}, 200 * ms, 100 * ms, -5,
			[]LogEntry{e(0, 3), e(100*ms, 2)}, 1100 * ms},
		{"the emptied entry is removed", []LogEntry{e(0, 3), e(100*ms, 5)}, 200 * ms, 0, -3,
			[]LogEntry{e(100*ms, 5)}, 1100 * ms},
		{"the emptied newest entry is removed: expiry from the one before", []LogEntry{e(0, 3), e(100*ms, 5)}, 200 * ms, 100 * ms, -5,
			[]LogEntry{e(0, 3)}, s},
		{"give back more than the entry holds", []LogEntry{e(0, 3), e(100*ms, 5)}, 200 * ms, 0, -10,
			[]LogEntry{e(100*ms, 5)}, 1100 * ms},
		{"give back MaxInt64", []LogEntry{e(0, 3), e(100*ms, 5)}, 200 * ms, 0, -math.MaxInt64,
			[]LogEntry{e(100*ms, 5)}, 1100 * ms},
		{"the last entry emptied: the log ends now", []LogEntry{e(0, 3)}, 200 * ms, 0, -3,
			nil, 200 * ms},
		{"entry still inside at now = T + period - 1", []LogEntry{e(0, 3), e(500*ms, 1)}, s - 1, 0, -1,
			[]LogEntry{e(0, 2), e(500*ms, 1)}, 1500 * ms},
		{"entry gone out of the window: lost", []LogEntry{e(0, 3), e(500*ms, 1)}, s, 0, -1,
			[]LogEntry{e(500*ms, 1)}, 1500 * ms},
		{"no entry at At: nothing", []LogEntry{e(0, 3), e(500*ms, 1)}, 600 * ms, 50 * ms, -1,
			[]LogEntry{e(0, 3), e(500*ms, 1)}, 1500 * ms},
		{"At after every entry: nothing", []LogEntry{e(0, 3)}, 600 * ms, 550 * ms, -1,
			[]LogEntry{e(0, 3)}, s},
		{"empty log: nothing, ends now", nil, 600 * ms, 0, -1,
			nil, 600 * ms},
		{"delta 0 drops the old entries only", []LogEntry{e(0, 3), e(500*ms, 1)}, 1200 * ms, 500 * ms, 0,
			[]LogEntry{e(500*ms, 1)}, 1500 * ms},
		{"take more: into the newest entry, beyond the limit", []LogEntry{e(0, 3)}, 400 * ms, 0, 4,
			[]LogEntry{e(0, 7)}, 1000 * ms},
		{"take more at the newest entry's T: merged", []LogEntry{e(0, 3), e(400*ms, 1)}, 400 * ms, 0, 4,
			[]LogEntry{e(0, 3), e(400*ms, 5)}, 1400 * ms},
		{"take more after the reservation's entry left", []LogEntry{e(0, 3)}, 1500 * ms, 0, 2,
			[]LogEntry{e(1500*ms, 2)}, 2500 * ms},
		{"take more, clock back: at the newest entry", []LogEntry{e(0, 3), e(400*ms, 1)}, 300 * ms, 0, 2,
			[]LogEntry{e(0, 3), e(400*ms, 3)}, 1400 * ms},
		{"take more saturates the units", []LogEntry{e(0, 5)}, 1, 0, math.MaxInt64,
			[]LogEntry{e(0, math.MaxInt64)}, s},
		{"take more on an empty log: recorded at now", nil, 400 * ms, 0, 4,
			[]LogEntry{e(400*ms, 4)}, 1400 * ms},
	} {
		l := Log{Entries: slices.Clone(tc.log)}
		for _, en := range tc.log {
			l.Units += en.N
		}
		exp := l.Settle(t0+tc.now, Rule{Period: s}, t0+tc.at, tc.delta)
		var units int64
		for _, en := range tc.want {
			units += en.N
		}
		if !slices.Equal(l.Entries, tc.want) || l.Units != units || exp != t0+tc.wantExpires {
			t.Errorf("%s: Settle(t0%+d, 1s, t0%+d, %d) = %v units %d expires t0%+d, want %v units %d expires t0%+d",
				tc.name, tc.now, tc.at, tc.delta, l.Entries, l.Units, exp-t0, tc.want, units, tc.wantExpires)
		}
	}
	// After a saturated take the log still refuses: nothing wrapped.
	l := Log{Entries: []LogEntry{{T: t0, N: 5}}, Units: 5}
	l.Settle(t0+1, Rule{Period: s}, t0, math.MaxInt64)
	l.Settle(t0+2, Rule{Period: s}, t0, math.MaxInt64)
	if d := l.Decide(t0+3, Rule{Limit: 10, Period: s}, 1); !d.Limited || l.Units != math.MaxInt64 {
		t.Errorf("after two MaxInt64 takes: units %d, %s, want limited", l.Units, ds(d))
	}
}

// ---- Property tests ----

// The kinds a reservation sim drives.
const (
	kindFixed = iota
	kindSliding
	kindLog
	numKinds
)

var kindNames = [numKinds]string{"fixed", "sliding", "log"}

// resSim drives one key of one limiter kind the way the command layer
// does: a reservation is decided and counted by the kind's own decision
// (Fixed, Sliding, Log.Decide+Apply) with its quantity, then recorded by
// Add with At = now; plain requests go through the same decision; a settle
// prunes, calls Reservations.Settle and, when apply, the kind's settle
// function with r.At and the delta. Time never goes back.
//
// After every operation it checks (debt = the positive deltas settled):
//
//   - fixed window: the count stored for window w is in [0, limit +
//     debt[w]], debt[w] being the sum of the positive deltas settled while
//     w was the current window;
//   - sliding counter: cur in [0, limit + debt[w]], prev in [0, limit +
//     debt[w-1]], and the estimate prev*(period-e)/period + cur <= limit +
//     debt[w-1] + debt[w] (an admission leaves it <= limit; until the next
//     one it only grows by debt, and at a window change the previous
//     window's count is at most limit + its debt);
//   - sliding log: Units is the sum of the entries, entries strictly
//     increasing in T with N > 0, and the units in (now-period, now] are at
//     most limit + the positive deltas settled in (now-period, now] (debt is
//     recorded at the settle's instant and leaves a period later);
//   - a give-back is exact while the reservation's units still count (its
//     window is current or, for the sliding counter, previous; its log
//     entry is inside the window): the count falls by exactly -delta,
//     never below 0; otherwise nothing changes;
//   - a second settle with the same actual returns the same reservation
//     and delta with apply false and leaves the records unchanged; another
//     actual gets ErrSettled; past the deadline ErrNoReservation;
//   - IDs strictly increase, records <= MaxReservations, Open() is the
//     number of records with Actual < 0.
type resSim struct {
	t                    testing.TB
	kind                 int
	period, limit, ttl   int64
	now                  int64
	fst                  FixedState
	sst                  SlidingState
	exists               bool
	log                  Log
	rs                   Reservations
	debt                 map[int64]int64 // fixed, sliding: window -> debt
	logDebt              []LogEntry      // log: (instant, units) of each take
	lastID               int64
	all                  map[int64]Reservation // every reservation made, as last seen
	ops, reserves, plain int
	settles, givebacks   int
	takes, repeats       int
	others, expired      int
	refused, unknown     int
	lost                 int
}

func newResSim(t testing.TB, kind int, period, limit, ttl, start int64) *resSim {
	return &resSim{t: t, kind: kind, period: period, limit: limit, ttl: ttl, now: start,
		debt: map[int64]int64{}, all: map[int64]Reservation{}}
}

func (m *resSim) fatalf(format string, args ...any) {
	m.t.Helper()
	m.t.Fatalf("%s period %d limit %d ttl %d at %d: %s", kindNames[m.kind], m.period, m.limit, m.ttl, m.now, fmt.Sprintf(format, args...))
}

// decide decides and counts q units at now; it reports whether they were
// admitted.
func (m *resSim) decide(q int64) bool {
	switch m.kind {
	case kindFixed:
		next, d, store, _ := Fixed(m.fst, m.exists, m.now, Rule{Limit: m.limit, Period: m.period}, q)
		if store {
			m.fst, m.exists = next, true
		}
		return !d.Limited
	case kindSliding:
		next, d, store, _ := Sliding(m.sst, m.exists, m.now, Rule{Limit: m.limit, Period: m.period}, q)
		if store {
			m.sst, m.exists = next, true
		}
		return !d.Limited
	default:
		d := m.log.Decide(m.now, Rule{Limit: m.limit, Period: m.period}, q)
		if !d.Limited {
			m.log.Apply(m.now, Rule{Period: m.period}, q)
		}
		return !d.Limited
	}
}

// window is floor(now/period) (instants are positive here).
func (m *resSim) window(at int64) int64 { return at / m.period }

// counted returns the units the reservation's units sit in while they
// still count (its window, or its log entry), and whether they count.
func (m *resSim) counted(at int64) (int64, bool) {
	w := m.window(m.now)
	switch m.kind {
	case kindFixed:
		if m.exists && m.fst.Window == w && m.window(at) == w {
			return m.fst.Count, true
		}
	case kindSliding:
		prev, cur := m.slidingNow()
		switch m.window(at) {
		case w:
			return cur, true
		case w - 1:
			return prev, true
		}
	default:
		for _, e := range m.log.Entries {
			if e.T == at && e.T > m.now-m.period {
				return e.N, true
			}
		}
	}
	return 0, false
}

// slidingNow returns the sliding counter's previous and current counts as
// of now's window.
func (m *resSim) slidingNow() (prev, cur int64) {
	w := m.window(m.now)
	if m.exists {
		switch m.sst.Window {
		case w:
			return m.sst.Prev, m.sst.Cur
		case w - 1:
			return m.sst.Cur, 0
		}
	}
	return 0, 0
}

func (m *resSim) reserve(q int64) {
	m.ops++
	m.rs.Prune(m.now)
	if len(m.rs.List) >= MaxReservations {
		if _, err := m.rs.Add(m.now, m.now, m.now+m.ttl, q, m.period); !errors.Is(err, ErrTooManyReservations) {
			m.fatalf("Add at the cap: %v", err)
		}
		return
	}
	if !m.decide(q) {
		m.refused++
		return
	}
	m.reserves++
	id, err := m.rs.Add(m.now, m.now, m.now+m.ttl, q, m.period)
	if err != nil {
		m.fatalf("Add: %v", err)
	}
	if id <= m.lastID || id != m.rs.LastID {
		m.fatalf("Add gave ID %d after %d (LastID %d)", id, m.lastID, m.rs.LastID)
	}
	m.lastID = id
	m.all[id] = m.rs.List[len(m.rs.List)-1]
}

func (m *resSim) request(q int64) {
	m.ops++
	m.plain++
	m.decide(q)
}

// measure returns what a settle may change, as of now: the count of
// now's window (fixed), the previous and current counts (sliding), the
// units inside the window (log).
func (m *resSim) measure() [2]int64 {
	switch m.kind {
	case kindFixed:
		if m.exists && m.fst.Window == m.window(m.now) {
			return [2]int64{m.fst.Count}
		}
		return [2]int64{}
	case kindSliding:
		prev, cur := m.slidingNow()
		return [2]int64{prev, cur}
	default:
		var live int64
		for _, e := range m.log.Entries {
			if e.T > m.now-m.period {
				live += e.N
			}
		}
		return [2]int64{live}
	}
}

// settle settles reservation id with actual, as CL.SETTLE (actual 0:
// CL.CANCEL).
func (m *resSim) settle(id, actual int64) {
	m.ops++
	before := slices.Clone(m.rs.List)
	known, seen := m.all[id]
	alive := seen && m.now <= known.Deadline
	m.rs.Prune(m.now)
	r, delta, apply, err := m.rs.Settle(m.now, id, actual)
	switch {
	case !alive:
		if !errors.Is(err, ErrNoReservation) || apply {
			m.fatalf("settle of %d (known %v, deadline %d): %v apply %v, want ErrNoReservation", id, seen, known.Deadline, err, apply)
		}
		if seen {
			m.expired++
		} else {
			m.unknown++
		}
	case known.Actual >= 0 && known.Actual != actual:
		if !errors.Is(err, ErrSettled) || apply || r != known {
			m.fatalf("settle of %d again with %d: %+v %v apply %v, want ErrSettled with %+v", id, actual, r, err, apply, known)
		}
		m.others++
	case known.Actual >= 0:
		if err != nil || apply || r != known || delta != actual-known.Reserved {
			m.fatalf("settle of %d again with %d: %+v delta %d %v apply %v, want %+v", id, actual, r, delta, err, apply, known)
		}
		m.repeats++
	default:
		want := known
		want.Actual = actual
		if err != nil || !apply || r != want || delta != actual-known.Reserved {
			m.fatalf("settle of %d with %d: %+v delta %d %v apply %v, want %+v", id, actual, r, delta, err, apply, want)
		}
		m.all[id] = r
	}
	if !apply {
		// Nothing changes but the pruning (and the limiter's state is
		// not touched: the caller applies nothing).
		kept := slices.DeleteFunc(before, func(r Reservation) bool { return m.now > r.Deadline })
		if len(kept) != len(m.rs.List) || len(kept) > 0 && !reflect.DeepEqual(kept, m.rs.List) {
			m.fatalf("a refused or repeated settle changed the records: %+v -> %+v", kept, m.rs.List)
		}
		return
	}
	m.settles++
	units, counts := m.counted(r.At)
	was := m.measure()
	switch m.kind {
	case kindFixed:
		next, store, exp := FixedSettle(m.fst, m.exists, m.now, Rule{Period: m.period}, r.At, delta)
		if exp != (next.Window+1)*m.period || next.Window != m.window(m.now) {
			m.fatalf("FixedSettle: %+v expires %d", next, exp)
		}
		if store {
			m.fst, m.exists = next, true
		}
		if delta > 0 {
			m.debt[next.Window] += delta
		}
	case kindSliding:
		next, store, exp := SlidingSettle(m.sst, m.exists, m.now, Rule{Period: m.period}, r.At, delta)
		if exp != (next.Window+2)*m.period || next.Window != m.window(m.now) {
			m.fatalf("SlidingSettle: %+v expires %d", next, exp)
		}
		if store {
			m.sst, m.exists = next, true
		}
		if delta > 0 {
			m.debt[next.Window] += delta
		}
	default:
		exp := m.log.Settle(m.now, Rule{Period: m.period}, r.At, delta)
		want := m.now
		if n := len(m.log.Entries); n > 0 {
			want = m.log.Entries[n-1].T + m.period
		}
		if exp != want {
			m.fatalf("Log.Settle expires %d, want %d", exp, want)
		}
		if delta > 0 {
			m.logDebt = append(m.logDebt, LogEntry{T: m.now, N: delta})
		}
	}
	now := m.measure()
	switch {
	case delta > 0:
		m.takes++
		// Taken in now's window (the current count, the log's newest
		// entry): the measure grows by exactly delta.
		i := 0
		if m.kind == kindSliding {
			i = 1
		}
		want := was
		want[i] += delta
		if want != now {
			m.fatalf("take of %d: %v -> %v", delta, was, now)
		}
	case delta < 0 && !counts:
		m.lost++
		if now != was {
			m.fatalf("give-back of %d after its units stopped counting: %v -> %v", -delta, was, now)
		}
	case delta < 0:
		m.givebacks++
		after, still := m.counted(r.At)
		switch {
		case units+delta < 0:
			m.fatalf("give-back of %d from %d units: the reservation's units were not all there", -delta, units)
		case m.kind == kindLog && units+delta == 0 && still:
			m.fatalf("give-back emptied the entry at %d but it stays (%d units)", r.At, after)
		case (m.kind != kindLog || units+delta > 0) && (!still || after != units+delta):
			m.fatalf("give-back of %d: %d units -> %d (%v), want %d", -delta, units, after, still, units+delta)
		}
	}
}

// check checks the invariants that hold between operations.
func (m *resSim) check() {
	m.t.Helper()
	if len(m.rs.List) > MaxReservations {
		m.fatalf("%d records", len(m.rs.List))
	}
	open := 0
	for i, r := range m.rs.List {
		if i > 0 && r.ID <= m.rs.List[i-1].ID {
			m.fatalf("IDs out of order: %d after %d", r.ID, m.rs.List[i-1].ID)
		}
		if r.Actual < 0 {
			open++
		}
	}
	if open != m.rs.Open(math.MinInt64) {
		m.fatalf("Open() = %d, counted %d", m.rs.Open(math.MinInt64), open)
	}
	w := m.window(m.now)
	switch m.kind {
	case kindFixed:
		if m.exists && (m.fst.Count < 0 || m.fst.Count > m.limit+m.debt[m.fst.Window]) {
			m.fatalf("window %d counts %d, limit %d + debt %d", m.fst.Window, m.fst.Count, m.limit, m.debt[m.fst.Window])
		}
	case kindSliding:
		prev, cur := m.slidingNow()
		if cur < 0 || prev < 0 || cur > m.limit+m.debt[w] || prev > m.limit+m.debt[w-1] {
			m.fatalf("prev %d cur %d: limit %d, debt %d then %d", prev, cur, m.limit, m.debt[w-1], m.debt[w])
		}
		// prev*(period-e) + cur*period <= (limit+debt)*period, exactly.
		e := m.now - w*m.period
		lhs := new(big.Int).Mul(big.NewInt(prev), big.NewInt(m.period-e))
		lhs.Add(lhs, new(big.Int).Mul(big.NewInt(cur), big.NewInt(m.period)))
		rhs := new(big.Int).Mul(big.NewInt(m.limit+m.debt[w-1]+m.debt[w]), big.NewInt(m.period))
		if lhs.Cmp(rhs) > 0 {
			m.fatalf("estimate prev %d cur %d at e %d above limit %d + debt %d + %d", prev, cur, e, m.limit, m.debt[w-1], m.debt[w])
		}
	default:
		var sum, live, debt int64
		for i, e := range m.log.Entries {
			if e.N <= 0 || i > 0 && e.T <= m.log.Entries[i-1].T {
				m.fatalf("log entries %v", m.log.Entries)
			}
			sum += e.N
			if e.T > m.now-m.period {
				live += e.N
			}
		}
		for _, d := range m.logDebt {
			if d.T > m.now-m.period {
				debt += d.N
			}
		}
		if sum != m.log.Units || live > m.limit+debt {
			m.fatalf("log %v: Units %d (sum %d), %d live units, limit %d + debt %d", m.log.Entries, m.log.Units, sum, live, m.limit, debt)
		}
	}
}

// step runs one random operation chosen by op (0..99) with the random
// values a and b.
func (m *resSim) step(op int, a, b uint64) {
	switch {
	case op < 25: // reserve 1..limit, sometimes more than fits
		m.reserve(1 + int64(a%uint64(m.limit+1)))
	case op < 35: // plain request
		m.request(1 + int64(a%uint64(m.limit)))
	case op < 65: // settle an open reservation, down or up
		if r, ok := m.pick(a, true); ok {
			m.settle(r.ID, int64(b%uint64(2*r.Reserved+2)))
		}
	case op < 72: // cancel
		if r, ok := m.pick(a, true); ok {
			m.settle(r.ID, 0)
		}
	case op < 80: // settle again, with the same actual or another
		if r, ok := m.pick(a, false); ok {
			actual := r.Actual
			if b%3 == 0 {
				actual = int64(b % uint64(2*r.Reserved+2))
			}
			m.settle(r.ID, actual)
		}
	case op < 83: // unknown ID
		m.settle(m.lastID+1+int64(a%3), int64(b%5))
	case op < 90: // a little time
		m.now += int64(a % uint64(m.period/4+1))
	case op < 95: // past a period
		m.now += m.period + int64(a%uint64(m.period))
	default: // past the deadline of the oldest records
		m.now += m.ttl + 1 + int64(a%uint64(m.ttl))
	}
	m.check()
}

// pick returns a reservation made so far: an open one when open, else a
// settled one; alive, or one time in five any.
func (m *resSim) pick(a uint64, open bool) (Reservation, bool) {
	var cands []Reservation
	anyAge := a%5 == 0
	a /= 5
	for _, r := range m.all {
		if open == (r.Actual < 0) && (anyAge || m.now <= r.Deadline) {
			cands = append(cands, r)
		}
	}
	if len(cands) == 0 {
		return Reservation{}, false
	}
	slices.SortFunc(cands, func(x, y Reservation) int { return int(min(max(x.ID-y.ID, -1), 1)) })
	return cands[a%uint64(len(cands))], true
}

// TestReservationsProperties runs random sequences of reserves, plain
// requests, settles up and down, cancels, repeated settles and time
// passing deadlines on each kind, checking resSim's invariants.
func TestReservationsProperties(t *testing.T) {
	rng := rand.New(rand.NewPCG(19, 1))
	sequences, length := 3000, 120
	if testing.Short() {
		sequences = 100
	}
	var total resSim
	for seq := range sequences {
		kind := seq % numKinds
		period := []int64{1, 7, 1000, s, 60 * s}[rng.IntN(5)]
		limit := 1 + rng.Int64N(12)
		ttl := max(1, period*(1+rng.Int64N(8))/2)
		start := t0 + rng.Int64N(2*period)
		m := newResSim(t, kind, period, limit, ttl, start)
		for range length {
			m.step(rng.IntN(100), rng.Uint64(), rng.Uint64())
		}
		total.ops += m.ops
		total.reserves += m.reserves
		total.refused += m.refused
		total.plain += m.plain
		total.settles += m.settles
		total.givebacks += m.givebacks
		total.takes += m.takes
		total.repeats += m.repeats
		total.others += m.others
		total.expired += m.expired
		total.unknown += m.unknown
		total.lost += m.lost
	}
	t.Logf("%d sequences, %d operations: %d reservations (%d refused), %d plain requests, %d settles applied (%d give-backs, %d lost give-backs, %d takes), %d repeated settles, %d with another actual, %d past the deadline, %d unknown IDs",
		sequences, total.ops, total.reserves, total.refused, total.plain, total.settles, total.givebacks, total.lost, total.takes, total.repeats, total.others, total.expired, total.unknown)
	if total.givebacks < 1000 || total.takes < 1000 || total.repeats < 300 || total.others < 100 || total.expired < 100 || total.refused < 100 || total.lost < 100 {
		t.Errorf("the generator covers too little")
	}
}

// FuzzReservations runs resSim over an operation sequence decoded from the
// input: byte 0 the kind, byte 1 the limit, byte 2 the period, then 3
// bytes per operation (the operation and two values).
func FuzzReservations(f *testing.F) {
	f.Add([]byte{0, 3, 2, 0, 2, 0, 40, 0, 1, 0, 9, 0, 85, 3, 0, 50, 0, 9, 75, 0, 0})
	f.Add([]byte{1, 5, 3, 0, 4, 0, 0, 1, 0, 40, 0, 20, 92, 0, 0, 40, 1, 3, 75, 0, 3, 97, 1, 0, 45, 1, 1})
	f.Add([]byte{2, 4, 2, 10, 3, 0, 12, 1, 0, 88, 0, 0, 45, 0, 0, 45, 1, 8, 66, 0, 0, 76, 0, 0, 93, 0, 0})
	f.Add([]byte{2, 1, 0, 0, 0, 0, 0, 0, 0, 60, 0, 200, 60, 1, 200, 99, 0, 0, 60, 0, 1})
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) < 3 {
			return
		}
		kind := int(data[0]) % numKinds
		limit := 1 + int64(data[1]%16)
		period := []int64{1, 3, 1000, s}[data[2]%4]
		m := newResSim(t, kind, period, limit, max(1, period*3/2), t0)
		for i := 3; i+2 < len(data) && i < 3*500; i += 3 {
			m.step(int(data[i])%100, uint64(data[i+1]), uint64(data[i+2]))
		}
	})
}

// TestReservationScenarios steps one key of each kind through reserves,
// plain requests and settles at explicit instants (period 1 s, limit 10,
// reservations live 5 s), as the command layer drives them: a debt refuses
// later requests until it recedes; a give-back after the units stopped
// counting is lost.
func TestReservationScenarios(t *testing.T) {
	type step struct {
		at      int64 // ns after t0
		op      byte  // 'r': reserve v; 'q': request v; 's': settle reservation n with actual v
		n, v    int64
		wantOK  bool  // admitted (r, q); applied (s)
		wantErr error // s
		want    [2]int64
	}
	for _, tc := range []struct {
		kind  int
		steps []step
	}{
		{kindFixed, []step{
			{at: 0, op: 'r', v: 8, wantOK: true, want: [2]int64{8}},
			{at: 100 * ms, op: 'q', v: 3, want: [2]int64{8}},
			{at: 200 * ms, op: 's', n: 0, v: 2, wantOK: true, want: [2]int64{2}}, // 6 given back
			{at: 300 * ms, op: 'q', v: 3, wantOK: true, want: [2]int64{5}},
			{at: 300 * ms, op: 'r', v: 3, wantOK: true, want: [2]int64{8}},
			{at: 300 * ms, op: 'r', v: 2, wantOK: true, want: [2]int64{10}},
			{at: 400 * ms, op: 's', n: 1, v: 7, wantOK: true, want: [2]int64{14}}, // 4 taken: debt
			{at: 500 * ms, op: 'q', v: 1, want: [2]int64{14}},
			{at: 600 * ms, op: 's', n: 1, v: 7, want: [2]int64{14}},                      // the same again: nothing
			{at: 600 * ms, op: 's', n: 1, v: 3, wantErr: ErrSettled, want: [2]int64{14}}, // another actual
			{at: s, op: 'q', v: 10, wantOK: true, want: [2]int64{10}},                    // the debt ended with its window
			{at: s + 100*ms, op: 's', n: 2, v: 0, wantOK: true, want: [2]int64{10}},      // cancel: its window ended, lost
			{at: 5*s + 300*ms, op: 's', n: 2, v: 0, want: [2]int64{}},                    // at its deadline: same answer
			{at: 5*s + 300*ms + 1, op: 's', n: 2, v: 0, wantErr: ErrNoReservation, want: [2]int64{}},
		}},
		{kindSliding, []step{
			{at: 0, op: 'r', v: 8, wantOK: true, want: [2]int64{0, 8}},
			{at: 200 * ms, op: 's', n: 0, v: 2, wantOK: true, want: [2]int64{0, 2}},
			{at: 300 * ms, op: 'r', v: 6, wantOK: true, want: [2]int64{0, 8}},
			{at: 300 * ms, op: 'r', v: 2, wantOK: true, want: [2]int64{0, 10}},
			{at: 400 * ms, op: 's', n: 1, v: 12, wantOK: true, want: [2]int64{0, 16}}, // 6 taken: debt
			{at: 900 * ms, op: 'q', v: 1, want: [2]int64{0, 16}},
			// 1.5 s: the estimate is 16/2 = 8.
			{at: 1500 * ms, op: 'q', v: 2, wantOK: true, want: [2]int64{16, 2}},
			{at: 1500 * ms, op: 'q', v: 1, want: [2]int64{16, 2}},
			// Cancel reservation 2 (2 units in the previous window): prev 16 -> 14,
			// the estimate 7 + 2 = 9.
			{at: 1500 * ms, op: 's', n: 2, v: 0, wantOK: true, want: [2]int64{14, 2}},
			{at: 1500 * ms, op: 'q', v: 1, wantOK: true, want: [2]int64{14, 3}},
			{at: 1500 * ms, op: 'q', v: 1, want: [2]int64{14, 3}},
		}},
		{kindLog, []step{
			{at: 0, op: 'r', v: 8, wantOK: true, want: [2]int64{8}},
			{at: 100 * ms, op: 'q', v: 3, want: [2]int64{8}},
			{at: 200 * ms, op: 's', n: 0, v: 2, wantOK: true, want: [2]int64{2}},
			{at: 300 * ms, op: 'r', v: 6, wantOK: true, want: [2]int64{8}},
			{at: 300 * ms, op: 'q', v: 2, wantOK: true, want: [2]int64{10}},        // merged with reservation 1's entry
			{at: 400 * ms, op: 's', n: 1, v: 10, wantOK: true, want: [2]int64{14}}, // 4 taken, into the newest entry (300 ms)
			{at: 500 * ms, op: 'q', v: 1, want: [2]int64{14}},
			{at: 1200 * ms, op: 'q', v: 1, want: [2]int64{12}},              // the entry at 0 left
			{at: 1300 * ms, op: 'r', v: 6, wantOK: true, want: [2]int64{6}}, // the entry at 300 ms (with the 4 taken) left
			{at: 1300 * ms, op: 's', n: 1, v: 0, wantErr: ErrSettled, want: [2]int64{6}},
			{at: 2300 * ms, op: 's', n: 2, v: 0, wantOK: true, want: [2]int64{}}, // its entry left: lost
			{at: 2300 * ms, op: 'q', v: 10, wantOK: true, want: [2]int64{10}},
		}},
	} {
		m := newResSim(t, tc.kind, s, 10, 5*s, t0)
		var ids []int64
		for i, sp := range tc.steps {
			m.now = t0 + sp.at
			m.rs.Prune(m.now)
			var ok bool
			var err error
			switch sp.op {
			case 'r':
				if ok = m.decide(sp.v); ok {
					id, aerr := m.rs.Add(m.now, m.now, m.now+m.ttl, sp.v, m.period)
					if aerr != nil {
						t.Fatalf("%s step %d: Add: %v", kindNames[tc.kind], i, aerr)
					}
					ids = append(ids, id)
				}
			case 'q':
				ok = m.decide(sp.v)
			case 's':
				var r Reservation
				var delta int64
				r, delta, ok, err = m.rs.Settle(m.now, ids[sp.n], sp.v)
				if ok {
					switch tc.kind {
					case kindFixed:
						if next, store, _ := FixedSettle(m.fst, m.exists, m.now, Rule{Period: m.period}, r.At, delta); store {
							m.fst, m.exists = next, true
						}
					case kindSliding:
						if next, store, _ := SlidingSettle(m.sst, m.exists, m.now, Rule{Period: m.period}, r.At, delta); store {
							m.sst, m.exists = next, true
						}
					default:
						m.log.Settle(m.now, Rule{Period: m.period}, r.At, delta)
					}
				}
			}
			if ok != sp.wantOK || !errors.Is(err, sp.wantErr) || m.measure() != sp.want {
				t.Errorf("%s step %d at t0+%dms (%c %d %d): ok %v err %v units %v, want %v %v %v", kindNames[tc.kind], i, sp.at/ms, sp.op, sp.n, sp.v,
					ok, err, m.measure(), sp.wantOK, sp.wantErr, sp.want)
			}
		}
	}
}
