package client

import (
	"context"
	"errors"
	"reflect"
	"testing"
	"time"
)

// These tests need no server, so they run in the client module itself,
// with the go-redis version its go.mod requires; the tests against a
// server are in the root module's tests/client/.

const ms = time.Millisecond

// A Batch's arguments: each check as its command, CL.THROTTLE with MS
// after its quantity too, so every check's durations are milliseconds.
func TestBatchArgs(t *testing.T) {
	b := (&Client{}).All().
		Throttle("g", 1, Rate{1, 3 * time.Second}, 1).
		Throttle("q", 0, Rate{1, 250 * ms}, 2).
		Fixed("f", 5, 250*ms, 2).
		Acquire("c", 2, 30*time.Second, "tok")
	want := []any{"CL.ALL",
		"CL.THROTTLE", "g", int64(1), int64(1), int64(3), int64(1), "MS",
		"CL.THROTTLE", "q", int64(0), int64(4), int64(1), int64(2), "MS",
		"CL.FIXED", "f", int64(5), "250ms", int64(2), "MS",
		"CL.ACQUIRE", "c", int64(2), int64(30), "tok", "MS"}
	if !reflect.DeepEqual(b.args, want) {
		t.Errorf("args\nhave %v\nwant %v", b.args, want)
	}
	if !reflect.DeepEqual(b.units, []time.Duration{ms, ms, ms, ms}) || b.Len() != 4 {
		t.Errorf("units %v, Len %d", b.units, b.Len())
	}
	if _, _, err := (&Client{}).All().Throttle("x", 0, Rate{3, 700 * ms}, 1).Do(context.Background()); !errors.Is(err, ErrRate) {
		t.Errorf("3 per 700ms: %v, want ErrRate", err)
	}
}

func TestDecode(t *testing.T) {
	for _, tc := range []struct {
		v    any
		unit time.Duration
		want Result
		err  error
	}{
		{[]any{int64(1), int64(2), int64(0), int64(1766), int64(4766)}, ms,
			Result{Limit: 2, RetryAfter: 1766 * ms, ResetAfter: 4766 * ms}, nil},
		{[]any{int64(1), int64(2), int64(0), int64(2), int64(5)}, time.Second,
			Result{Limit: 2, RetryAfter: 2 * time.Second, ResetAfter: 5 * time.Second}, nil},
		{[]any{int64(1), int64(5), int64(0), int64(-1), int64(5)}, time.Second,
			Result{Limit: 5, RetryAfter: Never, ResetAfter: 5 * time.Second}, nil},
		{[]any{int64(0), int64(10), int64(9), int64(-1), int64(100)}, ms,
			Result{Allowed: true, Limit: 10, Remaining: 9, ResetAfter: 100 * ms}, nil},
		{[]any{int64(0), int64(10), int64(9), int64(-1)}, ms, Result{}, errReply},
		{[]any{int64(0), int64(10), int64(9), int64(-1), "5"}, ms, Result{}, errReply},
		{"OK", ms, Result{}, errReply},
	} {
		r, err := decode(tc.v, tc.unit)
		if r != tc.want || err != tc.err {
			t.Errorf("decode(%v, %v) = %+v, %v; want %+v, %v", tc.v, tc.unit, r, err, tc.want, tc.err)
		}
	}
}

func TestThrottleRate(t *testing.T) {
	for _, tc := range []struct {
		r           Rate
		count, secs int64
		err         error
	}{
		{Rate{10, time.Second}, 10, 1, nil},
		{Rate{1, 3 * time.Second}, 1, 3, nil},
		{Rate{1, 250 * ms}, 4, 1, nil},
		{Rate{3, 700 * ms}, 0, 0, ErrRate},
		{Rate{1 << 62, 500 * ms}, 0, 0, ErrRate}, // count·1e9 overflows
		{Rate{0, time.Second}, 0, 0, ErrRate},
		{Rate{1, 0}, 0, 0, ErrRate},
	} {
		c, s, err := throttleRate(tc.r)
		if c != tc.count || s != tc.secs || err != tc.err {
			t.Errorf("throttleRate(%v) = %d, %d, %v; want %d, %d, %v", tc.r, c, s, err, tc.count, tc.secs, tc.err)
		}
	}
}
