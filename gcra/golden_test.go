package gcra

import (
	"bufio"
	"errors"
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// t0 is the instant the golden files call +0s, in ns since the Unix epoch.
// Spec example 36 stored 1795312947207675371 = now + 2 s, so now was
// 1795312945207675371; example 34's reply (which depends on the date) comes
// out at that instant too.
const t0 = 1795312945207675371

// TestGolden runs every testdata/*.txt file. The format is described at the
// top of testdata/examples.txt: new, set, throttle, get and pttl lines, each
// output after ----. The expected outputs are copied from the spec.
func TestGolden(t *testing.T) {
	files, err := filepath.Glob("testdata/*.txt")
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatal("no testdata/*.txt files")
	}
	for _, file := range files {
		t.Run(filepath.Base(file), func(t *testing.T) {
			n := runGolden(t, file)
			t.Logf("%s: %d outputs checked", file, n)
		})
	}
}

// goldenKey is the one key a golden file works on, as the caller of Decide
// keeps it: the stored TAT and the TTL of the last write.
type goldenKey struct {
	exists bool
	tat    uint64
	pttl   int64 // ms, as set by the last write; -1 for no TTL
}

// goldenCase is one command of a golden file with its expected output.
type goldenCase struct {
	pos  string   // file:line of the command
	cmd  []string // the command's fields
	want []string // the lines after ----
}

// runGolden runs the cases of one golden file in order, keeping the key's
// state between them, and returns the number of outputs checked.
func runGolden(t *testing.T, file string) int {
	t.Helper()
	cases := parseGolden(t, file)
	var key goldenKey
	checked := 0
	for _, c := range cases {
		if c.want != nil {
			checked++
		}
		switch c.cmd[0] {
		case "new":
			key = goldenKey{}
		case "set":
			key = goldenKey{exists: true, tat: mustTime(t, c.pos, c.cmd[1], true).Uint64(), pttl: -1}
		case "throttle":
			runThrottle(t, c, &key)
		case "get":
			have := "(nil)"
			if key.exists {
				have = strconv.FormatUint(key.tat, 10)
			}
			want := c.want[0]
			if want != "(nil)" {
				want = mustTime(t, c.pos, want, true).String()
			}
			if have != want {
				t.Errorf("%s: get: have %s, want %s (%s)", c.pos, have, want, c.want[0])
			}
		case "pttl":
			if !key.exists {
				t.Errorf("%s: pttl on an absent key", c.pos)
			} else if have, want := strconv.FormatInt(key.pttl, 10), c.want[0]; have != want {
				t.Errorf("%s: pttl: have %s, want %s", c.pos, have, want)
			}
		default:
			t.Fatalf("%s: unknown command %q", c.pos, c.cmd[0])
		}
	}
	return checked
}

// runThrottle checks one throttle line and applies its write to key, as the
// caller of Decide does: an allowed request stores NewTAT (with no TTL when
// TTLMillis < 0), a limited one writes nothing.
func runThrottle(t *testing.T, c goldenCase, key *goldenKey) {
	t.Helper()
	at, args, ok := strings.Cut(strings.Join(c.cmd[1:], " "), " ")
	if !strings.HasPrefix(at, "at=") || !ok {
		t.Fatalf("%s: want throttle at=<time> <args>", c.pos)
	}
	nowBig := mustTime(t, c.pos, at[len("at="):], false)
	if !nowBig.IsInt64() {
		t.Fatalf("%s: at= out of the int64 range", c.pos)
	}
	now := nowBig.Int64()
	var ints []int64
	for _, f := range strings.Fields(args) {
		v, err := strconv.ParseInt(f, 10, 64)
		if err != nil {
			t.Fatalf("%s: %v", c.pos, err)
		}
		ints = append(ints, v)
	}
	if len(ints) == 3 {
		ints = append(ints, 1) // the caller's default quantity
	}
	if len(ints) != 4 {
		t.Fatalf("%s: want 3 or 4 integers, have %d", c.pos, len(ints))
	}
	p := Params{MaxBurst: ints[0], Count: ints[1], Period: ints[2], Quantity: ints[3]}

	r, err := Decide(now, key.tat, key.exists, p)
	desc := fmt.Sprintf("%s: throttle %s", c.pos, args)
	outcome := c.want[0]
	if outcome == "zero rate error" {
		if !errors.Is(err, ErrZeroRate) {
			t.Errorf("%s: have %+v, %v; want ErrZeroRate", desc, r, err)
		}
		if len(c.want) > 1 {
			t.Fatalf("%s: nothing may follow zero rate error", c.pos)
		}
		return
	}
	if err != nil {
		t.Errorf("%s: unexpected error %v", desc, err)
		return
	}
	if r.Store == r.Limited {
		t.Errorf("%s: Store = %v with Limited = %v", desc, r.Store, r.Limited)
	}
	switch {
	case outcome == "expire error":
		if !r.Store || r.TTLMillis >= -1 {
			t.Errorf("%s: have Store %v TTLMillis %d (reply %s); want an allowed request with TTLMillis < -1",
				desc, r.Store, r.TTLMillis, reply(r))
		}
	case strings.HasPrefix(outcome, "["):
		if r.Store && r.TTLMillis < -1 {
			t.Errorf("%s: TTLMillis %d < -1: the client would get the expire error", desc, r.TTLMillis)
		}
		if !matchReply(reply(r), outcome) {
			t.Errorf("%s: have %s, want %s", desc, reply(r), outcome)
		}
	default:
		t.Fatalf("%s: unknown outcome %q", c.pos, outcome)
	}
	for _, line := range c.want[1:] {
		ms, ok := strings.CutPrefix(line, "ttl ")
		if !ok {
			t.Fatalf("%s: unknown output line %q", c.pos, line)
		}
		want, err := strconv.ParseInt(ms, 10, 64)
		if err != nil {
			t.Fatalf("%s: %v", c.pos, err)
		}
		if !r.Store || r.TTLMillis != want {
			t.Errorf("%s: have Store %v TTLMillis %d, want TTLMillis %d", desc, r.Store, r.TTLMillis, want)
		}
	}
	if r.Store {
		// TTLMillis -1 removes the TTL; below -1 the value is written but
		// setting the expiry fails, which leaves no TTL either.
		*key = goldenKey{exists: true, tat: r.NewTAT, pttl: max(r.TTLMillis, -1)}
	}
}

// reply formats the five integers of the CL.THROTTLE reply.
func reply(r Result) string {
	limited := 0
	if r.Limited {
		limited = 1
	}
	return fmt.Sprintf("[%d,%d,%d,%d,%d]", limited, r.Limit, r.Remaining, r.RetryAfter, r.ResetAfter)
}

// matchReply compares a formatted reply with an expected one in which _
// matches any field.
func matchReply(have, want string) bool {
	h := strings.Split(strings.Trim(have, "[]"), ",")
	w := strings.Split(strings.Trim(want, "[]"), ",")
	if len(h) != len(w) || len(w) != 5 {
		return false
	}
	for i := range w {
		if w[i] != "_" && w[i] != h[i] {
			return false
		}
	}
	return true
}

// mustTime parses a golden-file time: digits are absolute ns since the
// Unix epoch; a signed number with a unit (ns, us, ms, s) is an offset from
// t0. With wrap, the result is reduced mod 2^64 like a stored value.
func mustTime(t *testing.T, pos, s string, wrap bool) *big.Int {
	t.Helper()
	v := new(big.Int)
	if s != "" && (s[0] == '+' || s[0] == '-') {
		num, unit := s, int64(0)
		for _, u := range []struct {
			suffix string
			ns     int64
		}{{"ns", 1}, {"us", 1e3}, {"ms", 1e6}, {"s", 1e9}} {
			if n, ok := strings.CutSuffix(s, u.suffix); ok {
				num, unit = n, u.ns
				break
			}
		}
		if _, ok := v.SetString(num, 10); !ok || unit == 0 {
			t.Fatalf("%s: bad time %q", pos, s)
		}
		v.Mul(v, big.NewInt(unit))
		v.Add(v, big.NewInt(t0))
	} else if _, ok := v.SetString(s, 10); !ok {
		t.Fatalf("%s: bad time %q", pos, s)
	}
	if wrap {
		v.Mod(v, new(big.Int).Lsh(big.NewInt(1), 64))
	}
	return v
}

// parseGolden splits a golden file into commands. Comments (#) and blank
// lines separate them; a command that has output is followed by ---- and
// its output lines, up to the next blank line.
func parseGolden(t *testing.T, file string) []goldenCase {
	t.Helper()
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var cases []goldenCase
	sc := bufio.NewScanner(f)
	line := 0
	for sc.Scan() {
		line++
		text := strings.TrimSpace(sc.Text())
		if text == "" || strings.HasPrefix(text, "#") {
			continue
		}
		c := goldenCase{pos: fmt.Sprintf("%s:%d", file, line), cmd: strings.Fields(text)}
		switch c.cmd[0] {
		case "new":
			if len(c.cmd) != 1 {
				t.Fatalf("%s: new takes no arguments", c.pos)
			}
			cases = append(cases, c)
			continue
		case "set":
			if len(c.cmd) != 2 {
				t.Fatalf("%s: want set <time>", c.pos)
			}
			cases = append(cases, c)
			continue
		}
		if !sc.Scan() || strings.TrimSpace(sc.Text()) != "----" {
			t.Fatalf("%s: want ---- after %q", c.pos, text)
		}
		line++
		for sc.Scan() {
			line++
			out := strings.TrimSpace(sc.Text())
			if out == "" {
				break
			}
			c.want = append(c.want, out)
		}
		if len(c.want) == 0 {
			t.Fatalf("%s: no expected output", c.pos)
		}
		if c.cmd[0] != "throttle" && len(c.want) != 1 {
			t.Fatalf("%s: %s has one line of output", c.pos, c.cmd[0])
		}
		cases = append(cases, c)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return cases
}
