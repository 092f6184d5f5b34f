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

// pipeline sends every command, then reads every reply, and fails on an
// error reply.
func pipeline(t *testing.T, c *resptest.Conn, cmds [][]string) {
	t.Helper()
	var buf []byte
	for _, args := range cmds {
		buf = resptest.AppendCommand(buf, args...)
	}
	c.C.SetWriteDeadline(time.Now().Add(resptest.Timeout))
	if _, err := c.C.Write(buf); err != nil {
		t.Fatal(err)
	}
	for _, args := range cmds {
		v, err := c.Read()
		if err != nil || v.Kind == '-' {
			t.Fatalf("%q: %v %v", args, v, err)
		}
	}
}

// scanAll iterates SCAN from cursor 0 until the cursor is 0 again and
// returns how often each key came back and how many calls it took.
func scanAll(t *testing.T, c *resptest.Conn, opts ...string) (map[string]int, int) {
	t.Helper()
	seen := map[string]int{}
	cursor := "0"
	for calls := 1; ; calls++ {
		if calls > 100000 {
			t.Fatalf("SCAN %q: no end after %d calls", opts, calls)
		}
		v := c.MustDo(t, append([]string{"SCAN", cursor}, opts...)...)
		if v.Kind != '*' || len(v.Elems) != 2 || v.Elems[0].Kind != '$' || v.Elems[1].Kind != '*' {
			t.Fatalf("SCAN %s %q: %v", cursor, opts, v)
		}
		for _, k := range v.Elems[1].Elems {
			seen[k.Str]++
		}
		cursor = v.Elems[0].Str
		if _, err := strconv.ParseUint(cursor, 10, 64); err != nil {
			t.Fatalf("SCAN returned cursor %q", cursor)
		}
		if cursor == "0" {
			return seen, calls
		}
	}
}

// TestScanReturnsEveryKeyOnce: a full SCAN iteration returns every key
// exactly once, for every COUNT, and MATCH and TYPE select exactly the
// right ones; expired keys are never returned.
func TestScanReturnsEveryKeyOnce(t *testing.T) {
	clk := servertest.NewClock(goldenT0)
	_, addr := servertest.Start(t, server.Config{Clock: clk.Now})
	c := resptest.MustDial(t, addr)

	const nKeys, nOther, nExpiring = 3000, 500, 200
	var cmds [][]string
	all := map[string]bool{}
	for i := 0; i < nKeys; i++ {
		k := "key:" + strconv.Itoa(i)
		cmds = append(cmds, []string{"SET", k, "v"})
		all[k] = true
	}
	for i := 0; i < nOther; i++ {
		k := "other:" + strconv.Itoa(i)
		cmds = append(cmds, []string{"CL.THROTTLE", k, "5", "1", "3600"}) // strings too
		all[k] = true
	}
	for i := 0; i < nExpiring; i++ {
		cmds = append(cmds, []string{"SET", "exp:" + strconv.Itoa(i), "v", "PX", "10"})
	}
	pipeline(t, c, cmds)
	clk.Advance(11 * time.Millisecond) // the exp: keys are now expired

	for _, tc := range []struct {
		opts     []string
		want     func(k string) bool
		minCalls int
	}{
		{nil, func(string) bool { return true }, 2},
		{[]string{"COUNT", "1"}, func(string) bool { return true }, 100},
		{[]string{"COUNT", "100"}, func(string) bool { return true }, 10},
		{[]string{"COUNT", "100000"}, func(string) bool { return true }, 1},
		{[]string{"MATCH", "key:1*", "COUNT", "50"}, func(k string) bool { return strings.HasPrefix(k, "key:1") }, 2},
		{[]string{"MATCH", "other:?", "COUNT", "7"}, func(k string) bool { return strings.HasPrefix(k, "other:") && len(k) == 7 }, 2},
		{[]string{"MATCH", "*", "COUNT", "20"}, func(string) bool { return true }, 2},
		{[]string{"TYPE", "string"}, func(string) bool { return true }, 2},
		{[]string{"TYPE", "list", "COUNT", "1000"}, func(string) bool { return false }, 1},
		{[]string{"MATCH", "nomatch", "COUNT", "10"}, func(string) bool { return false }, 2},
	} {
		seen, calls := scanAll(t, c, tc.opts...)
		want := 0
		for k := range all {
			if !tc.want(k) {
				continue
			}
			want++
			if seen[k] != 1 {
				t.Errorf("SCAN %q returned %s %d times", tc.opts, k, seen[k])
			}
		}
		for k, n := range seen {
			if !all[k] || !tc.want(k) {
				t.Errorf("SCAN %q returned %s (%d times), which it should not", tc.opts, k, n)
			}
		}
		if len(seen) != want {
			t.Errorf("SCAN %q: %d keys, want %d", tc.opts, len(seen), want)
		}
		if calls < tc.minCalls {
			t.Errorf("SCAN %q took %d calls, want at least %d: COUNT not honoured", tc.opts, calls, tc.minCalls)
		}
		t.Logf("SCAN %q: %d keys in %d calls", tc.opts, len(seen), calls)
	}
	if n := c.MustDo(t, "KEYS", "key:1*"); len(n.Elems) != 1111 {
		t.Errorf("KEYS key:1* returned %d keys, want 1111", len(n.Elems))
	}
}

// TestClientListShowsCurrentCommand: CLIENT LIST's cmd= is the client's
// last command as Redis 7.0 shows it (c->lastcmd): the command being run,
// NULL after an unknown command or subcommand, the queued command inside
// MULTI, and flags=x multi=N while queuing.
func TestClientListShowsCurrentCommand(t *testing.T) {
	_, addr := servertest.Start(t, server.Config{Clock: servertest.NewClock(goldenT0).Now})
	a, b := resptest.MustDial(t, addr), resptest.MustDial(t, addr)
	id := a.MustDo(t, "CLIENT", "ID").Str
	show := func() string {
		t.Helper()
		v := b.MustDo(t, "CLIENT", "LIST", "ID", id)
		f := strings.Fields(v.Str)
		var out []string
		for _, kv := range f {
			if strings.HasPrefix(kv, "flags=") || strings.HasPrefix(kv, "multi=") || strings.HasPrefix(kv, "cmd=") {
				out = append(out, kv)
			}
		}
		return strings.Join(out, " ")
	}
	for i, step := range []struct {
		args []string
		want string
	}{
		0: {[]string{"CLIENT", "ID"}, "flags=N multi=-1 cmd=client|id"},
		1: {[]string{"FOO"}, "flags=N multi=-1 cmd=NULL"},
		2: {[]string{"GET"}, "flags=N multi=-1 cmd=get"},
		3: {[]string{"CLIENT", "NOSUCH"}, "flags=N multi=-1 cmd=NULL"},
		4: {[]string{"GET", "x"}, "flags=N multi=-1 cmd=get"},
		5: {[]string{"MULTI"}, "flags=x multi=0 cmd=multi"},
		6: {[]string{"SET", "a", "1"}, "flags=x multi=1 cmd=set"},
		7: {[]string{"EXEC"}, "flags=N multi=-1 cmd=exec"},
		8: {[]string{"CONFIG", "GET", "port"}, "flags=N multi=-1 cmd=config|get"},
	} {
		if _, err := a.Do(step.args...); err != nil {
			t.Fatal(err)
		}
		if got := show(); got != step.want {
			t.Errorf("%d: after %q: %s, want %s", i, step.args, got, step.want)
		}
	}
	if info := a.MustDo(t, "CLIENT", "INFO").Str; !strings.Contains(info, " cmd=client|info ") {
		t.Errorf("CLIENT INFO does not show itself: %q", info)
	}
}

// scanMaxCount is commands.scanMaxCount: the most keys one SCAN call looks
// at, whatever COUNT says.
const scanMaxCount = 100000

// TestScanCountCapped: SCAN's COUNT is capped, so one call with a huge
// COUNT looks at no more than scanMaxCount keys of a larger keyspace and
// returns a cursor to go on from (issue 26: SCAN 0 COUNT 1000000000 walked
// and returned the whole keyspace in one call). An iteration with such a
// COUNT still returns every key exactly once, with keys removed and added
// between its calls.
func TestScanCountCapped(t *testing.T) {
	_, addr := servertest.Start(t, server.Config{Clock: servertest.NewClock(goldenT0).Now})
	c := resptest.MustDial(t, addr)
	const nKeys = 3*scanMaxCount + 12345
	for i := 0; i < nKeys; i += 10000 {
		cmds := make([][]string, 0, 10000)
		for j := i; j < min(i+10000, nKeys); j++ {
			cmds = append(cmds, []string{"SET", "k:" + strconv.Itoa(j), "v"})
		}
		pipeline(t, c, cmds)
	}
	// Keys that come and go between the calls, taking free positions.
	pipeline(t, c, [][]string{{"SET", "tmp:0", "v"}, {"SET", "tmp:1", "v"}})

	v := c.MustDo(t, "SCAN", "0", "COUNT", "1000000000")
	if len(v.Elems) != 2 || v.Elems[0].Str == "0" || len(v.Elems[1].Elems) == 0 || len(v.Elems[1].Elems) > scanMaxCount {
		t.Fatalf("SCAN 0 COUNT 1000000000 over %d keys: cursor %q and %d keys, want a cursor other than 0 and 1 to %d keys",
			nKeys, v.Elems[0].Str, len(v.Elems[1].Elems), scanMaxCount)
	}

	seen := map[string]int{}
	cursor := "0"
	calls := 0
	for {
		calls++
		if calls > 100 {
			t.Fatalf("SCAN COUNT 1000000000: no end after %d calls", calls)
		}
		v := c.MustDo(t, "SCAN", cursor, "COUNT", "1000000000")
		if len(v.Elems[1].Elems) > scanMaxCount {
			t.Fatalf("call %d returned %d keys, more than %d", calls, len(v.Elems[1].Elems), scanMaxCount)
		}
		for _, k := range v.Elems[1].Elems {
			seen[k.Str]++
		}
		cursor = v.Elems[0].Str
		if cursor == "0" {
			break
		}
		// Churn: a key removed, two added (one reusing its position).
		pipeline(t, c, [][]string{{"DEL", "tmp:" + strconv.Itoa(calls-1)},
			{"SET", "tmp:" + strconv.Itoa(calls+1), "v"}, {"SET", "new:" + strconv.Itoa(calls), "v"}})
	}
	for i := 0; i < nKeys; i++ {
		if k := "k:" + strconv.Itoa(i); seen[k] != 1 {
			t.Fatalf("%s returned %d times, want once", k, seen[k])
		}
	}
	if calls < nKeys/scanMaxCount+1 {
		t.Errorf("%d calls for %d keys: COUNT not capped at %d", calls, nKeys, scanMaxCount)
	}
	t.Logf("%d keys (and %d churned ones) in %d calls", nKeys, len(seen)-nKeys, calls)
}
