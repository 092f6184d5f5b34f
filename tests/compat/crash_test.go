package compat

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	"github.com/cellserver/cellserver/internal/resptest"
)

// Inputs that abort redis-server with the real module (spec section 6):
// there is no reference reply to copy. cellserver answers with an error and
// keeps serving; these tests pin the exact bytes it sends, check that the
// same connection still works (PING after every error) and that a second
// client throttling many keys at the same time gets only correct replies.

const (
	wireBadUTF8   = "-Cell error: Store error: Argument is not valid UTF-8\r\n"
	wireBadStored = "-Cell error: Store error: Stored value is not an unsigned integer\r\n"
	wireWrongType = "-WRONGTYPE Operation against a key holding the wrong kind of value\r\n"
	wireOK        = "+OK\r\n"
	wirePong      = "+PONG\r\n"
)

type crashStep struct {
	args []string
	want string // exact reply bytes
}

type crashCase struct {
	name  string
	setup []crashStep // must all succeed with their exact replies
	run   crashStep   // the input that crashes the real module
	after []crashStep // state checks after the error
}

func crashCases() []crashCase {
	var cs []crashCase
	// Any argument that is not valid UTF-8, whatever its position; the check
	// comes first, before arity, integer parsing and the zero-rate check.
	utf8Args := []struct {
		name string
		args []string
	}{
		{"key", []string{"\xff", "1", "1", "1"}},
		{"key truncated sequence", []string{"k\xc3", "1", "1", "1"}},
		{"max_burst", []string{"k", "1\xff", "1", "1"}},
		{"count lone continuation", []string{"k", "1", "\x80", "1"}},
		{"period surrogate", []string{"k", "1", "1", "\xed\xa0\x80"}},
		{"quantity overlong", []string{"k", "1", "1", "1", "\xc0\xaf"}},
		{"extra 6th argument", []string{"k", "1", "1", "1", "1", "\xff"}},
		{"only argument (before arity)", []string{"\xfe"}},
		{"after a bad integer", []string{"k", "x", "1", "1", "\xff"}},
		{"with a zero rate", []string{"k", "1", "0", "1", "\xff"}},
		{"with NUL", []string{"k", "1", "1", "1", "\x00\xff"}},
	}
	for _, a := range utf8Args {
		cs = append(cs, crashCase{
			name: "non-UTF-8 " + a.name,
			run:  crashStep{append([]string{"CL.THROTTLE"}, a.args...), wireBadUTF8},
			// a rejected command writes nothing
			after: []crashStep{{[]string{"EXISTS", "k"}, ":0\r\n"}},
		})
	}
	// Also on a key that holds valid state: the state is left alone.
	cs = append(cs, crashCase{
		name:  "non-UTF-8 quantity on a live key",
		setup: []crashStep{{[]string{"CL.THROTTLE", "live", "2", "1", "1"}, "*5\r\n:0\r\n:3\r\n:2\r\n:-1\r\n:1\r\n"}},
		run:   crashStep{[]string{"CL.THROTTLE", "live", "2", "1", "1", "\xff"}, wireBadUTF8},
		after: []crashStep{{[]string{"CL.THROTTLE", "live", "2", "1", "1"}, "*5\r\n:0\r\n:3\r\n:1\r\n:-1\r\n:2\r\n"}},
	})
	// A stored string that is not a u64 in Rust's syntax (digits with an
	// optional '+', at most 2^64-1).
	for _, v := range []string{"abc", "", "-5", " 5", "1.5", "18446744073709551616", "5 ", "+", "++5", "0x10", "\xff", "1\x002"} {
		for _, q := range []string{"1", "0"} {
			cs = append(cs, crashCase{
				name:  fmt.Sprintf("stored %q quantity %s", v, q),
				setup: []crashStep{{[]string{"SET", "s", v}, wireOK}},
				run:   crashStep{[]string{"CL.THROTTLE", "s", "1", "1", "1", q}, wireBadStored},
				after: []crashStep{{[]string{"GET", "s"}, fmt.Sprintf("$%d\r\n%s\r\n", len(v), v)}},
			})
		}
	}
	return cs
}

// otherTypes are commands that would give a key another type in Redis. When
// cellserver does not implement one, the case cannot arise and is logged.
var otherTypes = [][]string{
	{"LPUSH", "o", "a"},
	{"HSET", "o", "f", "v"},
	{"SADD", "o", "a"},
	{"ZADD", "o", "1", "a"},
	{"XADD", "o", "*", "f", "v"},
}

// bgThrottle runs on its own connection until stop is closed (and at least
// minKeys keys are done) or maxKeys keys are done: every key gets spec
// section 10 row 3's four replies at the frozen instant. It returns the
// number of replies checked and the first wrong one.
func bgThrottle(rc *resptest.Conn, started chan<- struct{}, stop <-chan struct{}) (int, error) {
	const minKeys, maxKeys = 200, 50_000
	want := []string{
		"*5\r\n:0\r\n:3\r\n:2\r\n:-1\r\n:1\r\n",
		"*5\r\n:0\r\n:3\r\n:1\r\n:-1\r\n:2\r\n",
		"*5\r\n:0\r\n:3\r\n:0\r\n:-1\r\n:3\r\n",
		"*5\r\n:1\r\n:3\r\n:0\r\n:1\r\n:3\r\n",
	}
	checked := 0
	for i := range maxKeys {
		if i >= minKeys {
			select {
			case <-stop:
				return checked, nil
			default:
			}
		}
		key := fmt.Sprintf("bg:%d", i)
		for j, w := range want {
			got, err := rc.DoBytes("CL.THROTTLE", key, "2", "1", "1")
			if err != nil {
				return checked, fmt.Errorf("%s call %d: %v", key, j+1, err)
			}
			if string(got) != w {
				return checked, fmt.Errorf("%s call %d: got %q, want %q", key, j+1, got, w)
			}
			checked++
		}
		if i == 0 {
			close(started)
		}
	}
	return checked, nil
}

func TestCrashInputs(t *testing.T) {
	_, addr := startServer(t) // the clock stays at t0 throughout
	a := resptest.MustDial(t, addr)
	bg := resptest.MustDial(t, addr)

	started, stop := make(chan struct{}), make(chan struct{})
	type bgResult struct {
		checked int
		err     error
	}
	res := make(chan bgResult, 1)
	go func() {
		n, err := bgThrottle(bg, started, stop)
		res <- bgResult{n, err}
	}()
	stopped := false
	finish := func() bgResult {
		if !stopped {
			close(stop)
			stopped = true
		}
		return <-res
	}
	select {
	case <-started:
	case r := <-res: // failed on its first key
		res <- r
	}

	step := func(name string, s crashStep) bool {
		t.Helper()
		got, err := a.DoBytes(s.args...)
		if err != nil {
			t.Fatalf("%s: %q: %v (read %s)", name, s.args, err, showBytes(got))
		}
		if !bytes.Equal(got, []byte(s.want)) {
			t.Errorf("%s: %q\n got: %s\nwant: %s", name, s.args, showBytes(got), showBytes([]byte(s.want)))
			return false
		}
		return true
	}
	ping := func(name string) {
		t.Helper()
		step(name+": PING after the error", crashStep{[]string{"PING"}, wirePong})
	}

	// cleanup deletes the keys a case used (not FLUSHDB: the concurrent
	// client works in the same database).
	cleanup := func(name string, keys ...string) {
		t.Helper()
		got, err := a.DoBytes(append([]string{"DEL"}, keys...)...)
		if err != nil || len(got) == 0 || got[0] != ':' {
			t.Fatalf("%s: cleanup: %s, %v", name, showBytes(got), err)
		}
	}

	errorsSent := 0
	for _, c := range crashCases() {
		ok := true
		for _, s := range c.setup {
			ok = step(c.name+": setup", s) && ok
		}
		if !ok {
			continue
		}
		step(c.name, c.run)
		errorsSent++
		ping(c.name)
		for _, s := range c.after {
			step(c.name+": afterwards", s)
		}
		cleanup(c.name, "k", "live", "s")
	}

	// A key of another type: Redis's module aborts (no WRONGTYPE there);
	// cellserver answers with the standard WRONGTYPE error, as the spec
	// suggests. Only types that cellserver can create are reachable.
	unreachable := 0
	for _, mk := range otherTypes {
		got, err := a.DoBytes(mk...)
		if err != nil {
			t.Fatalf("%q: %v", mk, err)
		}
		if strings.HasPrefix(string(got), "-ERR unknown command") {
			unreachable++
			t.Logf("%s: not a cellserver command (%q); a key of that type cannot exist", mk[0], got)
			continue
		}
		if got[0] == '-' {
			t.Errorf("%q: %s", mk, showBytes(got))
			continue
		}
		name := "key made by " + mk[0]
		step(name, crashStep{[]string{"CL.THROTTLE", "o", "1", "1", "1"}, wireWrongType})
		errorsSent++
		ping(name)
		cleanup(name, "o")
	}

	// The first client is still usable for real work.
	step("first client afterwards", crashStep{[]string{"CL.THROTTLE", "after", "2", "1", "1"}, "*5\r\n:0\r\n:3\r\n:2\r\n:-1\r\n:1\r\n"})

	r := finish()
	if r.err != nil {
		t.Errorf("concurrent client: %v", r.err)
	}
	t.Logf("%d crash inputs answered with an error (PING after each), %d other-type cases not reachable; "+
		"concurrent client checked %d CL.THROTTLE replies", errorsSent, unreachable, r.checked)
}
