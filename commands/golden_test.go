package commands_test

import (
	"bufio"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cellserver/cellserver/internal/resptest"
	"github.com/cellserver/cellserver/internal/servertest"
	"github.com/cellserver/cellserver/server"
)

// Golden files: commands/testdata/*.txt hold commands and the exact RESP
// bytes cellserver must answer (RESP2, or RESP3 after a HELLO 3). Each
// file is replayed over one raw connection to a fresh server whose clock
// starts at goldenT0 and moves only with "at" lines.
//
// Syntax, one item per line:
//
//	# comment                  kept as is by -rewrite
//	> CMD arg "a\r\nb" 'lit'    a command; args split like redis-cli: "..."
//	                           takes Go escapes, '...' is literal
//	>{flag,flag} CMD ...       the same with flags (below)
//	at +1500ms                 advance the clock (time.ParseDuration)
//	only cellserver            the rest of the file is not compared with
//	                           a reference Redis (-reference mode)
//	requirepass PASSWORD       (first) the server requires AUTH
//	cluster-enabled yes        (first) the server runs in cluster mode
//	policies FILE              (first) the server's policy file, in testdata/
//
// The lines after a command are its expected reply: the reply's bytes split
// at CRLF, one line each. A line is written as is when it is printable
// ASCII; otherwise (empty, CR/LF/NUL inside, a trailing space, or starting
// with one of `"~#>` or "at ") it is Go-quoted. A line starting with ~ is a regexp
// that must match the whole line (ids, addresses, ages). A last line
// "(closed)" means the server must close the connection after the reply.
//
// Flags: sort (sort the elements of arrays of non-arrays before comparing,
// for KEYS and SCAN), cellserver (skipped in -reference mode, for replies
// that differ from Redis 7.0 on purpose), time (in -reference mode
// integers may differ by 1 + 1%, as real time passes), modules (the reply
// lists redis-cell, which the reference has not loaded: in -reference mode
// the command is sent, for its effects, and its reply not compared), c2
// and c3 (sent on a second or third connection, opened at its first use:
// another client, for WATCH), push (one more reply is read after the
// command's: a push frame sent to this connection, for CLIENT TRACKING;
// the two replies' lines follow the command in the order they arrived;
// push2: two such frames, for a message and a pmessage; pushN: N, for
// MONITOR's lines).
//
// Arguments may use {{ns+N}}, {{ms+N}} and {{s+N}}: the current Unix time
// in ns, ms or s (of the injected clock, or of the real one in -reference
// mode) plus N.
//
// go test ./commands -run TestGolden -rewrite rewrites the expected
// replies from what the server answers (regexp lines that still match are
// kept). With CELLSERVER_REFERENCE=host:port the files are replayed against
// a real Redis 7.0 instead (FLUSHALL first; "at" really sleeps) to check
// that the expectations are Redis's own; with -rewrite as well, Redis's
// replies become the expectations of the cases it runs.

var rewriteGolden = flag.Bool("rewrite", false, "rewrite commands/testdata/*.txt from the server's replies")

// goldenT0 is where every golden file's clock starts.
var goldenT0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// referenceEnv names the variable holding a real Redis 7.0's address.
const referenceEnv = "CELLSERVER_REFERENCE"

type goldenCase struct {
	lineNo  int
	text    string // the whole command line as written
	flags   map[string]bool
	pushes  int // pushN
	args    []string
	advance time.Duration // "at" lines
	isAt    bool
	only    bool     // after "only cellserver"
	want    []string // expected lines as written
	got     []string // set when rewriting
}

type goldenFile struct {
	path     string
	lines    []any // string (kept verbatim) or *goldenCase
	cases    []*goldenCase
	password string // from a "requirepass" line
	cluster  bool   // from a "cluster-enabled yes" line
	policies string // from a "policies FILE" line: testdata/FILE
}

func parseGoldenFile(path string) (*goldenFile, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	gf := &goldenFile{path: path}
	var cur *goldenCase
	only := false
	for i, line := range strings.Split(strings.TrimSuffix(string(data), "\n"), "\n") {
		lineNo := i + 1
		switch {
		case strings.HasPrefix(line, ">"):
			c, err := parseGoldenCommand(line, lineNo)
			if err != nil {
				return nil, fmt.Errorf("%s:%d: %v", path, lineNo, err)
			}
			c.only = only
			gf.lines = append(gf.lines, c)
			gf.cases = append(gf.cases, c)
			cur = c
		case strings.HasPrefix(line, "at "):
			d, err := time.ParseDuration(strings.TrimSpace(line[3:]))
			if err != nil || d < 0 {
				return nil, fmt.Errorf("%s:%d: bad step %q", path, lineNo, line)
			}
			c := &goldenCase{lineNo: lineNo, text: line, isAt: true, advance: d}
			gf.lines = append(gf.lines, c)
			gf.cases = append(gf.cases, c)
			cur = nil
		case strings.HasPrefix(line, "requirepass "):
			if len(gf.cases) > 0 {
				return nil, fmt.Errorf("%s:%d: requirepass after a command", path, lineNo)
			}
			gf.password = strings.TrimPrefix(line, "requirepass ")
			gf.lines = append(gf.lines, line)
			cur = nil
		case line == "cluster-enabled yes":
			if len(gf.cases) > 0 {
				return nil, fmt.Errorf("%s:%d: cluster-enabled after a command", path, lineNo)
			}
			gf.cluster = true
			gf.lines = append(gf.lines, line)
			cur = nil
		case strings.HasPrefix(line, "policies "):
			if len(gf.cases) > 0 {
				return nil, fmt.Errorf("%s:%d: policies after a command", path, lineNo)
			}
			gf.policies = filepath.Join(filepath.Dir(path), strings.TrimPrefix(line, "policies "))
			gf.lines = append(gf.lines, line)
			cur = nil
		case line == "only cellserver":
			only = true
			gf.lines = append(gf.lines, line)
			cur = nil
		case line == "" || strings.HasPrefix(line, "#"):
			gf.lines = append(gf.lines, line)
			cur = nil
		default:
			if cur == nil {
				return nil, fmt.Errorf("%s:%d: reply line without a command: %q", path, lineNo, line)
			}
			if _, err := goldenLineMatcher(line); err != nil {
				return nil, fmt.Errorf("%s:%d: %v", path, lineNo, err)
			}
			cur.want = append(cur.want, line)
		}
	}
	return gf, nil
}

func parseGoldenCommand(line string, lineNo int) (*goldenCase, error) {
	c := &goldenCase{lineNo: lineNo, text: line, flags: map[string]bool{}}
	rest := line[1:]
	if strings.HasPrefix(rest, "{") {
		end := strings.IndexByte(rest, '}')
		if end < 0 {
			return nil, fmt.Errorf("unterminated flags")
		}
		for _, f := range strings.Split(rest[1:end], ",") {
			switch f {
			case "sort", "cellserver", "time", "modules", "c2", "c3", "push", "push2":
				c.flags[f] = true
			default:
				if n, err := strconv.Atoi(strings.TrimPrefix(f, "push")); err == nil && n > 0 && strings.HasPrefix(f, "push") {
					c.pushes = n
					continue
				}
				return nil, fmt.Errorf("unknown flag %q", f)
			}
		}
		rest = rest[end+1:]
	}
	args, err := splitGoldenArgs(rest)
	if err != nil {
		return nil, err
	}
	if len(args) == 0 {
		return nil, fmt.Errorf("empty command")
	}
	c.args = args
	return c, nil
}

// splitGoldenArgs splits like redis-cli: spaces separate, "..." holds Go
// escapes, '...' is literal.
func splitGoldenArgs(s string) ([]string, error) {
	var args []string
	for {
		s = strings.TrimLeft(s, " \t")
		if s == "" {
			return args, nil
		}
		switch s[0] {
		case '"':
			q, err := strconv.QuotedPrefix(s)
			if err != nil {
				return nil, fmt.Errorf("bad quoted argument in %q", s)
			}
			u, _ := strconv.Unquote(q)
			args = append(args, u)
			s = s[len(q):]
		case '\'':
			end := strings.IndexByte(s[1:], '\'')
			if end < 0 {
				return nil, fmt.Errorf("unterminated '")
			}
			args = append(args, s[1:1+end])
			s = s[end+2:]
		default:
			end := strings.IndexAny(s, " \t")
			if end < 0 {
				end = len(s)
			}
			args = append(args, s[:end])
			s = s[end:]
		}
	}
}

var goldenTemplate = regexp.MustCompile(`\{\{(ns|ms|s)([+-]\d+)\}\}`)

// expandArgs replaces {{ns+N}}, {{ms+N}} and {{s+N}} with times relative
// to now.
func expandArgs(args []string, now time.Time) []string {
	out := make([]string, len(args))
	for i, a := range args {
		out[i] = goldenTemplate.ReplaceAllStringFunc(a, func(m string) string {
			sub := goldenTemplate.FindStringSubmatch(m)
			n, _ := strconv.ParseInt(sub[2], 10, 64)
			switch sub[1] {
			case "ns":
				return strconv.FormatInt(now.UnixNano()+n, 10)
			case "ms":
				return strconv.FormatInt(now.UnixMilli()+n, 10)
			}
			return strconv.FormatInt(now.Unix()+n, 10)
		})
	}
	return out
}

// goldenLineMatcher returns a function reporting whether an actual reply
// line matches the expected line as written.
func goldenLineMatcher(want string) (func(got string) bool, error) {
	switch {
	case strings.HasPrefix(want, "~"):
		re, err := regexp.Compile("^(?:" + want[1:] + ")$")
		if err != nil {
			return nil, err
		}
		return re.MatchString, nil
	case strings.HasPrefix(want, `"`):
		u, err := strconv.Unquote(want)
		if err != nil {
			return nil, fmt.Errorf("bad quoted line %s", want)
		}
		return func(got string) bool { return got == u }, nil
	}
	return func(got string) bool { return got == want }, nil
}

// formatGoldenLine writes an actual line the way a golden file holds it.
func formatGoldenLine(s string) string {
	quote := s == "" || s == "(closed)" || strings.HasPrefix(s, "at ") ||
		strings.ContainsAny(s[:1], "\"~#>") || strings.HasSuffix(s, " ")
	for i := 0; i < len(s) && !quote; i++ {
		quote = s[i] < 0x20 || s[i] > 0x7e
	}
	if quote {
		return strconv.Quote(s)
	}
	return s
}

// replyLines splits an encoded reply at CRLF.
func replyLines(b []byte) []string {
	return strings.Split(strings.TrimSuffix(string(b), "\r\n"), "\r\n")
}

func goldenFiles(t testing.TB) []string {
	files, err := filepath.Glob(filepath.Join("testdata", "*.txt"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no golden files: %v", err)
	}
	return files
}

func TestGolden(t *testing.T) {
	ref := os.Getenv(referenceEnv)
	for _, path := range goldenFiles(t) {
		t.Run(filepath.Base(path), func(t *testing.T) {
			gf, err := parseGoldenFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if ref != "" {
				runGoldenReference(t, gf, ref)
			} else {
				runGolden(t, gf)
			}
			if *rewriteGolden {
				if err := gf.rewrite(); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

func runGolden(t *testing.T, gf *goldenFile) {
	clk := servertest.NewClock(goldenT0)
	_, addr := servertest.Start(t, server.Config{Clock: clk.Now, Password: gf.password, ClusterEnabled: gf.cluster, Policies: gf.policies})
	conn := goldenConns(t, addr)
	closed := map[*resptest.Conn]bool{}
	for _, gc := range gf.cases {
		if gc.isAt {
			clk.Advance(gc.advance)
			continue
		}
		rc := conn(gc)
		if closed[rc] {
			t.Fatalf("%s:%d: command after the connection was closed", gf.path, gc.lineNo)
		}
		got, err := goldenExchange(rc, gc, clk.Now())
		if err != nil {
			t.Fatalf("%s:%d: %s: %v", gf.path, gc.lineNo, gc.text, err)
		}
		closed[rc] = len(got) > 0 && got[len(got)-1] == "(closed)"
		gc.got = got
		if !*rewriteGolden {
			checkGoldenCase(t, gf.path, gc, got, false)
		}
	}
}

// goldenConns returns what picks a case's connection: the file's own,
// dialled now, or the one its c2 or c3 flag names, dialled at first use.
func goldenConns(t *testing.T, addr string) func(gc *goldenCase) *resptest.Conn {
	conns := map[string]*resptest.Conn{"": resptest.MustDial(t, addr)}
	return func(gc *goldenCase) *resptest.Conn {
		name := ""
		for _, f := range []string{"c2", "c3"} {
			if gc.flags[f] {
				name = f
			}
		}
		if conns[name] == nil {
			conns[name] = resptest.MustDial(t, addr)
		}
		return conns[name]
	}
}

// goldenExchange sends gc's command and returns the reply lines, with
// "(closed)" appended when gc expects the connection to close and it did.
func goldenExchange(c *resptest.Conn, gc *goldenCase, now time.Time) ([]string, error) {
	v, err := c.Do(expandArgs(gc.args, now)...)
	if err != nil {
		return nil, err
	}
	if gc.flags["sort"] {
		v.SortLeaves()
	}
	got := replyLines(v.Encode(nil))
	pushes := 0
	if gc.flags["push"] {
		pushes = 1
	}
	if gc.flags["push2"] {
		pushes = 2
	}
	if gc.pushes > 0 {
		pushes = gc.pushes
	}
	for range pushes {
		v, err := c.Read()
		if err != nil {
			return nil, err
		}
		got = append(got, replyLines(v.Encode(nil))...)
	}
	if n := len(gc.want); n > 0 && gc.want[n-1] == "(closed)" ||
		strings.EqualFold(gc.args[0], "quit") {
		isClosed, err := c.Closed()
		if err != nil {
			return nil, err
		}
		if isClosed {
			got = append(got, "(closed)")
		}
	}
	return got, nil
}

func checkGoldenCase(t *testing.T, path string, gc *goldenCase, got []string, approx bool) {
	t.Helper()
	if !goldenMatch(gc.want, got, approx) {
		var g strings.Builder
		for _, l := range got {
			g.WriteString("\t" + formatGoldenLine(l) + "\n")
		}
		t.Errorf("%s:%d: %s\ngot:\n%swant:\n\t%s", path, gc.lineNo, gc.text, g.String(),
			strings.Join(gc.want, "\n\t"))
	}
}

// goldenMatch reports whether the reply lines got match the expected lines
// want; approx accepts integers within 1 + 1%.
func goldenMatch(want, got []string, approx bool) bool {
	if len(got) != len(want) {
		return false
	}
	for i := range got {
		m, _ := goldenLineMatcher(want[i])
		if !m(got[i]) && !(approx && approxEqual(want[i], got[i])) {
			return false
		}
	}
	return true
}

// approxEqual accepts RESP integers within 1 + 1% of each other.
func approxEqual(want, got string) bool {
	if !strings.HasPrefix(want, ":") || !strings.HasPrefix(got, ":") {
		return false
	}
	w, err1 := strconv.ParseInt(want[1:], 10, 64)
	g, err2 := strconv.ParseInt(got[1:], 10, 64)
	if err1 != nil || err2 != nil {
		return false
	}
	d := w - g
	if d < 0 {
		d = -d
	}
	if w < 0 {
		w = -w
	}
	return d <= 1+w/100
}

// rewrite writes gf back with the replies seen in this run.
func (gf *goldenFile) rewrite() error {
	var b strings.Builder
	for _, l := range gf.lines {
		gc, ok := l.(*goldenCase)
		if !ok {
			b.WriteString(l.(string) + "\n")
			continue
		}
		b.WriteString(gc.text + "\n")
		if gc.isAt {
			continue
		}
		if gc.got == nil { // not run (skipped in -reference mode)
			for _, w := range gc.want {
				b.WriteString(w + "\n")
			}
			continue
		}
		for i, g := range gc.got {
			if i < len(gc.want) {
				if m, _ := goldenLineMatcher(gc.want[i]); m(g) {
					b.WriteString(gc.want[i] + "\n")
					continue
				}
			}
			if g == "(closed)" && i == len(gc.got)-1 {
				b.WriteString(g + "\n")
				continue
			}
			b.WriteString(formatGoldenLine(g) + "\n")
		}
	}
	return os.WriteFile(gf.path, []byte(b.String()), 0o644)
}

// runGoldenReference replays gf against a real Redis at addr, skipping
// what only cellserver does: commands flagged cellserver, everything after
// "only cellserver", and CL.* commands (the module is not loaded).
func runGoldenReference(t *testing.T, gf *goldenFile, addr string) {
	admin := resptest.MustDial(t, addr)
	setup := [][]string{{"FLUSHALL"}, {"CONFIG", "RESETSTAT"}}
	if gf.password != "" {
		setup = append(setup, []string{"CONFIG", "SET", "requirepass", gf.password})
		defer func() {
			a := resptest.MustDial(t, addr)
			a.MustDo(t, "AUTH", gf.password)
			a.MustDo(t, "CONFIG", "SET", "requirepass", "")
		}()
	}
	for _, args := range setup {
		if v := admin.MustDo(t, args...); v.Kind == '-' {
			t.Fatalf("%q: %s", args, v.Str)
		}
	}
	admin.C.Close() // so that CLIENT LIST shows only the file's connection
	conn := goldenConns(t, addr)
	closed := map[*resptest.Conn]bool{}
	for _, gc := range gf.cases {
		if gc.isAt {
			time.Sleep(gc.advance) // real Redis has no injectable clock
			continue
		}
		if gc.only || gc.flags["cellserver"] || strings.HasPrefix(strings.ToLower(gc.args[0]), "cl.") {
			continue
		}
		rc := conn(gc)
		if closed[rc] {
			t.Fatalf("%s:%d: command after the connection was closed", gf.path, gc.lineNo)
		}
		got, err := goldenExchange(rc, gc, time.Now())
		if err != nil {
			t.Fatalf("%s:%d: %s: %v", gf.path, gc.lineNo, gc.text, err)
		}
		closed[rc] = len(got) > 0 && got[len(got)-1] == "(closed)"
		if gc.flags["modules"] {
			continue // sent for its effects; the reference lists no module
		}
		gc.got = got
		if gc.flags["time"] && goldenMatch(gc.want, got, true) {
			gc.got = nil // keep the injected clock's exact values
		}
		if !*rewriteGolden {
			checkGoldenCase(t, gf.path, gc, got, gc.flags["time"])
		}
	}
}

// goldenCommandNames returns every command name the golden files use, in
// lower case, with "container|sub" added when the second word names a
// subcommand in subs.
func goldenCommandNames(t *testing.T, subs map[string]bool) map[string]bool {
	names := map[string]bool{}
	for _, path := range goldenFiles(t) {
		gf, err := parseGoldenFile(path)
		if err != nil {
			t.Fatal(err)
		}
		for _, gc := range gf.cases {
			if gc.isAt {
				continue
			}
			name := strings.ToLower(gc.args[0])
			names[name] = true
			if len(gc.args) > 1 {
				if full := name + "|" + strings.ToLower(gc.args[1]); subs[full] {
					names[full] = true
				}
			}
		}
	}
	return names
}

// Check that the reader used by the harness is itself strict, since every
// golden comparison relies on it.
func TestReadRESPStrict(t *testing.T) {
	for _, in := range []string{
		"+OK\n", "+O\rK\r\n", ":1.5\r\n", "$3\r\nab\r\n", "$2\r\nabc\r\n",
		"*2\r\n:1\r\n", "%1\r\n", "$-2\r\n", "\r\n",
		"%1\r\n:1\r\n", "_x\r\n", "#x\r\n", ",a\r\n", "=3\r\ntxt\r\n", "%-1\r\n",
	} {
		if v, err := resptest.Read(bufio.NewReader(strings.NewReader(in))); err == nil {
			t.Errorf("resptest.Read(%q) = %v, want an error", in, v)
		}
	}
	in := "*3\r\n$-1\r\n*-1\r\n*2\r\n-ERR x\r\n$2\r\n\r\n\r\n"
	v, err := resptest.Read(bufio.NewReader(strings.NewReader(in)))
	if err != nil {
		t.Fatal(err)
	}
	if got := string(v.Encode(nil)); got != in {
		t.Errorf("round trip = %q, want %q", got, in)
	}
	in = "%2\r\n$1\r\na\r\n~1\r\n+x\r\n:1\r\n*4\r\n_\r\n,1.5\r\n#t\r\n=7\r\ntxt:a\r\n\r\n"
	v, err = resptest.Read(bufio.NewReader(strings.NewReader(in)))
	if err != nil {
		t.Fatal(err)
	}
	if got := string(v.Encode(nil)); got != in {
		t.Errorf("RESP3 round trip = %q, want %q", got, in)
	}
}
