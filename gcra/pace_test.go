package gcra

import (
	"errors"
	"math"
	"math/rand/v2"
	"testing"
)

// TestPace steps one key through explicit instants: 1 request per second,
// so the emission interval is 1 s.
func TestPace(t *testing.T) {
	type step struct {
		at      int64 // ns after t0
		p       PaceParams
		limited bool
		wait    int64 // ns
		reset   int64 // ns
		remain  int64
	}
	per := func(burst, q, maxWait int64) PaceParams {
		return PaceParams{MaxBurst: burst, Count: 1, PeriodNS: s, Quantity: q, MaxWait: maxWait}
	}
	for _, tc := range []struct {
		name  string
		steps []step
	}{
		{"no burst: now, then spaced turns up to max_wait, then refused", []step{
			{0, per(0, 1, 2*s), false, 0, 1 * s, 0},
			{0, per(0, 1, 2*s), false, 1 * s, 2 * s, 0},
			{0, per(0, 1, 2*s), false, 2 * s, 3 * s, 0}, // exactly max_wait
			// Past max_wait: refused, retry 3 s (CL.THROTTLE's), nothing booked.
			{0, per(0, 1, 2*s), true, 3 * s, 3 * s, 0},
			{0, per(0, 1, 2*s), true, 3 * s, 3 * s, 0},
			// 500 ms later the turn is 2.5 s away: still refused.
			{500 * ms, per(0, 1, 2*s), true, 2500 * ms, 2500 * ms, 0},
			// At 1 s it is 2 s away: admitted.
			{1 * s, per(0, 1, 2*s), false, 2 * s, 3 * s, 0},
			// Long after: the bucket is empty, go now.
			{10 * s, per(0, 1, 2*s), false, 0, 1 * s, 0},
		}},
		{"max_wait 0 admits only what goes now", []step{
			{0, per(0, 1, 0), false, 0, 1 * s, 0},
			{0, per(0, 1, 0), true, 1 * s, 1 * s, 0},
			{999 * ms, per(0, 1, 0), true, 1 * ms, 1 * ms, 0},
			{1 * s, per(0, 1, 0), false, 0, 1 * s, 0},
		}},
		{"burst 2: three go now, the next waits", []step{
			{0, per(2, 1, 5*s), false, 0, 1 * s, 2},
			{0, per(2, 1, 5*s), false, 0, 2 * s, 1},
			{0, per(2, 1, 5*s), false, 0, 3 * s, 0},
			{0, per(2, 1, 5*s), false, 1 * s, 4 * s, 0},
			{0, per(2, 1, 5*s), false, 2 * s, 5 * s, 0},
		}},
		{"quantity 3 books three intervals", []step{
			{0, per(0, 3, 10*s), true, -1, 0, 1}, // 3 > limit 1: never
			{0, per(2, 3, 10*s), false, 0, 3 * s, 0},
			{0, per(2, 3, 10*s), false, 3 * s, 6 * s, 0},
			{0, per(2, 1, 10*s), false, 4 * s, 7 * s, 0},
			{0, per(2, 3, 3*s), true, 7 * s, 7 * s, 0}, // turn at 7 s > 3 s
			{0, per(2, 3, 7*s), false, 7 * s, 10 * s, 0},
		}},
	} {
		var tat uint64
		exists := false
		for i, st := range tc.steps {
			r, err := Pace(t0+st.at, tat, exists, st.p)
			if err != nil {
				t.Fatalf("%s: step %d: %v", tc.name, i, err)
			}
			if r.Limited != st.limited || r.Wait != st.wait || r.ResetAfter != st.reset || r.Remaining != st.remain || r.Limit != st.p.MaxBurst+1 {
				t.Errorf("%s: step %d: have limited %v wait %d reset %d remaining %d limit %d, want %v %d %d %d %d",
					tc.name, i, r.Limited, r.Wait, r.ResetAfter, r.Remaining, r.Limit, st.limited, st.wait, st.reset, st.remain, st.p.MaxBurst+1)
			}
			if r.Store == r.Limited {
				t.Errorf("%s: step %d: Store %v with Limited %v", tc.name, i, r.Store, r.Limited)
			}
			if r.Store {
				if want := uint64(t0 + st.at + r.ResetAfter); r.NewTAT != want {
					t.Errorf("%s: step %d: NewTAT %d, want %d", tc.name, i, r.NewTAT, want)
				}
				if want := (int64(r.NewTAT) + ms - 1) / ms; r.ExpireAtMillis != want {
					t.Errorf("%s: step %d: ExpireAtMillis %d, want %d", tc.name, i, r.ExpireAtMillis, want)
				}
				tat, exists = r.NewTAT, true
			}
		}
	}
}

func TestPaceArgs(t *testing.T) {
	ok := PaceParams{MaxBurst: 0, Count: 1, PeriodNS: s, Quantity: 1}
	for _, tc := range []struct {
		p    PaceParams
		want error
	}{
		{PaceParams{MaxBurst: -1, Count: 1, PeriodNS: s, Quantity: 1}, ErrPaceArgs},
		{PaceParams{Count: 0, PeriodNS: s, Quantity: 1}, ErrPaceArgs},
		{PaceParams{Count: 1, PeriodNS: 0, Quantity: 1}, ErrPaceArgs},
		{PaceParams{Count: 1, PeriodNS: s, Quantity: 0}, ErrPaceArgs},
		{PaceParams{Count: 1, PeriodNS: s, Quantity: -1}, ErrPaceArgs},
		{PaceParams{Count: 1, PeriodNS: s, Quantity: 1, MaxWait: -1}, ErrPaceArgs},
		{PaceParams{Count: 1, PeriodNS: s, Quantity: 1, MaxWait: MaxPaceSpan + 1}, ErrPaceArgs},
		{PaceParams{Count: 1, PeriodNS: s, Quantity: 1, MaxWait: MaxPaceSpan}, nil},
		{PaceParams{Count: 2, PeriodNS: 1, Quantity: 1}, ErrZeroRate},
		// (MaxBurst+1) * 1 ns = 2^62: the largest tolerance.
		{PaceParams{MaxBurst: MaxPaceSpan - 1, Count: 1, PeriodNS: 1, Quantity: 1}, nil},
		{PaceParams{MaxBurst: MaxPaceSpan, Count: 1, PeriodNS: 1, Quantity: 1}, ErrPaceArgs},
		{PaceParams{MaxBurst: math.MaxInt64, Count: 1, PeriodNS: s, Quantity: 1}, ErrPaceArgs},
		{PaceParams{Count: 1, PeriodNS: s, Quantity: math.MaxInt64, MaxWait: MaxPaceSpan}, nil}, // never fits
		{ok, nil},
	} {
		r, err := Pace(t0, math.MaxUint64, true, tc.p)
		if !errors.Is(err, tc.want) {
			t.Errorf("Pace(%+v): error %v, want %v", tc.p, err, tc.want)
		}
		if err != nil && r != (PaceResult{}) {
			t.Errorf("Pace(%+v): %+v with its error", tc.p, r)
		}
	}
	// A stored TAT at the end of uint64 time: refused, the wait saturates.
	r, err := Pace(t0, math.MaxUint64, true, PaceParams{Count: 1, PeriodNS: s, Quantity: 1, MaxWait: MaxPaceSpan})
	if err != nil || !r.Limited || r.Wait != math.MaxInt64 || r.ResetAfter != math.MaxInt64 {
		t.Errorf("TAT 2^64-1: %+v, %v", r, err)
	}
}

func TestPaceAllocs(t *testing.T) {
	p := PaceParams{MaxBurst: 3, Count: 10, PeriodNS: s, Quantity: 2, MaxWait: s}
	if a := testing.AllocsPerRun(100, func() { _, _ = Pace(t0, t0+5e8, true, p) }); a != 0 {
		t.Errorf("Pace allocates %v times", a)
	}
}

// randPace returns valid parameters with small, readable figures.
func randPace(rng *rand.Rand) PaceParams {
	p := PaceParams{
		MaxBurst: rng.Int64N(6),
		Count:    rng.Int64N(20) + 1,
		PeriodNS: (rng.Int64N(5000) + 1) * ms,
		Quantity: rng.Int64N(4) + 1,
	}
	ei := p.PeriodNS / p.Count
	p.MaxWait = rng.Int64N(8) * ei
	if rng.IntN(3) == 0 {
		p.MaxWait += rng.Int64N(ei)
	}
	return p
}

// TestPaceProperties drives one key with random requests at random,
// non-decreasing instants (many callers at the same instant included) and
// checks every admitted booking: its wait is within [0, MaxWait]; turns in
// booking order are spaced by at least the later one's Quantity emission
// intervals, so no two callers share a slot; and over every window of
// turns the admitted units are within limit + rate x window.
func TestPaceProperties(t *testing.T) {
	runs := 3000
	if testing.Short() {
		runs = 300
	}
	rng := rand.New(rand.NewPCG(19, 2))
	var requests, admitted, waited, refused, windows int
	for range runs {
		base := randPace(rng)
		ei := (&Params{Count: base.Count, PeriodNS: base.PeriodNS}).emissionInterval()
		limit := base.MaxBurst + 1
		type booking struct{ turn, act, q int64 }
		var books []booking
		now := int64(t0)
		var tat uint64
		exists := false
		for range rng.IntN(60) + 1 {
			if rng.IntN(3) == 0 { // else another caller at the same instant
				now += rng.Int64N(3 * ei)
			}
			p := base
			p.Quantity = rng.Int64N(limit+1) + 1 // sometimes one too many
			p.MaxWait = base.MaxWait
			r, err := Pace(now, tat, exists, p)
			if err != nil {
				t.Fatalf("%+v: %v", p, err)
			}
			requests++
			if r.Limited {
				refused++
				if r.Store {
					t.Fatalf("%+v: refused but stores", p)
				}
				if p.Quantity > limit {
					if r.Wait != -1 {
						t.Fatalf("%+v: oversize request: wait %d, want -1", p, r.Wait)
					}
				} else if r.Wait <= p.MaxWait {
					t.Fatalf("%+v at %d: refused with a wait of %d <= max_wait", p, now, r.Wait)
				}
				continue
			}
			admitted++
			if r.Wait < 0 || r.Wait > p.MaxWait {
				t.Fatalf("%+v at %d: admitted with a wait of %d, max_wait %d", p, now, r.Wait, p.MaxWait)
			}
			if r.Wait > 0 {
				waited++
			}
			// The turn in GCRA's own terms: new TAT - tolerance (may be
			// before now when the bucket had room; the caller goes now).
			turn := int64(r.NewTAT) - limit*ei
			if n := len(books); n > 0 && turn-books[n-1].turn < p.Quantity*ei {
				t.Fatalf("%+v at %d: turn %d only %d ns after the previous %d", p, now, turn, turn-books[n-1].turn, books[n-1].turn)
			}
			if max(turn, now) != now+r.Wait {
				t.Fatalf("%+v at %d: turn %d, wait %d", p, now, turn, r.Wait)
			}
			books = append(books, booking{turn, now + r.Wait, p.Quantity})
			tat, exists = r.NewTAT, true
		}
		// The admitted units whose turns, or whose acting times (now +
		// wait), lie in any window [a, b] never exceed limit + (b-a)/ei.
		// Both are non-decreasing in booking order, so windows are runs.
		for i := range books {
			units := int64(0)
			for j := i; j < len(books); j++ {
				units += books[j].q
				if span := books[j].turn - books[i].turn; units > limit+span/ei {
					t.Fatalf("%+v: %d units with turns in %d ns, limit %d, ei %d", base, units, span, limit, ei)
				}
				if span := books[j].act - books[i].act; span < 0 || units > limit+span/ei {
					t.Fatalf("%+v: %d units acting in %d ns, limit %d, ei %d", base, units, span, limit, ei)
				}
				windows++
			}
		}
	}
	t.Logf("%d runs, %d requests: %d admitted (%d told to wait), %d refused; %d windows checked", runs, requests, admitted, waited, refused, windows)
	if admitted < requests/4 || waited < requests/10 || refused < requests/10 {
		t.Errorf("the generator covers too little: %d admitted, %d waited, %d refused of %d", admitted, waited, refused, requests)
	}
}

// TestPaceMaxWaitZeroIsDecide: with MaxWait 0, Pace admits, books and
// refuses exactly as Decide does on the same TAT (CL.PACE without MAXWAIT
// is CL.THROTTLE's admission).
func TestPaceMaxWaitZeroIsDecide(t *testing.T) {
	rng := rand.New(rand.NewPCG(19, 3))
	n := 50_000
	for range n {
		p := randPace(rng)
		p.MaxWait = 0
		now := t0 + rng.Int64N(1e12)
		tat := uint64(now) + uint64(rng.Int64N(4*p.PeriodNS)-p.PeriodNS)
		exists := rng.IntN(4) != 0
		pr, err1 := Pace(now, tat, exists, p)
		dr, err2 := Decide(now, tat, exists, Params{MaxBurst: p.MaxBurst, Count: p.Count, PeriodNS: p.PeriodNS, Quantity: p.Quantity})
		if err1 != nil || err2 != nil {
			t.Fatalf("%+v: %v %v", p, err1, err2)
		}
		if pr.Limited != dr.Limited || pr.Store != dr.Store || pr.NewTAT != dr.NewTAT {
			t.Fatalf("%+v at %d on %d (%v): Pace %+v, Decide %+v", p, now, tat, exists, pr, dr)
		}
		if pr.Limited && dr.RetryAfterMillis != -1 && (pr.Wait+ms-1)/ms != dr.RetryAfterMillis {
			t.Fatalf("%+v: Pace wait %d ns, Decide retry %d ms", p, pr.Wait, dr.RetryAfterMillis)
		}
	}
	t.Logf("%d cases agree with Decide", n)
}

// FuzzPace checks that Pace never panics on any arguments and that its
// result is consistent: an error for arguments out of range, otherwise a
// wait within [0, MaxWait] when admitted, a booking exactly when
// admitted, and a new TAT of max(TAT, now) + Quantity emission intervals.
func FuzzPace(f *testing.F) {
	f.Add(int64(t0), uint64(0), false, int64(0), int64(1), s, int64(1), 2*s)
	f.Add(int64(t0), uint64(t0+3*s), true, int64(2), int64(10), s, int64(2), 300*ms)
	f.Add(int64(t0), uint64(math.MaxUint64), true, int64(0), int64(1), s, int64(1), MaxPaceSpan)
	f.Add(int64(math.MaxInt64), uint64(0), true, MaxPaceSpan-1, int64(1), int64(1), int64(math.MaxInt64), MaxPaceSpan)
	f.Add(int64(math.MinInt64), uint64(1<<63), true, int64(-1), int64(0), int64(0), int64(0), int64(-1))
	f.Fuzz(func(t *testing.T, now int64, tat uint64, exists bool, b, c, per, q, w int64) {
		p := PaceParams{MaxBurst: b, Count: c, PeriodNS: per, Quantity: q, MaxWait: w}
		r, err := Pace(now, tat, exists, p)
		if err != nil {
			if r != (PaceResult{}) {
				t.Fatalf("%+v: %+v with %v", p, r, err)
			}
			return
		}
		if r.Limit != b+1 || r.Store == r.Limited || r.ResetAfter < 0 || r.Remaining < 0 || r.Remaining > r.Limit {
			t.Fatalf("%+v: inconsistent %+v", p, r)
		}
		if !r.Limited && (r.Wait < 0 || r.Wait > w) {
			t.Fatalf("%+v: admitted with wait %d", p, r.Wait)
		}
		if r.Limited && r.Wait != -1 && r.Wait <= w {
			t.Fatalf("%+v: refused with wait %d", p, r.Wait)
		}
		if r.Store {
			ei := (&Params{Count: c, PeriodNS: per}).emissionInterval()
			start := i128FromInt64(now)
			if exists && i128FromUint64(tat).cmp(start) > 0 {
				start = i128FromUint64(tat)
			}
			if want := start.add(mulInt64(ei, q)); want.lo != r.NewTAT {
				t.Fatalf("%+v: NewTAT %d, want %v", p, r.NewTAT, want.big())
			}
		}
	})
}

func BenchmarkPace(b *testing.B) {
	b.ReportAllocs()
	p := PaceParams{MaxBurst: 15, Count: 30, PeriodNS: 60 * s, Quantity: 1, MaxWait: 10 * s}
	now := int64(t0)
	var tat uint64
	var exists bool
	for range b.N {
		r, err := Pace(now, tat, exists, p)
		if err == nil && r.Store {
			tat, exists = r.NewTAT, true
		}
		now += 1_000_000 // 1 ms between requests
	}
}
