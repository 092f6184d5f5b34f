// Package compat replays transcripts of replies recorded from the
// reference (Redis 7.0.15 with redis-cell 0.5.0, spec
// the CL.THROTTLE specification (shared/spec/cl-throttle.md)) against cellserver, three ways: raw RESP
// bytes, go-redis and redis-cli. The transcript format is documented at the
// top of every file in testdata/.
//
// Time is never slept: every block runs against a fresh in-process server
// whose clock is a servertest.Clock set from the transcript's "at" lines.
package compat

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/cellserver/cellserver/internal/servertest"
	"github.com/cellserver/cellserver/server"
)

// t0NS is the transcripts' time origin in ns since the Unix epoch: the TAT
// stored by spec section 10 row 36 (1795312947207675371) minus its 2 s
// emission interval. Row 34's reply only comes out at exactly this instant.
const t0NS int64 = 1795312947207675371 - 2_000_000_000

var t0 = time.Unix(0, t0NS)

// replyKind is the RESP2 type of an expected reply.
type replyKind int

const (
	replyInts   replyKind = iota // array of integers
	replyBulks                   // array of bulk strings
	replyInt                     // integer
	replyBulk                    // bulk string
	replyNil                     // null bulk string
	replyStatus                  // simple string
	replyError                   // error
)

// reply is one expected reply.
type reply struct {
	kind replyKind
	ints []int64  // replyInts
	strs []string // replyBulks
	n    int64    // replyInt
	s    string   // replyBulk, replyStatus, replyError (text without "-")
}

// resp returns the reply as RESP2 bytes, as the reference sends it.
func (r reply) resp() []byte {
	var b []byte
	switch r.kind {
	case replyInts:
		b = fmt.Appendf(b, "*%d\r\n", len(r.ints))
		for _, n := range r.ints {
			b = fmt.Appendf(b, ":%d\r\n", n)
		}
	case replyBulks:
		b = fmt.Appendf(b, "*%d\r\n", len(r.strs))
		for _, s := range r.strs {
			b = fmt.Appendf(b, "$%d\r\n%s\r\n", len(s), s)
		}
	case replyInt:
		b = fmt.Appendf(b, ":%d\r\n", r.n)
	case replyBulk:
		b = fmt.Appendf(b, "$%d\r\n%s\r\n", len(r.s), r.s)
	case replyNil:
		b = append(b, "$-1\r\n"...)
	case replyStatus:
		b = fmt.Appendf(b, "+%s\r\n", r.s)
	case replyError:
		b = fmt.Appendf(b, "-%s\r\n", r.s)
	}
	return b
}

// String returns the reply in transcript syntax.
func (r reply) String() string {
	switch r.kind {
	case replyInts:
		parts := make([]string, len(r.ints))
		for i, n := range r.ints {
			parts[i] = strconv.FormatInt(n, 10)
		}
		return "[" + strings.Join(parts, ",") + "]"
	case replyBulks:
		parts := make([]string, len(r.strs))
		for i, s := range r.strs {
			parts[i] = strconv.Quote(s)
		}
		return "[" + strings.Join(parts, ",") + "]"
	case replyInt:
		return strconv.FormatInt(r.n, 10)
	case replyBulk:
		return strconv.Quote(r.s)
	case replyNil:
		return "(nil)"
	case replyStatus:
		return "+" + r.s
	default:
		return "-" + strconv.Quote(r.s)
	}
}

// command is one command of a transcript and the reply it must get.
type command struct {
	line int      // line of the command in its file
	args []string // the command name first; any bytes
	want reply
}

// String shows the command in transcript syntax.
func (c command) String() string {
	parts := make([]string, len(c.args))
	for i, a := range c.args {
		if a == "" || strings.ContainsAny(a, " \"\\") || !isPrintable(a) {
			parts[i] = strconv.Quote(a)
		} else {
			parts[i] = a
		}
	}
	return strings.Join(parts, " ")
}

func isPrintable(s string) bool {
	return utf8.ValidString(s) && strconv.CanBackquote(s) && !strings.ContainsAny(s, "\t")
}

// instant is a run of commands sent while the clock reads t0+at.
type instant struct {
	at   time.Duration
	cmds []command
}

// block is one spec row or example: a fresh server, one connection, the
// clock starting at t0 and database 0.
type block struct {
	file     string // base name of the transcript file
	line     int    // line of the "==" header
	title    string
	instants []instant
}

// name is the block's subtest name.
func (b *block) name() string {
	return fmt.Sprintf("%s:%d %s", strings.TrimSuffix(b.file, ".txt"), b.line, b.title)
}

func (b *block) numCommands() int {
	n := 0
	for _, in := range b.instants {
		n += len(in.cmds)
	}
	return n
}

// where locates a command for failure messages.
func (b *block) where(c command) string { return fmt.Sprintf("%s:%d", b.file, c.line) }

// transcript is one parsed testdata file.
type transcript struct {
	file   string
	blocks []*block
}

var intReply = regexp.MustCompile(`^-?[0-9]+$`)

// parseTranscript parses the format documented at the top of the files.
func parseTranscript(file string, data []byte) ([]*block, error) {
	var (
		blocks []*block
		cur    *block
		last   *command // the latest command, until its "=>" line
	)
	fail := func(line int, format string, a ...any) error {
		return fmt.Errorf("%s:%d: %s", file, line, fmt.Sprintf(format, a...))
	}
	lines := strings.Split(string(data), "\n")
	for i, text := range lines {
		ln := i + 1
		if strings.HasSuffix(text, "\r") {
			return nil, fail(ln, "CR at end of line")
		}
		switch {
		case text == "" || strings.HasPrefix(text, "#"):
			continue
		case strings.HasPrefix(text, "== "):
			if last != nil {
				return nil, fail(last.line, "command without an expected reply")
			}
			cur = &block{file: file, line: ln, title: strings.TrimSpace(text[3:]), instants: []instant{{}}}
			blocks = append(blocks, cur)
			continue
		}
		if cur == nil {
			return nil, fail(ln, "%q before the first == block", text)
		}
		in := &cur.instants[len(cur.instants)-1]
		switch {
		case strings.HasPrefix(text, "at "):
			if last != nil {
				return nil, fail(last.line, "command without an expected reply")
			}
			arg := strings.TrimSpace(text[3:])
			rel := strings.HasPrefix(arg, "+")
			d, err := time.ParseDuration(strings.TrimPrefix(arg, "+"))
			if err != nil || d < 0 {
				return nil, fail(ln, "bad clock step %q", arg)
			}
			at := d
			if rel {
				at = in.at + d
			}
			if len(in.cmds) == 0 {
				in.at = at
			} else {
				cur.instants = append(cur.instants, instant{at: at})
			}
		case strings.HasPrefix(text, "=>"):
			if last == nil {
				return nil, fail(ln, "expected reply without a command")
			}
			r, err := parseReply(strings.TrimPrefix(strings.TrimPrefix(text, "=>"), " "))
			if err != nil {
				return nil, fail(ln, "%v", err)
			}
			last.want = r
			in.cmds = append(in.cmds, *last)
			last = nil
		default:
			if last != nil {
				return nil, fail(last.line, "command without an expected reply")
			}
			args, err := splitWords(text)
			if err != nil {
				return nil, fail(ln, "%v", err)
			}
			last = &command{line: ln, args: args}
		}
	}
	if last != nil {
		return nil, fail(last.line, "command without an expected reply")
	}
	for _, b := range blocks {
		if b.numCommands() == 0 {
			return nil, fail(b.line, "block %q has no command", b.title)
		}
	}
	return blocks, nil
}

// splitWords splits a command line into words: bare words separated by
// spaces, or Go quoted strings.
func splitWords(s string) ([]string, error) {
	var words []string
	for i := 0; i < len(s); {
		if s[i] == ' ' {
			i++
			continue
		}
		if s[i] != '"' {
			j := strings.IndexByte(s[i:], ' ')
			if j < 0 {
				j = len(s) - i
			}
			w := s[i : i+j]
			if strings.ContainsAny(w, "\"\t") {
				return nil, fmt.Errorf("word %q: quote it", w)
			}
			words = append(words, w)
			i += j
			continue
		}
		j := i + 1
		for ; j < len(s) && s[j] != '"'; j++ {
			if s[j] == '\\' {
				j++
			}
		}
		if j >= len(s) {
			return nil, fmt.Errorf("unterminated quoted word in %q", s[i:])
		}
		w, err := strconv.Unquote(s[i : j+1])
		if err != nil {
			return nil, fmt.Errorf("quoted word %s: %v", s[i:j+1], err)
		}
		if j+1 < len(s) && s[j+1] != ' ' {
			return nil, fmt.Errorf("no space after quoted word %s", s[i:j+1])
		}
		words = append(words, w)
		i = j + 1
	}
	if len(words) == 0 {
		return nil, fmt.Errorf("empty command")
	}
	return words, nil
}

// parseReply parses the text after "=> ".
func parseReply(s string) (reply, error) {
	switch {
	case s == "":
		return reply{}, fmt.Errorf("empty reply")
	case intReply.MatchString(s):
		n, err := strconv.ParseInt(s, 10, 64)
		return reply{kind: replyInt, n: n}, err
	case s == "(nil)":
		return reply{kind: replyNil}, nil
	case strings.HasPrefix(s, "+"):
		return reply{kind: replyStatus, s: s[1:]}, nil
	case strings.HasPrefix(s, "-\""):
		t, err := strconv.Unquote(s[1:])
		if err != nil {
			return reply{}, fmt.Errorf("quoted error %s: %v", s, err)
		}
		return reply{kind: replyError, s: t}, nil
	case strings.HasPrefix(s, "-"):
		if strings.HasSuffix(s, " ") {
			return reply{}, fmt.Errorf("error %q ends with a space: use the quoted form -\"...\"", s)
		}
		return reply{kind: replyError, s: s[1:]}, nil
	case strings.HasPrefix(s, "\""):
		t, err := strconv.Unquote(s)
		if err != nil {
			return reply{}, fmt.Errorf("bulk %s: %v", s, err)
		}
		return reply{kind: replyBulk, s: t}, nil
	case strings.HasPrefix(s, "[") && strings.HasSuffix(s, "]"):
		inner := s[1 : len(s)-1]
		if inner == "" {
			return reply{}, fmt.Errorf("empty array: its element type is unknown")
		}
		if strings.HasPrefix(inner, "\"") {
			var strs []string
			for rest := inner; ; {
				q, err := strconv.QuotedPrefix(rest)
				if err != nil {
					return reply{}, fmt.Errorf("array %s: %v", s, err)
				}
				v, _ := strconv.Unquote(q)
				strs = append(strs, v)
				rest = rest[len(q):]
				if rest == "" {
					break
				}
				if !strings.HasPrefix(rest, ",") {
					return reply{}, fmt.Errorf("array %s: want , after %s", s, q)
				}
				rest = rest[1:]
			}
			return reply{kind: replyBulks, strs: strs}, nil
		}
		var ints []int64
		for _, f := range strings.Split(inner, ",") {
			n, err := strconv.ParseInt(f, 10, 64)
			if err != nil {
				return reply{}, fmt.Errorf("array %s: %v", s, err)
			}
			ints = append(ints, n)
		}
		return reply{kind: replyInts, ints: ints}, nil
	}
	return reply{}, fmt.Errorf("unknown reply syntax %q", s)
}

// loadTranscripts parses every testdata/*.txt, sorted by name.
func loadTranscripts(t testing.TB) []transcript {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join("testdata", "*.txt"))
	if err != nil {
		t.Fatal(err)
	}
	if len(paths) == 0 {
		t.Fatal("no testdata/*.txt transcripts")
	}
	sort.Strings(paths)
	var out []transcript
	for _, p := range paths {
		data, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		blocks, err := parseTranscript(filepath.Base(p), data)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, transcript{file: filepath.Base(p), blocks: blocks})
	}
	return out
}

// startServer starts a fresh cellserver whose clock reads t0.
func startServer(t testing.TB) (*servertest.Clock, string) {
	t.Helper()
	clk := servertest.NewClock(t0)
	_, addr := servertest.Start(t, server.Config{Clock: clk.Now})
	return clk, addr
}

// tally counts what a replay checked, for the log line at its end.
type tally struct {
	blocks, commands, skipped int
}

// forEachBlock runs fn for every block as a parallel subtest and logs what
// was checked. fn returns how many commands it checked and skipped.
func forEachBlock(t *testing.T, what string, fn func(t *testing.T, b *block) (checked, skipped int)) {
	files := loadTranscripts(t)
	counts := make(map[string]*tally)
	type result struct {
		file             string
		checked, skipped int
	}
	results := make(chan result, 1024)
	total := 0
	t.Run("blocks", func(t *testing.T) {
		for _, tr := range files {
			for _, b := range tr.blocks {
				total++
				t.Run(b.name(), func(t *testing.T) {
					t.Parallel()
					c, s := fn(t, b)
					results <- result{b.file, c, s}
				})
			}
		}
	})
	close(results)
	var sum tally
	for r := range results {
		tl := counts[r.file]
		if tl == nil {
			tl = &tally{}
			counts[r.file] = tl
		}
		tl.blocks++
		tl.commands += r.checked
		tl.skipped += r.skipped
		sum.blocks++
		sum.commands += r.checked
		sum.skipped += r.skipped
	}
	for _, tr := range files {
		if tl := counts[tr.file]; tl != nil {
			t.Logf("%s: %s: %d blocks, %d commands checked, %d skipped", what, tr.file, tl.blocks, tl.commands, tl.skipped)
		}
	}
	t.Logf("%s: total %d/%d blocks, %d commands checked, %d skipped", what, sum.blocks, total, sum.commands, sum.skipped)
}

// argvSafe reports whether every argument can be passed through a
// process's argv: no NUL byte (C strings end there) and valid UTF-8.
func argvSafe(args []string) bool {
	for _, a := range args {
		if strings.IndexByte(a, 0) >= 0 || !utf8.ValidString(a) {
			return false
		}
	}
	return true
}

// showBytes prints bytes with CR/LF visible.
func showBytes(b []byte) string { return strconv.Quote(string(b)) }
