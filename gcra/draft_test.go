package gcra

import (
	"errors"
	"math"
	"math/rand"
	"testing"
)

// Cases from the draft's tests (redis/redis tests/unit/gcra.tcl at commit
// 398547e68bf8f2905dbd54728673bf115b3648c8), at explicit instants, with the
// exact replies src/gcra.c (10040538b194f52abcb8032dfb60cf10ea7e3bb0) gives.

const draftT0 = int64(1_700_000_000_000) // ms

type draftCall struct {
	atMS int64 // ms after draftT0
	p    DraftParams
	want [5]int64 // limited, max tokens, available, retry_after, full_burst_after
	err  error
}

func dp(burst, tpp int64, period float64, tokens int64) DraftParams {
	return DraftParams{MaxBurst: burst, TokensPerPeriod: tpp, Period: period, Tokens: tokens}
}

func runDraft(t *testing.T, calls []draftCall) {
	t.Helper()
	var tat int64
	exists := false
	for i, c := range calls {
		now := draftT0 + c.atMS
		if exists && tat/1000+boolInt(tat%1000 != 0) <= now { // expired
			exists = false
		}
		r, err := DecideDraft(now, tat, exists, c.p)
		if !errors.Is(err, c.err) {
			t.Fatalf("call %d: err %v, want %v", i, err, c.err)
		}
		if err != nil {
			continue
		}
		got := [5]int64{boolInt(r.Limited), r.MaxTokens, r.Available, r.RetryAfter, r.FullBurstAfter}
		if got != c.want {
			t.Fatalf("call %d at +%dms %+v: got %v, want %v", i, c.atMS, c.p, got, c.want)
		}
		if r.Store {
			tat, exists = r.NewTAT, true
		}
	}
}

func boolInt(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

func TestDraftTable(t *testing.T) {
	b := dp(5, 1, 60, 1)
	cases := map[string][]draftCall{
		"burst of max_burst+1 then limited": {
			{0, b, [5]int64{0, 6, 5, -1, 60}, nil},
			{0, b, [5]int64{0, 6, 4, -1, 120}, nil},
			{0, b, [5]int64{0, 6, 3, -1, 180}, nil},
			{0, b, [5]int64{0, 6, 2, -1, 240}, nil},
			{0, b, [5]int64{0, 6, 1, -1, 300}, nil},
			{0, b, [5]int64{0, 6, 0, -1, 360}, nil},
			{0, b, [5]int64{1, 6, 0, 60, 360}, nil},
			{59_999, b, [5]int64{1, 6, 0, 1, 301}, nil},
			{60_000, b, [5]int64{0, 6, 0, -1, 360}, nil},
		},
		"TOKENS 3 on a fresh key": {
			{0, dp(5, 1, 60, 3), [5]int64{0, 6, 3, -1, 180}, nil},
		},
		"full_burst_after grows by the rate": {
			{0, b, [5]int64{0, 6, 5, -1, 60}, nil},
			{0, dp(5, 1, 60, 4), [5]int64{0, 6, 1, -1, 300}, nil},
		},
		"max_burst 0": {
			{0, dp(0, 1, 1, 1), [5]int64{0, 1, 0, -1, 1}, nil},
			{0, dp(0, 1, 1, 1), [5]int64{1, 1, 0, 1, 1}, nil},
		},
		"rate recovery after 1100ms": {
			{0, dp(1, 1, 1, 1), [5]int64{0, 2, 1, -1, 1}, nil},
			{0, dp(1, 1, 1, 1), [5]int64{0, 2, 0, -1, 2}, nil},
			{0, dp(1, 1, 1, 1), [5]int64{1, 2, 0, 1, 2}, nil},
			{1100, dp(1, 1, 1, 1), [5]int64{0, 2, 0, -1, 2}, nil},
		},
		"sub-millisecond emission interval": {
			{0, dp(1, 10000, 1, 1), [5]int64{0, 2, 1, -1, 1}, nil},
			{0, dp(1, 10000, 1, 1), [5]int64{0, 2, 0, -1, 1}, nil},
			{0, dp(1, 10000, 1, 1), [5]int64{1, 2, 0, 1, 1}, nil},
		},
		"more tokens than the bucket: never, retry -1": {
			{0, dp(2, 1, 60, 4), [5]int64{1, 3, 3, -1, 0}, nil},
		},
		"fractional period": {
			{0, dp(10, 5, 0.5, 1), [5]int64{0, 11, 10, -1, 1}, nil},
		},
		// Lettuce's GCRACommandIntegrationTests (redis/lettuce, run against
		// a server with the command) assert parts of these replies.
		"lettuce: rate(5, 10, 60)": {
			{0, dp(5, 10, 60, 1), [5]int64{0, 6, 5, -1, 6}, nil},
		},
		"lettuce: rate(5, 10, 60) numRequests 3": {
			{0, dp(5, 10, 60, 3), [5]int64{0, 6, 3, -1, 18}, nil},
		},
		"lettuce: rate(0, 1, 60) exhausted": {
			{0, dp(0, 1, 60, 1), [5]int64{0, 1, 0, -1, 60}, nil},
			{0, dp(0, 1, 60, 1), [5]int64{1, 1, 0, 60, 60}, nil},
		},
		"overflow": {
			{0, dp(1, 1, 86400, 200000000), [5]int64{}, ErrDraftTokensOverflow},
			{0, dp(200000000, 1, 86400, 1), [5]int64{}, ErrDraftBurstOverflow},
			{0, dp(1, 1, 2147483647, 2147483647), [5]int64{}, ErrDraftTokensOverflow},
		},
		"period bounds": {
			{0, dp(1, 1, 0, 1), [5]int64{}, ErrDraftPeriod},
			{0, dp(1, 1, -1, 1), [5]int64{}, ErrDraftPeriod},
			{0, dp(1, 1, 1e12, 1), [5]int64{}, ErrDraftPeriod},
			{0, dp(1, 1, math.NaN(), 1), [5]int64{}, ErrDraftPeriod},
			{0, dp(1, 1, math.Inf(1), 1), [5]int64{}, ErrDraftPeriod},
		},
	}
	for name, calls := range cases {
		t.Run(name, func(t *testing.T) { runDraft(t, calls) })
	}
}

func TestDraftEdges(t *testing.T) {
	// max_burst = MaxInt64 stays MaxInt64 (no wrap) and overflows.
	_, err := DecideDraft(draftT0, 0, false, dp(math.MaxInt64, 1, 1, 1))
	if !errors.Is(err, ErrDraftBurstOverflow) {
		t.Fatalf("MaxInt64 burst: %v", err)
	}
	// A stored TAT <= 0 is refused.
	if _, err := DecideDraft(draftT0, 0, true, b1()); !errors.Is(err, ErrDraftNonPositiveTAT) {
		t.Fatalf("tat 0: %v", err)
	}
	if _, err := DecideDraft(draftT0, -5, true, b1()); !errors.Is(err, ErrDraftNonPositiveTAT) {
		t.Fatalf("tat -5: %v", err)
	}
	// A TAT near MaxInt64 overflows the new TAT.
	if _, err := DecideDraft(draftT0, math.MaxInt64-10, true, b1()); !errors.Is(err, ErrDraftTokensOverflow) {
		t.Fatalf("tat max: %v", err)
	}
	// A stored TAT in the past (written by SET) counts as now.
	r, err := DecideDraft(draftT0, 1, true, b1())
	if err != nil || r.Limited || r.NewTAT != draftT0*1000+60_000_000 {
		t.Fatalf("past tat: %+v %v", r, err)
	}
	// Emission interval rounding: half up, at least 1.
	for _, c := range []struct {
		period float64
		tpp    int64
		want   int64
	}{{1, 3, 333333}, {2, 3, 666667}, {1, 2_000_000, 1}, {1, 3_000_000, 1}, {0.5, 5, 100000}, {1e-7, 1, 1}} {
		if got := DraftEmissionInterval(c.period, c.tpp); got != c.want {
			t.Errorf("DraftEmissionInterval(%v, %d) = %d, want %d", c.period, c.tpp, got, c.want)
		}
	}
	// Expiry: the new TAT rounded up to the millisecond.
	r, _ = DecideDraft(draftT0, 0, false, dp(1, 10000, 1, 1))
	if r.ExpireMS != draftT0+1 {
		t.Fatalf("ExpireMS %d, want %d", r.ExpireMS, draftT0+1)
	}
}

func b1() DraftParams { return dp(5, 1, 60, 1) }

// TestDraftProperties drives random keys through random calls and checks:
// the tokens admitted since the first call never exceed
// max_burst+1 + elapsed/emission interval; an allowed call leaves
// TAT-now <= delay variation tolerance; retry_after is -1 exactly when
// allowed or when the cost exceeds the bucket, and otherwise the same call
// retry_after seconds later is allowed; available never exceeds max_burst+1.
func TestDraftProperties(t *testing.T) {
	rng := rand.New(rand.NewSource(19))
	calls := 0
	for k := 0; k < 2000; k++ {
		p := DraftParams{
			MaxBurst:        rng.Int63n(20),
			TokensPerPeriod: 1 + rng.Int63n(50),
			Period:          []float64{0.001, 0.5, 1, 7, 60, 3600}[rng.Intn(6)],
		}
		e := DraftEmissionInterval(p.Period, p.TokensPerPeriod)
		now := draftT0
		start := now * 1000
		var tat int64
		exists := false
		var admitted int64
		for i := 0; i < 60; i++ {
			now += rng.Int63n(3 * (e/1000 + 1))
			p.Tokens = 1 + rng.Int63n(4)
			if exists && (tat+999)/1000 <= now {
				exists = false
			}
			r, err := DecideDraft(now, tat, exists, p)
			if err != nil {
				t.Fatalf("%+v: %v", p, err)
			}
			calls++
			variance := e * (p.MaxBurst + 1)
			if r.Available > r.MaxTokens || r.Available < 0 {
				t.Fatalf("available %d of %d", r.Available, r.MaxTokens)
			}
			if !r.Limited {
				admitted += p.Tokens
				if r.NewTAT-now*1000 > variance {
					t.Fatalf("TAT %d ahead of now by more than %d", r.NewTAT-now*1000, variance)
				}
				if admitted*e > now*1000-start+variance {
					t.Fatalf("admitted %d tokens in %dus, burst %d, emission %d", admitted, now*1000-start, p.MaxBurst, e)
				}
				if r.RetryAfter != -1 {
					t.Fatalf("allowed with retry_after %d", r.RetryAfter)
				}
				tat, exists = r.NewTAT, true
				continue
			}
			if never := e*p.Tokens > variance; never != (r.RetryAfter == -1) {
				t.Fatalf("limited: retry_after %d, cost %d, bucket %d", r.RetryAfter, e*p.Tokens, variance)
			}
			if r.RetryAfter > 0 {
				r2, err := DecideDraft(now+r.RetryAfter*1000, tat, true, p)
				if err != nil || r2.Limited {
					t.Fatalf("limited again %ds later: %+v %v", r.RetryAfter, r2, err)
				}
			}
		}
	}
	t.Logf("checked %d GCRA calls on 2000 keys", calls)
}

// FuzzDecideDraft: any input, stored TAT included, gives an error or a
// reply that keeps the draft's invariants; nothing panics.
func FuzzDecideDraft(f *testing.F) {
	f.Add(draftT0, int64(0), false, int64(5), int64(1), 60.0, int64(1))
	f.Add(draftT0, draftT0*1000+360_000_000, true, int64(5), int64(1), 60.0, int64(1))
	f.Add(draftT0, int64(1), true, int64(0), int64(10000), 1.0, int64(1))
	f.Add(draftT0, int64(math.MaxInt64), true, int64(math.MaxInt64), int64(1), 1e-7, int64(math.MaxInt64))
	f.Fuzz(func(t *testing.T, nowMS, tat int64, exists bool, burst, tpp int64, period float64, tokens int64) {
		if nowMS < 0 || nowMS > math.MaxInt64/1000 {
			return // the command's clock is a positive time in ms
		}
		p := DraftParams{MaxBurst: burst, TokensPerPeriod: tpp, Period: period, Tokens: tokens}
		r, err := DecideDraft(nowMS, tat, exists, p)
		if err != nil {
			return
		}
		if r.Limited == r.Store || r.Available < 0 || (r.RetryAfter < 1 && r.RetryAfter != -1) {
			t.Fatalf("%+v at %d (tat %d %v): %+v", p, nowMS, tat, exists, r)
		}
		if r.Store && (r.NewTAT <= nowMS*1000 || r.ExpireMS*1000 < r.NewTAT) {
			t.Fatalf("%+v at %d: stores %d expiring %d", p, nowMS, r.NewTAT, r.ExpireMS)
		}
	})
}
