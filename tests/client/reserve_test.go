package clienttests

import (
	"errors"
	"testing"

	"github.com/cellserver/cellserver/client"
)

// Reservations through the typed client: reserve, settle down, settle
// again (same answer), another actual refused, cancel, the ttl's end,
// and a refusal holding nothing.
func TestReserveSettleCancel(t *testing.T) {
	c, clk := start(t, 2)
	res, r, err := c.ReserveFixed(ctx, "f", 10, 10*s, 8, 30*s)
	check(t, "ReserveFixed", r, err, client.Result{Allowed: true, Limit: 10, Remaining: 2, ResetAfter: 10 * s})
	if res.Key != "f" || res.ID != t0.UnixMicro() {
		t.Fatalf("reservation %+v, want key f id %d", res, t0.UnixMicro())
	}
	st, err := res.Settle(ctx, 5)
	if err != nil || st != (client.Settlement{Reserved: 8, Actual: 5, Returned: 3}) {
		t.Fatalf("Settle: %+v %v", st, err)
	}
	if again, err := c.Settle(ctx, "f", res.ID, 5); err != nil || again != st {
		t.Fatalf("Settle again: %+v %v, want %+v", again, err, st)
	}
	r, err = c.Fixed(ctx, "f", 10, 10*s, 0)
	check(t, "Fixed after the settle", r, err, client.Result{Allowed: true, Limit: 10, Remaining: 5, ResetAfter: 10 * s})
	var e *client.Error
	if _, err := res.Settle(ctx, 6); !errors.As(err, &e) || e.Command != "CL.SETTLE" || e.Message != "reservation already settled with actual 5" {
		t.Fatalf("Settle with another actual: %v", err)
	}

	res2, _, err := c.ReserveSliding(ctx, "sl", 10, 10*s, 4, 30*s)
	if err != nil {
		t.Fatal(err)
	}
	if st, err := res2.Cancel(ctx); err != nil || st != (client.Settlement{Reserved: 4, Actual: 0, Returned: 4}) {
		t.Fatalf("Cancel: %+v %v", st, err)
	}

	// GCRA, 10 per second, burst 10: 10 reserved, the 11th refused.
	full, r, err := c.ReserveThrottle(ctx, "t", 9, client.Rate{Count: 10, Period: s}, 10, 2*s)
	check(t, "ReserveThrottle", r, err, client.Result{Allowed: true, Limit: 10, Remaining: 0, ResetAfter: s})
	none, r, err := c.ReserveThrottle(ctx, "t", 9, client.Rate{Count: 10, Period: s}, 1, 2*s)
	check(t, "ReserveThrottle refused", r, err, client.Result{Limit: 10, Remaining: 0, RetryAfter: 100 * ms, ResetAfter: s})
	if none != (client.Reservation{}) {
		t.Fatalf("a refused reservation: %+v", none)
	}
	if st, err := none.Settle(ctx, 1); err != nil || st != (client.Settlement{}) {
		t.Fatalf("Settle of the zero Reservation: %+v %v", st, err)
	}
	// Its ttl ends: the id is gone, the units stay used.
	clk.Advance(2*s + ms)
	if _, err := full.Settle(ctx, 0); !errors.As(err, &e) || e.Message != "no such reservation (unknown id, or its ttl ended)" {
		t.Fatalf("Settle after the ttl: %v", err)
	}

	if _, _, err := c.ReserveSlidingLog(ctx, "log", 5, 10*s, -1, 30*s); !errors.As(err, &e) || e.Command != "CL.RESERVE" {
		t.Fatalf("ReserveSlidingLog with a negative quantity: %v", err)
	}
	lg, r, err := c.ReserveSlidingLog(ctx, "log", 5, 10*s, 5, 30*s)
	check(t, "ReserveSlidingLog", r, err, client.Result{Allowed: true, Limit: 5, Remaining: 0, ResetAfter: 10 * s})
	if st, err := lg.Settle(ctx, 2); err != nil || st.Returned != 3 {
		t.Fatalf("Settle of the log: %+v %v", st, err)
	}
	r, err = c.SlidingLog(ctx, "log", 5, 10*s, 3)
	check(t, "SlidingLog after the settle", r, err, client.Result{Allowed: true, Limit: 5, Remaining: 0, ResetAfter: 10 * s})
}
