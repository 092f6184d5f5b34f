package hostile

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cellserver/cellserver/internal/resptest"
	"github.com/cellserver/cellserver/internal/servertest"
	"github.com/cellserver/cellserver/server"
	"github.com/tidwall/redcon"
)

// Fuzzing beyond the per-package targets: whole commands through the
// network layer, against an in-process server.
//
//	go test -run '^$' -fuzz '^FuzzCommands$' -fuzztime 20s ./tests/hostile
//	go test -run '^$' -fuzz '^FuzzAll$' -fuzztime 20s ./tests/hostile

// syncBuf is a goroutine-safe log sink keeping the last 64 KiB, so that a
// failure can show the server's log (a handler panic is logged there).
type syncBuf struct {
	mu sync.Mutex
	b  []byte
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.b = append(s.b, p...)
	if len(s.b) > 64<<10 {
		s.b = append([]byte(nil), s.b[len(s.b)-32<<10:]...)
	}
	return len(p), nil
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return string(s.b)
}

// fuzzServer starts an in-process server whose warnings and errors are
// kept in the returned buffer.
func fuzzServer(f *testing.F, clock func() time.Time) (string, *syncBuf) {
	logs := &syncBuf{}
	_, addr := servertest.Start(f, server.Config{
		Clock:  clock,
		Logger: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelWarn})),
	})
	return addr, logs
}

// commandNames asks the server for COMMAND LIST, sorted.
func commandNames(f *testing.F, addr string) []string {
	rc := resptest.MustDial(f, addr)
	defer rc.Close()
	v, err := rc.Do("COMMAND", "LIST")
	if err != nil || v.Kind != '*' || len(v.Elems) == 0 {
		f.Fatalf("COMMAND LIST: %v, %v", v, err)
	}
	var names []string
	for _, e := range v.Elems {
		names = append(names, e.Str)
	}
	slices.Sort(names)
	return names
}

// encodeArgs is the inverse of decodeArgs: each argument as a length byte
// and its bytes (seeds only; arguments up to 255 bytes).
func encodeArgs(args ...string) []byte {
	var b []byte
	for _, a := range args {
		b = append(b, byte(len(a)))
		b = append(b, a...)
	}
	return b
}

// decodeArgs splits fuzz data into at most 16 arguments: a length byte,
// then that many bytes (fewer at the end of the data).
func decodeArgs(data []byte) []string {
	var args []string
	for len(data) > 0 && len(args) < 16 {
		n := min(int(data[0]), len(data)-1)
		args = append(args, string(data[1:1+n]))
		data = data[1+n:]
	}
	return args
}

// readOne reads from c until buf holds one complete RESP value (parsed by
// nextRESP, RESP2 or RESP3) and returns it and any bytes after it.
func readOne(c net.Conn, buf []byte) (value, rest []byte, err error) {
	tmp := make([]byte, 64<<10)
	for {
		if n := nextRESP(buf); n > 0 {
			return buf[:n:n], buf[n:], nil
		} else if n < 0 {
			return nil, buf, resptest.ErrProtocol
		}
		m, rerr := c.Read(tmp)
		buf = append(buf, tmp[:m]...)
		if rerr != nil {
			if n := nextRESP(buf); n > 0 {
				return buf[:n:n], buf[n:], nil
			}
			return nil, buf, rerr
		}
	}
}

// commandSeeds are typical arguments for each command, the seed corpus of
// FuzzCommands.
var commandSeeds = map[string][][]string{
	"auth":            {{"secret"}, {"user", "secret"}},
	"cl.acquire":      {{"lk", "2", "1s", "tok"}, {"lk", "2", "500ms", "tok", "MS"}, {"lk", "0", "1s", "t"}},
	"cl.all":          {{"cl.fixed", "a", "5", "1s", "1", "cl.throttle", "b", "5", "10", "60", "1"}, {"cl.fixed", "a", "5", "1s", "1", "MS", "cl.acquire", "c", "1", "1s", "t"}, {"bogus", "k"}},
	"cl.apply":        {{"pk", "api"}, {"pk", "api", "2"}, {"pk", "jobs", "tok"}, {"pk", "nosuch"}},
	"cl.policy":       {{"LIST"}, {"GET", "api"}, {"RELOAD"}, {"HELP"}},
	"cl.fixed":        {{"fk", "5", "1s"}, {"fk", "5", "1s", "2", "MS"}, {"fk", "5", "1s", "-1"}},
	"cl.info":         {{"fk"}, {"nokey"}},
	"cl.peek":         {{"tk", "5", "10", "60"}, {"tk", "5", "10", "250ms", "MS"}},
	"cl.release":      {{"lk", "tok"}},
	"cl.sliding":      {{"sk", "5", "1s"}, {"sk", "4294967296", "1s"}},
	"cl.slidinglog":   {{"gk", "5", "1s", "1"}, {"gk", "5", "1s", "-1"}},
	"cl.throttle":     {{"tk", "5", "10", "60"}, {"tk", "5", "10", "60", "3"}, {"tk", "9223372036854775807", "1", "1"}, {"tk", "\xff"}},
	"client":          {{"LIST"}, {"KILL", "ID", "1"}, {"NO-EVICT", "on"}},
	"client|list":     {{"TYPE", "normal"}, {"ID", "1", "2", "x"}},
	"client|setname":  {{"fuzzer"}, {"bad name"}},
	"client|setinfo":  {{"LIB-NAME", "x"}, {"LIB-VER", "1"}},
	"command":         {{"COUNT"}, {"INFO", "get", "nosuch"}, {"DOCS", "cl.all"}, {"GETKEYS", "cl.all", "cl.fixed", "k", "1", "1s", "1"}, {"LIST", "FILTERBY", "PATTERN", "cl*"}},
	"command|getkeys": {{"set", "k", "v"}, {"cl.all", "cl.throttle", "k", "1", "1", "1", "1"}, {"ping"}},
	"config":          {{"GET", "*"}, {"SET", "maxclients", "1"}, {"RESETSTAT"}},
	"config|get":      {{"max*"}, {"*", "bind"}},
	"del":             {{"k", "fk", "tk"}},
	"echo":            {{"hello"}, {""}},
	"exists":          {{"k", "k"}},
	"expire":          {{"k", "10"}, {"k", "10", "NX"}, {"k", "-1"}, {"k", "9223372036854775807"}},
	"flushall":        {{}, {"ASYNC"}},
	"get":             {{"k"}, {"tk"}},
	"xadd":            {{"xs", "*", "f", "v"}, {"xs", "MAXLEN", "~", "10", "*", "f", "v"}, {"xs", "NOMKSTREAM", "MINID", "=", "5-0", "LIMIT", "3", "5-*", "a", "b"}, {"xs", "18446744073709551615-18446744073709551615", "f", "v"}},
	"xrange":          {{"xs", "-", "+"}, {"xs", "(0-1", "+", "COUNT", "2"}, {"xs", "18446744073709551615", "-"}},
	"xtrim":           {{"xs", "MAXLEN", "~", "0"}, {"xs", "MINID", "9-9", "LIMIT", "1"}},
	"xread":           {{"COUNT", "2", "STREAMS", "xs", "0"}, {"BLOCK", "0", "STREAMS", "xs", "$"}, {"STREAMS", "xs", "xs", "0", "0"}},
	"xreadgroup":      {{"GROUP", "g", "c", "BLOCK", "10", "STREAMS", "xs", ">"}, {"GROUP", "g", "c", "NOACK", "STREAMS", "xs", "0"}},
	"xautoclaim":      {{"xs", "g", "c", "0", "0-0", "COUNT", "100", "JUSTID"}},
	"xclaim":          {{"xs", "g", "c", "0", "1-1", "IDLE", "5", "RETRYCOUNT", "9", "FORCE", "LASTID", "9-9"}},
	"xpending":        {{"xs", "g"}, {"xs", "g", "IDLE", "10", "-", "+", "10", "c"}},
	"hello":           {{"2"}, {"3"}, {"2", "SETNAME", "x"}, {"2", "AUTH", "default", "pw"}},
	"info":            {{}, {"all"}, {"memory", "stats"}},
	"keys":            {{"*"}, {"*a*a*a*a*a*a*a*a*a*b"}, {"[a-"}},
	"pexpire":         {{"k", "100"}},
	"ping":            {{}, {"msg"}, {"a", "b"}},
	"quit":            {{}},
	"reset":           {{}},
	"scan":            {{"0"}, {"0", "MATCH", "*", "COUNT", "1", "TYPE", "string"}, {"18446744073709551615"}, {"x"}},
	"select":          {{"1"}, {"16"}, {"-1"}},
	"set":             {{"k", "v"}, {"k", "v", "EX", "10"}, {"k", "v", "PX", "0"}, {"k", "v", "NX", "XX"}, {"k", "v", "KEEPTTL", "GET"}},
	"slowlog":         {{"GET", "5"}, {"LEN"}, {"RESET"}, {"GET", "-1"}},
	"type":            {{"k"}},
	"unlink":          {{"k"}},
}

// FuzzCommands sends one command from the server's own table (COMMAND
// LIST; "container|sub" becomes two words) with fuzzed arguments, on a
// fresh connection, to an in-process server. The server must answer with
// exactly one well-formed RESP2 or RESP3 value (framed by nextRESP),
// never close the connection except after QUIT's +OK, never panic (a
// recovered handler panic closes the connection, which fails here), and
// answer PING afterwards: +PONG, or +QUEUED inside the MULTI just opened.
//
// sel picks the command (modulo the table), upper sets the case of the
// name's letters bit by bit, data holds the arguments (see decodeArgs).
func FuzzCommands(f *testing.F) {
	addr, logs := fuzzServer(f, nil)
	names := commandNames(f, addr)
	for i, name := range names {
		f.Add(uint16(i), uint8(0), []byte(nil))
		for _, args := range commandSeeds[name] {
			f.Add(uint16(i), uint8(0xff), encodeArgs(args...))
		}
	}
	f.Fuzz(func(t *testing.T, sel uint16, upper uint8, data []byte) {
		name := names[int(sel)%len(names)]
		words := strings.Split(name, "|")
		first := []byte(words[0])
		for i := range first {
			if upper&(1<<(i%8)) != 0 && first[i] >= 'a' && first[i] <= 'z' {
				first[i] -= 'a' - 'A'
			}
		}
		words[0] = string(first)
		args := decodeArgs(data)
		if timeout := blockingTimeoutArg(name); timeout > 0 && len(args) == timeout {
			// WAIT and WAITAOF block for their timeout by design (no
			// replica here acknowledges anything): keep it short.
			if ms, err := strconv.ParseInt(args[timeout-1], 10, 64); err == nil && (ms == 0 || ms > 100) {
				args[timeout-1] = "100"
			}
		}
		if name == "xread" || name == "xreadgroup" {
			// XREAD and XREADGROUP BLOCK wait for an entry no one adds
			// here: keep the wait short (BLOCK 0 waits forever).
			for i := 0; i+1 < len(args); i++ {
				if strings.EqualFold(args[i], "block") {
					if ms, err := strconv.ParseInt(args[i+1], 10, 64); err == nil && (ms == 0 || ms > 100) {
						args[i+1] = "100"
					}
				}
			}
		}
		if name == "acl|setuser" && len(args) > 0 && args[0] == "default" {
			// The default user is every later input's: changing it could
			// lock them out (the rules themselves are fuzzed on other users).
			t.Skip("ACL SETUSER default")
		}
		cmd := append(words, args...)
		addr := addr
		if name == "shutdown" {
			// SHUTDOWN may stop its server: each input gets its own.
			_, addr = servertest.Start(t, server.Config{})
		}

		c, err := net.DialTimeout("tcp", addr, 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		defer func() {
			c.(*net.TCPConn).SetLinger(0) // no TIME_WAIT: thousands of connections a second
			c.Close()
		}()
		c.SetDeadline(time.Now().Add(10 * time.Second))
		if _, err := c.Write(resptest.AppendCommand(nil, cmd...)); err != nil {
			t.Fatalf("%q: write: %v", cmd, err)
		}
		reply, rest, err := readOne(c, nil)
		if name == "shutdown" && err != nil && len(rest) == 0 && (err == io.EOF || isReset(err)) {
			// A SHUTDOWN that succeeds closes the connection without a
			// reply, as Redis's does, and stops the server.
			if c2, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
				c2.Close()
				t.Fatalf("%q: connection closed without a reply, but the server still accepts connections", cmd)
			}
			return
		}
		if err != nil {
			t.Fatalf("%q: no complete reply (%q so far): %v\nserver log:\n%s", cmd, rest, err, logs)
		}
		// The subscribe family answers once per channel or pattern, as
		// Redis does; the last answer's count says whether the client is
		// left in subscribed mode (where PING answers *2 pong "").
		subscribed := false
		if isSubscribeFamily(name) && reply[0] != '-' {
			for i := 1; i < max(len(args), 1); i++ {
				if reply, rest, err = readOne(c, rest); err != nil {
					t.Fatalf("%q: answer %d of %d: %v\nserver log:\n%s", cmd, i+1, len(args), err, logs)
				}
			}
			subscribed = !bytes.HasSuffix(reply, []byte("\r\n:0\r\n"))
		}
		if len(rest) > 0 {
			t.Fatalf("%q: reply %q followed by %q: more than one value", cmd, reply, rest)
		}
		if name == "replicaof" || name == "slaveof" {
			// Back to a primary, so that later inputs are not refused as
			// writes on a replica.
			if _, err := c.Write(resptest.AppendCommand(nil, "REPLICAOF", "NO", "ONE")); err != nil {
				t.Fatal(err)
			}
			if ok, rest, err := readOne(c, nil); err != nil || string(ok) != "+OK\r\n" || len(rest) > 0 {
				t.Fatalf("REPLICAOF NO ONE after %q: %q %q %v", cmd, ok, rest, err)
			}
		}
		if name == "quit" {
			if string(reply) != "+OK\r\n" {
				t.Fatalf("%q: %q, want +OK", cmd, reply)
			}
			if b, err := readAll(c, 10*time.Second); len(b) > 0 || (err != nil && !isReset(err)) {
				t.Fatalf("%q: after +OK got %q, %v; want the connection closed", cmd, b, err)
			}
			c2, err := net.DialTimeout("tcp", addr, 10*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			defer func() {
				c2.(*net.TCPConn).SetLinger(0)
				c2.Close()
			}()
			c = c2
			c.SetDeadline(time.Now().Add(10 * time.Second))
		}
		if _, err := c.Write([]byte("*1\r\n$4\r\nPING\r\n")); err != nil {
			t.Fatalf("PING after %q: %v", cmd, err)
		}
		pong, rest, err := readOne(c, nil)
		if err != nil {
			t.Fatalf("PING after %q (reply %q): %v (%q)\nserver log:\n%s", cmd, reply, err, rest, logs)
		}
		want := "+PONG\r\n"
		if name == "multi" && string(reply) == "+OK\r\n" {
			want = "+QUEUED\r\n"
		}
		if subscribed {
			want = "*2\r\n$4\r\npong\r\n$0\r\n\r\n"
		}
		if name == "monitor" && string(reply) == "+OK\r\n" && string(pong) == want {
			// A monitor is fed its own commands after they run: the PING's
			// line follows its reply.
			line, more, err := readOne(c, rest)
			if err != nil || !bytes.HasPrefix(line, []byte("+")) || !bytes.HasSuffix(line, []byte(`"PING"`+"\r\n")) || len(more) > 0 {
				t.Fatalf("PING after %q: %q then %q %q %v, want the PING's monitor line", cmd, pong, line, more, err)
			}
			rest = nil
		}
		if string(pong) != want || len(rest) > 0 {
			t.Fatalf("PING after %q (reply %q): %q then %q, want %q", cmd, reply, pong, rest, want)
		}
	})
}

// blockingTimeoutArg is the number of arguments of a command that blocks
// until its last one, a timeout in ms, has passed (0: none).
func blockingTimeoutArg(name string) int {
	switch name {
	case "wait":
		return 2
	case "waitaof":
		return 3
	}
	return 0
}

// isSubscribeFamily reports whether a command answers once per channel.
func isSubscribeFamily(name string) bool {
	switch name {
	case "subscribe", "psubscribe", "unsubscribe", "punsubscribe", "ssubscribe", "sunsubscribe":
		return true
	}
	return false
}

// allVocab are the argument tokens FuzzAll builds CL.ALL calls from.
var allVocab = []string{"1", "0", "-1", "2", "5", "10", "60", "1s", "250ms", "1.5s", "10y",
	"9223372036854775807", "-9223372036854775808", "4294967296", "x", "", "MS", "ms", "cl.fixed"}

// allKinds are the check names FuzzAll uses, with the argument count each
// takes inside CL.ALL (quantity explicit, MS not counted).
var allKinds = []struct {
	name string
	args int
}{{"cl.throttle", 5}, {"cl.fixed", 4}, {"cl.sliding", 4}, {"cl.slidinglog", 4}, {"cl.acquire", 4}, {"CL.FIXED", 4}, {"cl.bogus", 3}}

// allGood are plausible values for each argument of each check kind
// (after the key), so that many fuzzed calls parse and reach the decision.
var allGood = map[string][][]string{
	"cl.throttle":   {{"0", "1", "5"}, {"1", "10", "100"}, {"1", "60"}, {"0", "1", "2", "7"}},
	"cl.fixed":      {{"1", "2", "5"}, {"1s", "250ms", "60"}, {"0", "1", "2", "6", "-1"}},
	"cl.sliding":    {{"1", "2", "5"}, {"1s", "250ms", "60"}, {"0", "1", "2", "6", "-1"}},
	"cl.slidinglog": {{"1", "2", "5"}, {"1s", "250ms", "60"}, {"0", "1", "2", "6"}},
	"cl.acquire":    {{"1", "2"}, {"1s", "100ms"}, {"t1", "t2", "t3"}},
}

// allKeys are the keys FuzzAll's checks use; "str" holds a string.
var allKeys = []string{"a", "b", "c", "d", "str"}

// buildAll turns fuzz bytes into CL.ALL's arguments. It returns them, the
// keys named and how many checks a correct parse finds (-1 when the
// structure was deliberately broken).
func buildAll(spec []byte) (args []string, keys []string, checks int) {
	next := func() byte {
		if len(spec) == 0 {
			return 0
		}
		b := spec[0]
		spec = spec[1:]
		return b
	}
	raw := func() string {
		n := min(int(next()%16), len(spec))
		s := string(spec[:n])
		spec = spec[n:]
		return s
	}
	n := int(next()%4) + 1
	checks = n
	for i := 0; i < n; i++ {
		kind := allKinds[int(next())%len(allKinds)]
		args = append(args, kind.name)
		if kind.name == "cl.bogus" {
			checks = -1
		}
		kb := next()
		key := allKeys[int(kb)%len(allKeys)]
		if kb >= 250 {
			key = raw()
		}
		args = append(args, key)
		keys = append(keys, key)
		count := kind.args - 1
		switch mod := next() % 8; mod {
		case 1:
			count--
			checks = -1
		case 2:
			count++
			checks = -1
		}
		good := allGood[strings.ToLower(kind.name)]
		for j := 0; j < count; j++ {
			tb := next()
			switch {
			case tb >= 240:
				args = append(args, raw())
			case tb < 128 && j < len(good):
				args = append(args, good[j][int(tb)%len(good[j])])
			default:
				args = append(args, allVocab[int(tb)%len(allVocab)])
			}
			if args[len(args)-1] == "cl.fixed" || strings.EqualFold(args[len(args)-1], "ms") {
				checks = -1 // a token that changes how the server splits the checks
			}
		}
		if next()%4 == 0 {
			args = append(args, "MS")
		}
	}
	return args, keys, checks
}

// FuzzAll sends CL.ALL with fuzzed check structures (valid and broken
// names, arities, keys, parameters, MS flags) to an in-process server on a
// frozen clock that only the fuzzer moves. The reply must be one
// well-formed value: an error, or one [limited, limit, remaining,
// retry_after, reset_after] tuple of integers per check with limited 0 or
// 1. All or nothing: when the reply is an error or any check is limited,
// CL.INFO of every key named reads exactly as before. PING answers after.
func FuzzAll(f *testing.F) {
	clock := servertest.NewClock(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	addr, logs := fuzzServer(f, clock.Now)
	rc := resptest.MustDial(f, addr)
	if v, err := rc.Do("SET", "str", "not a number"); err != nil || v.Str != "OK" {
		f.Fatalf("SET str: %v %v", v, err)
	}
	seeds := [][]byte{
		{0, 1, 0, 0, 4, 4, 7},                // one CL.FIXED a 5 1s 2 MS
		{1, 0, 1, 0, 4, 5, 6, 1, 0, 1, 2, 0}, // CL.THROTTLE b ..., CL.FIXED c ...
		{3, 2, 2, 0, 4, 7, 0, 1, 3, 3, 0, 4, 8, 0, 4, 4, 0, 0, 0, 0, 4, 5, 0, 0, 5, 0, 3, 4, 4, 0},
		{0, 4, 0, 0, 1, 7, 16, 0},               // CL.ACQUIRE with a token
		{1, 1, 0, 0, 4, 7, 1, 0, 1, 0, 0, 4, 7}, // the same key twice
		{0, 6, 0, 0, 1, 2, 3},                   // an unknown check
		{0, 1, 4, 0, 4, 7, 1},                   // a check on the string key
		{0, 0, 250, 3, 'k', 'e', 'y', 1, 0, 4, 5, 6, 1},
		{2, 2, 1, 1, 4, 7, 2, 3, 1, 2, 4, 7, 1, 0, 2},
	}
	for i, s := range seeds {
		f.Add(uint16(i*300), s)
	}
	f.Fuzz(func(t *testing.T, adv uint16, spec []byte) {
		clock.Advance(time.Duration(adv) * time.Millisecond)
		args, keys, checks := buildAll(spec)
		snapshot := func() []string {
			var out []string
			for _, k := range keys {
				v, err := rc.Do("CL.INFO", k)
				if err != nil {
					t.Fatalf("CL.INFO %q: %v\nserver log:\n%s", k, err, logs)
				}
				out = append(out, v.String())
			}
			return out
		}
		before := snapshot()
		rc.C.SetDeadline(time.Now().Add(10 * time.Second))
		if _, err := rc.C.Write(resptest.AppendCommand(nil, append([]string{"CL.ALL"}, args...)...)); err != nil {
			t.Fatalf("CL.ALL %q: write: %v", args, err)
		}
		// redcon's parser for the one value, then the strict reader's.
		raw, rest, err := readOneBuffered(rc)
		if err != nil {
			t.Fatalf("CL.ALL %q: no complete reply: %v (%q)\nserver log:\n%s", args, err, rest, logs)
		}
		v, err := resptest.Read(bufioOf(raw))
		if err != nil {
			t.Fatalf("CL.ALL %q: reply %q: %v", args, raw, err)
		}
		unchanged := v.Kind == '-'
		switch v.Kind {
		case '-':
		case '*':
			if checks >= 0 && len(v.Elems) != checks {
				t.Fatalf("CL.ALL %q: %d tuples for %d checks: %v", args, len(v.Elems), checks, v)
			}
			if len(v.Elems) == 0 {
				t.Fatalf("CL.ALL %q: empty array", args)
			}
			for _, e := range v.Elems {
				n := e.Ints()
				if len(n) != 5 || (n[0] != 0 && n[0] != 1) {
					t.Fatalf("CL.ALL %q: tuple %v in %v", args, e, v)
				}
				if n[0] == 1 {
					unchanged = true
				}
			}
		default:
			t.Fatalf("CL.ALL %q: reply %v", args, v)
		}
		if unchanged {
			if after := snapshot(); !slices.Equal(before, after) {
				t.Fatalf("CL.ALL %q replied %v but changed state:\nbefore %v\nafter  %v", args, v, before, after)
			}
		}
		if v, err := rc.Do("PING"); err != nil || v.Str != "PONG" {
			t.Fatalf("PING after CL.ALL %q: %v, %v", args, v, err)
		}
	})
}

// readOneBuffered reads one complete value from rc's buffered reader,
// checked with redcon.ReadNextRESP, and returns its raw bytes.
func readOneBuffered(rc *resptest.Conn) (raw, rest []byte, err error) {
	var buf []byte
	for {
		if n, r := redcon.ReadNextRESP(buf); n > 0 {
			if n != len(buf) {
				return nil, buf, fmt.Errorf("%d bytes after the value", len(buf)-n)
			}
			return r.Raw, nil, nil
		}
		b, err := rc.R.ReadSlice('\n')
		buf = append(buf, b...)
		switch {
		case err == nil, errors.Is(err, bufio.ErrBufferFull):
		case errors.Is(err, io.EOF):
			return nil, buf, io.ErrUnexpectedEOF
		default:
			return nil, buf, err
		}
	}
}

func bufioOf(b []byte) *bufio.Reader { return bufio.NewReader(bytes.NewReader(b)) }
