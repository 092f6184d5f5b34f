package gcra

import (
	"errors"
	"math"
	"testing"
)

const (
	ms = int64(1_000_000)     // ns
	s  = int64(1_000_000_000) // ns
)

func TestSeconds(t *testing.T) {
	for _, tc := range []struct {
		ns   int64
		want int64
	}{
		// Spec section 3, "Rounding to seconds".
		{1_000_500_000, 1}, // 1.0005 s: less than a whole ms over
		{1_001_000_000, 2}, // 1.001 s
		{999_000_000, 1},   // 0.999 s
		{333_000_000, 1},   // 0.333 s
		{73_000, 0},        // 0.000073 s
		{-500_000_000, 0},  // -0.5 s: truncated toward zero
		{-1_500_000_000, -1},
		{-1 * s, -1}, // the -1 sentinel
		{0, 0},
		{1, 0},
		{999_999, 0}, // 0.999999 ms
		{1 * ms, 1},
		{2 * s, 2},
		{2*s + 1, 2},
		{-1, 0},
		{-999 * ms, 0},
		{-2*s - 999*ms, -2},
		// ei saturated at i64::MAX ns: 9223372036.854775807 s (example 20).
		{math.MaxInt64, 9223372037},
		{math.MinInt64, -9223372036},
		// The f64 artefact: from s = 2^24 whole seconds, s + 0.999999999
		// rounds up to s+1 in float64 and the ms rule adds another.
		{(1<<24)*s + 999_999_999, 1<<24 + 2},
		{(1<<24)*s + 999_000_000, 1<<24 + 1},
		{(1<<24-1)*s + 999_999_999, 1 << 24}, // just below 2^24: no artefact
		{-(1<<24)*s - 999_999_999, -(1<<24 + 1)},
		{(1<<33)*s + 999_999_999, 1<<33 + 2},
	} {
		if have := Seconds(tc.ns); have != tc.want {
			t.Errorf("Seconds(%d) = %d, want %d", tc.ns, have, tc.want)
		}
		if have, want := Seconds(tc.ns), refSecs(i128FromInt64(tc.ns).big()); have != want {
			t.Errorf("Seconds(%d) = %d, reference %d", tc.ns, have, want)
		}
	}
}

// TestSecs128 covers durations beyond the int64 range, which Decide
// reaches with TATs in 2554 (example 34).
func TestSecs128(t *testing.T) {
	for _, tc := range []struct {
		ns   i128
		want int64
	}{
		// Example 34: TAT 2^64-1 at t0.
		{i128FromUint64(math.MaxUint64).sub(i128FromInt64(t0)), 16651431129},
		{i128FromUint64(math.MaxUint64).sub(i128FromInt64(t0 + s)), 16651431128},
		// 2^64 ns = 18446744073.709551616 s.
		{i128{hi: 1}, 18446744074},
		{i128{hi: 1}.neg(), -18446744073},
		// 3*2^63 ns: the biggest TTL (TAT 2^64-1 plus an increment of
		// 2^63-1 ns) is below it.
		{i128{hi: 1, lo: 1 << 63}, 27670116110 + 1},
		// The artefact at 1.66e10 s.
		{mulInt64(16651431128, s).add(i128FromInt64(999_999_999)), 16651431130},
	} {
		if have := secs(tc.ns); have != tc.want {
			t.Errorf("secs(%v) = %d, want %d", tc.ns.big(), have, tc.want)
		}
	}
}

func TestMillisCeil(t *testing.T) {
	for _, tc := range []struct {
		ns   int64
		want int64
	}{
		{0, 0},
		{1, 1},
		{1 * ms, 1},
		{1*ms + 1, 2},
		{900 * ms, 900},
		{1_000_500_000, 1001}, // 1.0005 s
		{73_000, 1},
		{-1, 0},
		{-1 * ms, -1},
		{-1*ms - 1, -1},
		{-1_500_000, -1},
		{-5001 * ms, -5001},
		{math.MaxInt64, 9223372036855},
		{math.MinInt64, -9223372036854},
	} {
		if have := millisCeil(i128FromInt64(tc.ns)); have != tc.want {
			t.Errorf("millisCeil(%d) = %d, want %d", tc.ns, have, tc.want)
		}
	}
}

// TestMillis checks the millisecond fields of Decide on spec examples.
func TestMillis(t *testing.T) {
	for _, tc := range []struct {
		name                 string
		tat                  uint64
		exists               bool
		p                    Params
		retryMillis, resetMs int64
	}{
		// Example 3d: retry 0.9 s, reset 2.9 s at t0+1.1 s with the TAT at t0+4 s.
		{"3d", t0 - 1100*uint64(ms) + 4*uint64(s), true, Params{MaxBurst: 2, Count: 1, Period: 1, Quantity: 1}, 900, 2900},
		// Example 17b: retry and reset 1.0005 s.
		{"17b", t0 + 1_000_500_000, true, Params{MaxBurst: 0, Count: 2000, Period: 2001, Quantity: 1}, 1001, 1001},
		// Example 35: stale TAT 5.001 s in the past: reset -5.001 s; never possible.
		{"35", t0 - 5001*uint64(ms), true, Params{MaxBurst: 4, Count: 1, Period: 1, Quantity: 10}, -1, -5001},
		// Allowed: retry -1; reset 2 s (example 1).
		{"1", 0, false, Params{MaxBurst: 15, Count: 30, Period: 60, Quantity: 1}, -1, 2000},
		// Example 16: reset 72778 ns -> 1 ms.
		{"16", 0, false, Params{MaxBurst: 48, Count: 41221, Period: 3, Quantity: 1}, -1, 1},
		// Example 27: TTL -1 ms.
		{"27", 0, false, Params{MaxBurst: 5, Count: 1000, Period: 1, Quantity: -1}, -1, -1},
		// Example 26: TTL -1 s.
		{"26", 0, false, Params{MaxBurst: 5, Count: 1, Period: 1, Quantity: -1}, -1, -1000},
	} {
		r, err := Decide(t0, tc.tat, tc.exists, tc.p)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if r.RetryAfterMillis != tc.retryMillis || r.ResetAfterMillis != tc.resetMs {
			t.Errorf("%s: have RetryAfterMillis %d ResetAfterMillis %d, want %d %d",
				tc.name, r.RetryAfterMillis, r.ResetAfterMillis, tc.retryMillis, tc.resetMs)
		}
	}
}

func TestEmissionInterval(t *testing.T) {
	for _, tc := range []struct {
		count, period, want int64
	}{
		{30, 60, 2 * s},
		{1, 1, s},
		{0, 1, 0},
		{1, 0, 0},
		{0, 0, 0},
		{1000000001, 1, 0}, // truncates to 0
		{-1000000001, 1, 0},
		{1000000000, 1, 1},
		{10000000, 1, 100},
		{300000, 1, 3333},
		{41221, 3, 72778},
		{2000, 2001, 1_000_500_000},
		{1000, 999, 999 * ms},
		{3, 1, 333_333_333},
		{1, math.MaxInt64, math.MaxInt64}, // saturates
		{1, 86400000000, math.MaxInt64},
		{1, 9223372036, 9223372036 * s},
		{-1, math.MaxInt64, math.MinInt64},
		{1, math.MinInt64, math.MinInt64},
		{math.MaxInt64, math.MaxInt64, s},
		{math.MinInt64, math.MinInt64, s},
		{-1, 1, -s},
		{1, -1, -s},
		{-1, -1, s},
		// P is exact before the float conversion: float64(period)*1e9
		// rounds twice here and gives 6135821800830534.
		{1467969499, 9007199254918475, 6135821800830533},
	} {
		if have := EmissionInterval(tc.count, tc.period); have != tc.want {
			t.Errorf("EmissionInterval(%d, %d) = %d, want %d", tc.count, tc.period, have, tc.want)
		}
		if have, want := EmissionInterval(tc.count, tc.period), refEmissionInterval(tc.count, tc.period); have != want {
			t.Errorf("EmissionInterval(%d, %d) = %d, reference %d", tc.count, tc.period, have, want)
		}
	}
}

func TestSatTrunc(t *testing.T) {
	for _, tc := range []struct {
		f    float64
		want int64
	}{
		{0, 0},
		{math.Copysign(0, -1), 0},
		{0.9, 0},
		{-0.9, 0},
		{1.5, 1},
		{-1.5, -1},
		{math.NaN(), 0},
		{math.Inf(1), math.MaxInt64},
		{math.Inf(-1), math.MinInt64},
		{0x1p63, math.MaxInt64},
		{-0x1p63, math.MinInt64},
		{0x1p63 - 1024, math.MaxInt64 - 1023},
		{-0x1p63 + 1024, math.MinInt64 + 1024},
		{1e300, math.MaxInt64},
		{-1e300, math.MinInt64},
	} {
		if have := satTrunc(tc.f); have != tc.want {
			t.Errorf("satTrunc(%g) = %d, want %d", tc.f, have, tc.want)
		}
	}
}

func TestDecideZeroRate(t *testing.T) {
	for _, p := range []Params{{MaxBurst: 1, Count: 0, Period: 1, Quantity: 1}, {MaxBurst: 1, Count: 1, Period: 0, Quantity: 1}, {MaxBurst: 1, Count: 0, Period: 0, Quantity: 1}, {MaxBurst: 1, Count: 1000000001, Period: 1, Quantity: 1}} {
		r, err := Decide(t0, math.MaxUint64, true, p)
		if !errors.Is(err, ErrZeroRate) || r != (Result{}) {
			t.Errorf("Decide(%+v) = %+v, %v; want ErrZeroRate", p, r, err)
		}
	}
}

// TestDecideNewTATWraps checks that a TAT before 1970 is stored mod 2^64
// (spec section 5).
func TestDecideNewTATWraps(t *testing.T) {
	// At 1 s after the epoch, 2 s of refund puts the TAT at -1 s.
	r, err := Decide(s, 0, false, Params{MaxBurst: 0, Count: 1, Period: 1, Quantity: -2})
	if err != nil {
		t.Fatal(err)
	}
	if want := uint64(math.MaxUint64) - uint64(s) + 1; !r.Store || r.NewTAT != want || r.TTLMillis != -2000 {
		t.Errorf("have Store %v NewTAT %d TTLMillis %d, want true %d -2000", r.Store, r.NewTAT, r.TTLMillis, want)
	}
}

// benchParams are argument sets for the benchmark and the allocation test:
// a typical limit, one that wraps and saturates, and a refund.
var benchParams = []Params{
	{MaxBurst: 15, Count: 30, Period: 60, Quantity: 1},
	{MaxBurst: math.MaxInt64, Count: 1, Period: math.MaxInt64, Quantity: math.MinInt64},
	{MaxBurst: 20, Count: 10000000, Period: 1, Quantity: -3},
}

func TestDecideAllocs(t *testing.T) {
	for _, p := range benchParams {
		allocs := testing.AllocsPerRun(100, func() {
			_, _ = Decide(t0, math.MaxUint64-5, true, p)
		})
		if allocs != 0 {
			t.Errorf("Decide(%+v) allocates %v times", p, allocs)
		}
	}
}

func BenchmarkDecide(b *testing.B) {
	b.ReportAllocs()
	now := int64(t0)
	var tat uint64
	var exists bool
	i := 0
	for range b.N {
		r, err := Decide(now, tat, exists, benchParams[i%len(benchParams)])
		if err == nil && r.Store {
			tat, exists = r.NewTAT, true
		}
		now += 1_000_000 // 1 ms between requests
		i++
	}
}

// TestPeriodNSMatchesSeconds: a period given in ns decides exactly as the
// same period in whole seconds, for every spec-like parameter set.
func TestPeriodNSMatchesSeconds(t *testing.T) {
	const now = 1795312945207675371
	checked := 0
	for _, b := range []int64{0, 1, 4, 15, 100} {
		for _, c := range []int64{1, 3, 30, 1000, 41221, 300000, 1000000000} {
			for _, p := range []int64{1, 2, 3, 60, 3600, 86400 * 365} {
				for _, q := range []int64{-1, 0, 1, 5} {
					secs, err1 := Decide(now, now+7e8, true, Params{MaxBurst: b, Count: c, Period: p, Quantity: q})
					ns, err2 := Decide(now, now+7e8, true, Params{MaxBurst: b, Count: c, PeriodNS: p * 1e9, Quantity: q})
					if secs != ns || err1 != err2 {
						t.Fatalf("b=%d c=%d p=%d q=%d: seconds %+v (%v), ns %+v (%v)", b, c, p, q, secs, err1, ns, err2)
					}
					checked++
				}
			}
		}
	}
	t.Logf("%d parameter sets agree", checked)
}
