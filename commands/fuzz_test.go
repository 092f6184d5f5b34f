package commands_test

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cellserver/cellserver/internal/resptest"
	"github.com/cellserver/cellserver/internal/servertest"
	"github.com/cellserver/cellserver/server"
)

// FuzzThrottleArgs sends random CL.THROTTLE argument vectors to an
// in-process server over one connection. The server must never panic or
// drop the connection, and every reply must be a "Cell error: " or
// WRONGTYPE error, or five integers [limited, limit, remaining,
// retry_after, reset_after] with limited 0 or 1 and retry_after -1 when
// allowed; when max_burst parses, limit is max_burst+1 (wrapping). PING
// must answer afterwards.
//
// The arguments are key, max_burst, count, period, quantity and one extra
// argument; n keeps the first n of them (n mod 7), so every argument count
// from 0 to 6 is tried. adv moves the clock forward (ms) before the call,
// and kind makes the key a plain string first (1) or leaves it (0).
//
//	go test -run '^$' -fuzz '^FuzzThrottleArgs$' -fuzztime 30s ./commands
func FuzzThrottleArgs(f *testing.F) {
	// The spec's worked examples (section 10) and error rows.
	for _, s := range []struct {
		key, b, c, p, q string
		n               uint8
	}{
		{"user123", "15", "30", "60", "", 4},
		{"e2e", "0", "1", "2", "1", 5},
		{"k3", "2", "1", "1", "0", 5},
		{"k4", "4", "1", "1", "6", 5},
		{"k9", "-1", "1", "1", "", 4},
		{"k10", "9223372036854775807", "1", "1", "", 4},
		{"k11", "-9223372036854775808", "1", "1", "", 4},
		{"k12", "1", "0", "1", "", 4},
		{"k12", "1", "1000000001", "1", "", 4},
		{"k13", "1", "1000000000", "1", "", 4},
		{"k14", "20", "10000000", "1", "", 4},
		{"k15", "100", "300000", "1", "0", 5},
		{"k17", "0", "2000", "2001", "", 4},
		{"k20", "0", "1", "9223372036854775807", "", 4},
		{"k21", "5", "1", "9223372036", "", 4},
		{"k22", "5", "9223372036854775807", "9223372036854775807", "", 4},
		{"k23", "0", "-1", "1", "", 4},
		{"k25", "-3", "-1", "1", "0", 5},
		{"k26", "5", "1", "1", "-1", 5},
		{"k30", "5", "1", "1", "-9223372036854775807", 5},
		{"k31", "5", "1", "1", "9223372036854775807", 5},
		{"k37", "1", "1", "1", "", 5},
		{"k37", "1", "1", "1", "1.0", 5},
		{"k38", "1", "1", "1", "+1", 5},
		{"k39", "1", "1", "1", "9223372036854775808", 5},
		{"k40", "x", "y", "z", "w", 5},
		{"k41", "1", "1", "1", "1\r\n2", 5},
		{"k41", "1", "1", "1", "1\x002", 5},
		{"k\xff", "1", "1", "1", "", 4},
		{"", "1", "1", "1", "", 4},
		{"k42", "1", "1", "", "", 2},
		{"k42", "1", "1", "1", "1", 6},
		{"k42", "", "", "", "", 0},
	} {
		f.Add(s.key, s.b, s.c, s.p, s.q, "extra", s.n, uint16(0), uint8(0))
	}
	f.Add("str", "1", "1", "1", "", "", uint8(4), uint16(1500), uint8(1))
	f.Add("k3", "2", "1", "1", "", "", uint8(4), uint16(1100), uint8(0))

	clk := servertest.NewClock(goldenT0)
	_, addr := servertest.Start(f, server.Config{Clock: clk.Now})
	c := resptest.MustDial(f, addr)

	f.Fuzz(func(t *testing.T, key, b, cnt, p, q, extra string, n uint8, adv uint16, kind uint8) {
		clk.Advance(time.Duration(adv) * time.Millisecond)
		if clk.Now().After(goldenT0.AddDate(100, 0, 0)) { // stay far from int64 ns overflow (2262)
			clk.Set(goldenT0)
		}
		if kind%2 == 1 {
			if v, err := c.Do("SET", key, b); err != nil || v.Str != "OK" {
				t.Fatalf("SET %q %q: %v %v", key, b, v, err)
			}
		}
		args := []string{key, b, cnt, p, q, extra}[:n%7]
		cmd := append([]string{"CL.THROTTLE"}, args...)
		v, err := c.Do(cmd...)
		if err != nil {
			t.Fatalf("%q: %v (connection lost or bad RESP)", cmd, err)
		}
		switch v.Kind {
		case '-':
			if !strings.HasPrefix(v.Str, "Cell error: ") && !strings.HasPrefix(v.Str, "WRONGTYPE ") {
				t.Fatalf("%q: error %q", cmd, v.Str)
			}
		case '*':
			if len(v.Elems) != 5 {
				t.Fatalf("%q: %d elements: %v", cmd, len(v.Elems), v)
			}
			var r [5]int64
			for i, e := range v.Elems {
				if e.Kind != ':' {
					t.Fatalf("%q: element %d is not an integer: %v", cmd, i, v)
				}
				r[i], _ = strconv.ParseInt(e.Str, 10, 64)
			}
			if r[0] != 0 && r[0] != 1 {
				t.Fatalf("%q: limited = %d", cmd, r[0])
			}
			if r[0] == 0 && r[3] != -1 {
				t.Fatalf("%q: allowed with retry_after %d", cmd, r[3])
			}
			if mb, err := strconv.ParseInt(b, 10, 64); err == nil && r[1] != mb+1 {
				t.Fatalf("%q: limit %d, want max_burst+1 = %d", cmd, r[1], mb+1)
			}
			if len(args) != 4 && len(args) != 5 {
				t.Fatalf("%q: %d arguments answered %v, want the usage error", cmd, len(args), v)
			}
		default:
			t.Fatalf("%q: reply %v", cmd, v)
		}
		if v, err := c.Do("PING"); err != nil || v.Str != "PONG" {
			t.Fatalf("PING after %q: %v %v", cmd, v, err)
		}
	})
}
