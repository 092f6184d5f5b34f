package client

import (
	"context"
	"time"
)

// Reservation is units admitted by CL.RESERVE before their real cost is
// known: counted at once, held until [Reservation.Settle] gives back what
// was not used (or takes more), [Reservation.Cancel] gives them all back,
// or its ttl ends (they then stay used in full). The zero Reservation
// holds nothing.
type Reservation struct {
	c   *Client
	Key string
	// ID names the reservation within its key (CL.RESERVE's sixth integer).
	ID int64
}

// Settlement is the reply of CL.SETTLE and CL.CANCEL.
type Settlement struct {
	Reserved, Actual int64
	// Returned is Reserved - Actual: the units given back, negative when
	// more were taken. It is the nominal difference: units whose window
	// has ended are not given back to it.
	Returned int64
}

// ReserveThrottle sends CL.RESERVE key THROTTLE max_burst count period
// quantity ttl MS: Throttle's decision (same rate rules: the period must
// reduce to whole seconds) and, when allowed, a reservation held for ttl.
// Durations are milliseconds. The Reservation is valid only if
// Result.Allowed.
func (c *Client) ReserveThrottle(ctx context.Context, key string, maxBurst int64, rate Rate, quantity int64, ttl time.Duration) (Reservation, Result, error) {
	count, secs, err := throttleRate(rate)
	if err != nil {
		return Reservation{}, Result{}, err
	}
	return c.reserve(ctx, key, "THROTTLE", maxBurst, count, secs, quantity, period(ttl), "MS")
}

// ReserveFixed sends CL.RESERVE key FIXED limit period quantity ttl MS:
// Fixed's decision and, when allowed, a reservation held for ttl.
func (c *Client) ReserveFixed(ctx context.Context, key string, limit int64, per time.Duration, quantity int64, ttl time.Duration) (Reservation, Result, error) {
	return c.reserve(ctx, key, "FIXED", limit, period(per), quantity, period(ttl), "MS")
}

// ReserveSliding sends CL.RESERVE key SLIDING limit period quantity ttl
// MS: Sliding's decision and, when allowed, a reservation held for ttl.
func (c *Client) ReserveSliding(ctx context.Context, key string, limit int64, per time.Duration, quantity int64, ttl time.Duration) (Reservation, Result, error) {
	return c.reserve(ctx, key, "SLIDING", limit, period(per), quantity, period(ttl), "MS")
}

// ReserveSlidingLog sends CL.RESERVE key SLIDINGLOG limit period quantity
// ttl MS: SlidingLog's decision and, when allowed, a reservation held for
// ttl.
func (c *Client) ReserveSlidingLog(ctx context.Context, key string, limit int64, per time.Duration, quantity int64, ttl time.Duration) (Reservation, Result, error) {
	return c.reserve(ctx, key, "SLIDINGLOG", limit, period(per), quantity, period(ttl), "MS")
}

func (c *Client) reserve(ctx context.Context, key, kind string, args ...any) (Reservation, Result, error) {
	v, err := c.rdb.Do(ctx, append([]any{"CL.RESERVE", key, kind}, args...)...).Result()
	if err != nil {
		return Reservation{}, Result{}, wrap("CL.RESERVE", err)
	}
	a, ok := v.([]any)
	if !ok || len(a) != 6 {
		return Reservation{}, Result{}, errReply
	}
	id, ok := a[5].(int64)
	if !ok {
		return Reservation{}, Result{}, errReply
	}
	r, err := decode(a[:5], time.Millisecond)
	if err != nil || !r.Allowed {
		return Reservation{}, r, err
	}
	return Reservation{c: c, Key: key, ID: id}, r, nil
}

// Settle sends CL.SETTLE key id actual. Settling again with the same
// actual answers the same and changes nothing; another actual is an
// [*Error] ("reservation already settled with actual N"), as is an
// unknown or ended id ("no such reservation ...").
func (c *Client) Settle(ctx context.Context, key string, id, actual int64) (Settlement, error) {
	return c.settlement(ctx, "CL.SETTLE", "CL.SETTLE", key, id, actual)
}

// Cancel sends CL.CANCEL key id: CL.SETTLE key id 0.
func (c *Client) Cancel(ctx context.Context, key string, id int64) (Settlement, error) {
	return c.settlement(ctx, "CL.CANCEL", "CL.CANCEL", key, id)
}

func (c *Client) settlement(ctx context.Context, name string, args ...any) (Settlement, error) {
	n, err := c.rdb.Do(ctx, args...).Int64Slice()
	if err != nil {
		return Settlement{}, wrap(name, err)
	}
	if len(n) != 3 {
		return Settlement{}, errReply
	}
	return Settlement{Reserved: n[0], Actual: n[1], Returned: n[2]}, nil
}

// Settle settles the reservation with the units actually used; see
// [Client.Settle]. On the zero Reservation it does nothing.
func (r Reservation) Settle(ctx context.Context, actual int64) (Settlement, error) {
	if r.c == nil {
		return Settlement{}, nil
	}
	return r.c.Settle(ctx, r.Key, r.ID, actual)
}

// Cancel gives all the reservation's units back; see [Client.Cancel]. On
// the zero Reservation it does nothing.
func (r Reservation) Cancel(ctx context.Context) (Settlement, error) {
	if r.c == nil {
		return Settlement{}, nil
	}
	return r.c.Cancel(ctx, r.Key, r.ID)
}
