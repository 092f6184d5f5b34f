package resp

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strings"
	"testing"
)

// limits builds a reader with explicit limits. Zero fields take the
// defaults; the combination is not validated, so tests can use small
// query buffers.
type limits struct {
	bulk, multi, query int64
	inline             int
}

func newTestReader(l limits) *reader {
	cfg := Config{MaxBulkLen: l.bulk, MaxMultiBulkLen: l.multi, MaxQueryBuffer: l.query, MaxInlineLen: l.inline}.withDefaults()
	r := newReader(&cfg)
	return &r
}

// chunkReader returns at most n bytes per Read (all that is left if n <= 0).
type chunkReader struct {
	data []byte
	n    int
}

func (c *chunkReader) Read(p []byte) (int, error) {
	if len(c.data) == 0 {
		return 0, io.EOF
	}
	k := len(c.data)
	if c.n > 0 && k > c.n {
		k = c.n
	}
	k = copy(p, c.data[:k])
	c.data = c.data[k:]
	return k, nil
}

// parseAll feeds input to r through src and returns the commands parsed,
// copied, and the protocol error text ("" for none). Commands are drained
// after every read, as a connection does.
func parseAll(t testing.TB, r *reader, src io.Reader) ([][]string, string) {
	t.Helper()
	var cmds [][]string
	for {
		for {
			args, err := r.next()
			if err != nil {
				var pe *protocolError
				if !errors.As(err, &pe) {
					t.Fatalf("next: error %v is not a protocolError", err)
				}
				return cmds, pe.msg
			}
			if args == nil {
				break
			}
			if len(args) == 0 {
				t.Fatalf("next returned an empty command")
			}
			cmd := make([]string, len(args))
			for i, a := range args {
				cmd[i] = string(a)
			}
			cmds = append(cmds, cmd)
		}
		if n, err := r.fill(src); n == 0 && err != nil {
			return cmds, ""
		}
	}
}

func parseString(t testing.TB, l limits, input string, chunk int) ([][]string, string) {
	t.Helper()
	return parseAll(t, newTestReader(l), &chunkReader{data: []byte(input), n: chunk})
}

func cmds(c ...[]string) [][]string { return c }
func cmd(args ...string) []string   { return args }

// A pipeline mixing every valid form; used by the split tests.
const validPipeline = "*1\r\n$4\r\nPING\r\n" +
	"*3\r\n$3\r\nSET\r\n$3\r\nkey\r\n$5\r\nvalue\r\n" +
	"*0\r\n*-1\r\n" +
	"*2\r\n$4\r\nECHO\r\n$6\r\na\r\nb\x00c\r\n" +
	"*2\r\n$4\r\nECHO\r\n$0\r\n\r\n" +
	"\r\n\n   \r\n" +
	"set \"a b\" 'c\\'d' \"\\x41\\n\"\r\n" +
	"PING\n" +
	"*1\r\n$12\r\n*1\r\n$4\r\nPING\r\n"

var validPipelineCmds = cmds(
	cmd("PING"),
	cmd("SET", "key", "value"),
	cmd("ECHO", "a\r\nb\x00c"),
	cmd("ECHO", ""),
	cmd("set", "a b", "c'd", "A\n"),
	cmd("PING"),
	cmd("*1\r\n$4\r\nPING"),
)

func TestReaderValid(t *testing.T) {
	tests := []struct {
		in   string
		want [][]string
	}{
		0:  {"*1\r\n$4\r\nPING\r\n", cmds(cmd("PING"))},
		1:  {"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$0\r\n\r\n", cmds(cmd("SET", "k", ""))},
		2:  {"*2\r\n$4\r\necho\r\n$4\r\na\r\nb\r\n", cmds(cmd("echo", "a\r\nb"))},
		3:  {"*0\r\n*-1\r\n*-5\r\n*1\r\n$4\r\nPING\r\n", cmds(cmd("PING"))},
		4:  {"*-9223372036854775808\r\n", nil},
		5:  {"*1\r\n$4\r\nPING\r\n*1\r\n$4\r\nPING\r\n*1\r\n$4\r\nPING\r\n", cmds(cmd("PING"), cmd("PING"), cmd("PING"))},
		6:  {"PING\r\n", cmds(cmd("PING"))},
		7:  {"PING\n", cmds(cmd("PING"))},
		8:  {"\r\n\n \t \r\nPING\n", cmds(cmd("PING"))},
		9:  {"set a b\r\nget a\r\n", cmds(cmd("set", "a", "b"), cmd("get", "a"))},
		10: {"PING\r\n*1\r\n$4\r\nPING\r\nPING\n", cmds(cmd("PING"), cmd("PING"), cmd("PING"))},
		11: {"PING\r\r\n", cmds(cmd("PING"))},
		12: {"$3 abc\r\n", cmds(cmd("$3", "abc"))}, // no Tile38 form
		// Incomplete input: no command, no error.
		13: {"*2\r\n$3\r\nGET\r\n$1\r\nk", nil},
		14: {"*2\r\n$3\r\nGET\r\n$1\r\nk\r", nil},
		15: {"*2\r\n$3\r\nGET\r\n$1", nil},
		16: {"*2\r", nil},
		17: {"PING", nil},
		18: {"*1\r\n$4\r\nPING\r\n*1\r\n$4\r\nPI", cmds(cmd("PING"))},
		19: {validPipeline, validPipelineCmds},
	}
	for i, tt := range tests {
		for _, chunk := range []int{0, 1, 3} {
			have, herr := parseString(t, limits{}, tt.in, chunk)
			if herr != "" || !reflect.DeepEqual(have, tt.want) {
				t.Errorf("%d (chunk %d): %q\nhave %q, error %q\nwant %q", i, chunk, tt.in, have, herr, tt.want)
			}
		}
	}
}

func TestReaderInline(t *testing.T) {
	tests := []struct {
		line string
		want []string // nil: unbalanced quotes
	}{
		0:  {`set "foo bar" baz`, cmd("set", "foo bar", "baz")},
		1:  {`"a\nb\tc\rd\be\af\\g\"h"`, cmd("a\nb\tc\rd\be\af\\g\"h")},
		2:  {`"\x41\x4a\x4B\xff\x00"`, cmd("AJK\xff\x00")},
		3:  {`"\xzz" "\x4" "\x"`, cmd("xzz", "x4", "x")},
		4:  {`"\q\'"`, cmd(`q'`)},
		5:  {`'a\nb' 'it\'s' 'back\\slash'`, cmd(`a\nb`, `it's`, `back\\slash`)},
		6:  {`"" ''`, cmd("", "")},
		7:  {"  \t foo\tbar  ", cmd("foo", "bar")},
		8:  {"\v\ffoo\vbar", cmd("foo\vbar")},
		9:  {`a"b c"`, cmd("ab c")},
		10: {`a'b'c d`, nil},
		11: {`"foo"bar`, nil},
		12: {`'foo'bar`, nil},
		13: {`"foo"'bar'`, nil},
		14: {"\"foo\"\tbar", cmd("foo", "bar")},
		15: {"\"foo\"\vbar", cmd("foo", "bar")},
		16: {`"foo`, nil},
		17: {`'foo`, nil},
		18: {`"foo\"`, nil},
		19: {`"foo\`, nil},
		20: {`'foo\'`, nil},
		21: {"a\x00b c", cmd("a\x00b", "c")},
		22: {"a\rb", cmd("a", "b")},
		23: {`SET k "v"`, cmd("SET", "k", "v")},
		24: {`x"\x41"`, cmd("xA")},
		25: {`'\x41'`, cmd(`\x41`)},
	}
	for i, tt := range tests {
		for _, eol := range []string{"\n", "\r\n"} {
			have, herr := parseString(t, limits{}, tt.line+eol, 0)
			if tt.want == nil {
				if herr != msgUnbalanced || have != nil {
					t.Errorf("%d: %q: have %q, error %q; want %q", i, tt.line, have, herr, msgUnbalanced)
				}
				continue
			}
			if herr != "" || !reflect.DeepEqual(have, cmds(tt.want)) {
				t.Errorf("%d: %q: have %q, error %q; want %q", i, tt.line, have, herr, tt.want)
			}
		}
	}
}

func TestReaderErrors(t *testing.T) {
	big := strings.Repeat("1", 64<<10)
	tests := []struct {
		in   string
		want [][]string // commands before the error
		err  string
	}{
		0:  {"*abc\r\n", nil, msgInvalidMultibulk},
		1:  {"*1x\r\n", nil, msgInvalidMultibulk},
		2:  {"*\r\n", nil, msgInvalidMultibulk},
		3:  {"*01\r\n", nil, msgInvalidMultibulk},
		4:  {"*+1\r\n", nil, msgInvalidMultibulk},
		5:  {"*-0\r\n", nil, msgInvalidMultibulk},
		6:  {"* 1\r\n", nil, msgInvalidMultibulk},
		7:  {"*99999999999999999999\r\n", nil, msgInvalidMultibulk},
		8:  {"*9223372036854775808\r\n", nil, msgInvalidMultibulk},
		9:  {"*1048577\r\n", nil, msgInvalidMultibulk},
		10: {"*3\n$3\r\nfoo\r\n", nil, msgInvalidMultibulk},
		11: {"*1\r\n$abc\r\n", nil, msgInvalidBulk},
		12: {"*1\r\n$-1\r\n", nil, msgInvalidBulk},
		13: {"*1\r\n$\r\n", nil, msgInvalidBulk},
		14: {"*1\r\n$16777217\r\n", nil, msgInvalidBulk},
		15: {"*1\r\n$3\n", nil, msgInvalidBulk},
		16: {"*1\r\n$3\r\nfooXY", nil, msgInvalidBulk},
		17: {"*1\r\n$3\r\nfoo\rX", nil, msgInvalidBulk},
		18: {"*1\r\n$3\r\nfoo\n\r", nil, msgInvalidBulk},
		19: {"*1\r\nfoo\r\n", nil, msgExpectedDollar + "f'"},
		20: {"*2\r\n$1\r\na\r\n:1\r\n", nil, msgExpectedDollar + ":'"},
		21: {"*1\r\n\r\n", nil, msgExpectedDollar + "\r'"},
		22: {"*1\r\n\xff\r\n", nil, msgExpectedDollar + "\xff'"},
		23: {"*" + big + "1", nil, msgTooBigMbulk},
		24: {"*1\r\n$" + big, nil, msgTooBigBulk},
		25: {"*1\r\nx" + big, nil, msgTooBigBulk},
		26: {big + "x", nil, msgTooBigInline},
		27: {`SET "a`, nil, ""}, // incomplete line: no error yet
		28: {"SET \"a\r\n", nil, msgUnbalanced},
		29: {"PING\r\n*1\r\n$4\r\nPING\r\n*x\r\nPING\r\n", cmds(cmd("PING"), cmd("PING")), msgInvalidMultibulk},
		30: {"PING\r\n*1\r\n$4\r\nPING\r\nx\"y\"z\r\nPING\r\n", cmds(cmd("PING"), cmd("PING")), msgUnbalanced},
		31: {"*2\r\n$1\r\na\r\n$1\r\nb\r\n*1\r\n$1\r\nab\r\n", cmds(cmd("a", "b")), msgInvalidBulk},
	}
	for i, tt := range tests {
		for _, chunk := range []int{0, 1, 7} {
			have, herr := parseString(t, limits{}, tt.in, chunk)
			if herr != tt.err || !reflect.DeepEqual(have, tt.want) {
				t.Errorf("%d (chunk %d): %.40q\nhave %q, error %q\nwant %q, error %q", i, chunk, tt.in, have, herr, tt.want, tt.err)
			}
		}
	}
}

func TestReaderLimits(t *testing.T) {
	bulk := func(n int) string {
		return fmt.Sprintf("*1\r\n$%d\r\n%s\r\n", n, strings.Repeat("x", n))
	}
	multi := func(n int) string {
		return fmt.Sprintf("*%d\r\n", n) + strings.Repeat("$1\r\nx\r\n", n)
	}
	countLine := func(n int) string { // a "$..." line with n bytes before '\n'
		return "*1\r\n$" + strings.Repeat("1", n-2) + "\r"
	}
	ok := ""
	tests := []struct {
		l     limits
		in    string
		ncmds int
		err   string
	}{
		0:  {limits{bulk: 10}, bulk(10), 1, ok},
		1:  {limits{bulk: 10}, bulk(11), 0, msgInvalidBulk},
		2:  {limits{multi: 3}, multi(3), 1, ok},
		3:  {limits{multi: 3}, multi(4), 0, msgInvalidMultibulk},
		4:  {limits{inline: 10}, "PING      \n", 1, ok},               // 10 bytes
		5:  {limits{inline: 10}, "PING     \r\n", 1, ok},              // 10 bytes with '\r'
		6:  {limits{inline: 10}, "PING       \n", 0, msgTooBigInline}, // 11
		7:  {limits{inline: 10}, "PING      ", 0, ok},                 // 10, waiting
		8:  {limits{inline: 10}, "PING       ", 0, msgTooBigInline},
		9:  {limits{}, countLine(64<<10) + "\n", 0, msgInvalidBulk}, // a line, not a number
		10: {limits{}, countLine(64<<10) + "X", 0, msgTooBigBulk},
		11: {limits{}, countLine(64<<10+1) + "\n", 0, msgTooBigBulk},
		12: {limits{}, "*1\r\n$" + strings.Repeat("1", 64<<10-1), 0, ok},
		13: {limits{}, "*" + strings.Repeat("1", 64<<10-1), 0, ok},
		14: {limits{}, "*" + strings.Repeat("1", 64<<10), 0, msgTooBigMbulk},
		// Query buffer: "*1\r\n$89\r\n" is 9 bytes, +89+2 = 100.
		15: {limits{bulk: 1000, query: 100}, bulk(89), 1, ok},
		16: {limits{bulk: 1000, query: 100}, "*1\r\n$90\r\n", 0, msgQueryBufLimit},
		// 14 one-byte bulks after "*100\r\n" are 6+98 = 104 bytes pending.
		17: {limits{query: 104}, multi(100)[:104], 0, ok},
		18: {limits{query: 103}, multi(100)[:104], 0, msgQueryBufLimit},
	}
	for i, tt := range tests {
		for _, chunk := range []int{0, 1, 5} {
			have, herr := parseString(t, tt.l, tt.in, chunk)
			if herr != tt.err || len(have) != tt.ncmds {
				t.Errorf("%d (chunk %d): %.40q: have %d commands, error %q; want %d, %q", i, chunk, tt.in, len(have), herr, tt.ncmds, tt.err)
			}
		}
	}
}

// Every split of a valid pipeline, and of pipelines ending in an error,
// gives the same commands and error as the whole.
func TestReaderSplitEveryByte(t *testing.T) {
	inputs := []string{
		validPipeline,
		validPipeline + "*1\r\n$4\r\nPING\r\n*2\r\nxx",
		validPipeline + "PING\r\n\"unbalanced\r\nPING\r\n",
		validPipeline + "*1\r\n$3\r\nabcde",
	}
	for n, in := range inputs {
		want, werr := parseString(t, limits{}, in, 0)
		if n == 0 && (werr != "" || !reflect.DeepEqual(want, validPipelineCmds)) {
			t.Fatalf("whole pipeline: %q, %q", want, werr)
		}
		if have, herr := parseString(t, limits{}, in, 1); herr != werr || !reflect.DeepEqual(have, want) {
			t.Errorf("input %d, one byte at a time: have %q, %q; want %q, %q", n, have, herr, want, werr)
		}
		for i := 1; i < len(in); i++ {
			r := newTestReader(limits{})
			src := io.MultiReader(strings.NewReader(in[:i]), strings.NewReader(in[i:]))
			have, herr := parseAll(t, r, src)
			if herr != werr || !reflect.DeepEqual(have, want) {
				t.Errorf("input %d split at %d: have %q, %q; want %q, %q", n, i, have, herr, want, werr)
			}
		}
	}
}

// growthReader counts how often the buffer of r changes size, and checks
// after every read that parsing kept up: what is left unparsed is at most
// one partial element, so nothing is scanned again on the next read.
type growthReader struct {
	t       *testing.T
	r       *reader
	src     io.Reader
	lens    []int
	maxLag  int
	reads   int
	checked int
}

func (g *growthReader) Read(p []byte) (int, error) {
	if len(g.lens) == 0 || g.lens[len(g.lens)-1] != len(g.r.buf) {
		g.lens = append(g.lens, len(g.r.buf))
	}
	if g.reads > 0 {
		if lag := g.r.end - g.r.pos; lag > g.maxLag {
			g.t.Fatalf("read %d: %d bytes unparsed before reading more (pos %d, end %d)", g.reads, lag, g.r.pos, g.r.end)
		}
		g.checked++
	}
	g.reads++
	return g.src.Read(p)
}

func TestReaderResumable(t *testing.T) {
	const n = 1000000
	in := fmt.Sprintf("*%d\r\n", n) + strings.Repeat("$1\r\nx\r\n", n)
	r := newTestReader(limits{})
	g := &growthReader{t: t, r: r, src: &chunkReader{data: []byte(in), n: 4096}, maxLag: len("$1\r\nx\r\n") - 1}
	have, herr := parseAll(t, r, g)
	if herr != "" || len(have) != 1 || len(have[0]) != n {
		t.Fatalf("have %d commands, error %q", len(have), herr)
	}
	for i, a := range have[0] {
		if a != "x" {
			t.Fatalf("arg %d = %q", i, a)
		}
	}
	if g.checked < len(in)/4096 {
		t.Fatalf("checked %d reads only", g.checked)
	}
	// 16 KiB doubling to the 7 MB command: about ten sizes.
	if len(g.lens) > 12 {
		t.Errorf("buffer took %d sizes: %v", len(g.lens), g.lens)
	}
}

// A large bulk grows the buffer as its bytes arrive: doubling from 16 KiB,
// then the exact size of the command for the last step, then 16 KiB again
// once it is consumed.
func TestReaderLargeBulkGrowsWithData(t *testing.T) {
	const size = 10 << 20
	in := fmt.Sprintf("*3\r\n$3\r\nSET\r\n$3\r\nkey\r\n$%d\r\n", size) + strings.Repeat("v", size) + "\r\n"
	r := newTestReader(limits{})
	g := &growthReader{t: t, r: r, src: &chunkReader{data: []byte(in), n: 64 << 10}, maxLag: len(in)}
	have, herr := parseAll(t, r, g)
	if herr != "" || len(have) != 1 || have[0][0] != "SET" || have[0][1] != "key" || len(have[0][2]) != size {
		t.Fatalf("have %d commands, error %q", len(have), herr)
	}
	var want []int
	for n := initReadBuf; n < len(in); n *= 2 {
		want = append(want, n)
	}
	want = append(want, len(in), initReadBuf)
	if !reflect.DeepEqual(g.lens, want) {
		t.Errorf("buffer sizes %v, want %v", g.lens, want)
	}
}

// Arguments parsed before a compaction still point at the right bytes.
func TestReaderCompaction(t *testing.T) {
	partial := "*3\r\n$3\r\nSET\r\n$3\r\nkey\r\n$5\r\nva"
	pad := initReadBuf - len(partial)
	prefix := strings.Repeat("PING\r\n", pad/6) + strings.Repeat("\n", pad%6)
	in := prefix + partial + "lue\r\n" + "*1\r\n$4\r\nPING\r\n"
	r := newTestReader(limits{})
	g := &growthReader{t: t, r: r, src: &chunkReader{data: []byte(in), n: initReadBuf}, maxLag: 2}
	have, herr := parseAll(t, r, g)
	if herr != "" || len(have) != pad/6+2 {
		t.Fatalf("have %d commands, error %q", len(have), herr)
	}
	if got := have[len(have)-2]; !reflect.DeepEqual(got, cmd("SET", "key", "value")) {
		t.Errorf("command after compaction: %q", got)
	}
	if len(g.lens) != 1 {
		t.Errorf("buffer sizes %v: compaction should not grow", g.lens)
	}
}

// Arguments parsed before the buffer grows still point at the right bytes.
func TestReaderGrowthRebase(t *testing.T) {
	val := strings.Repeat("0123456789", 10000)
	in := "*4\r\n$3\r\nSET\r\n$3\r\nkey\r\n$" + fmt.Sprint(len(val)) + "\r\n" + val + "\r\n$2\r\nEX\r\n"
	for _, chunk := range []int{1000, 4096, 50000} {
		have, herr := parseString(t, limits{}, in, chunk)
		if herr != "" || len(have) != 1 || !reflect.DeepEqual(have[0], cmd("SET", "key", val, "EX")) {
			t.Errorf("chunk %d: %d commands, error %q", chunk, len(have), herr)
		}
	}
}

// A buffer grown large is dropped once empty; the argument slice too.
func TestReaderShrinks(t *testing.T) {
	in := fmt.Sprintf("*5000\r\n%s$%d\r\n%s\r\n", strings.Repeat("$1\r\nx\r\n", 4999), 2<<20, strings.Repeat("x", 2<<20))
	r := newTestReader(limits{})
	g := &growthReader{t: t, r: r, src: &chunkReader{data: []byte(in), n: 1 << 20}, maxLag: len(in)}
	if have, herr := parseAll(t, r, g); herr != "" || len(have) != 1 {
		t.Fatalf("have %d commands, error %q", len(have), herr)
	}
	if l := g.lens; len(l) < 3 || l[len(l)-2] != len(in) || l[len(l)-1] != initReadBuf {
		t.Errorf("buffer sizes %v, want the command size (%d) then %d", l, len(in), initReadBuf)
	}
	if cap(r.args) > maxRetainedArgs {
		t.Errorf("args capacity %d", cap(r.args))
	}
}

func TestReaderZeroAlloc(t *testing.T) {
	pipeline := bytes.Repeat([]byte("*3\r\n$3\r\nSET\r\n$3\r\nkey\r\n$5\r\nvalue\r\nPING\r\nset \"a\\x41\" 'b'\r\n"), 16)
	r := newTestReader(limits{})
	var src bytes.Reader
	run := func() {
		src.Reset(pipeline)
		r.fill(&src)
		for {
			args, err := r.next()
			if err != nil {
				t.Fatal(err)
			}
			if args == nil {
				return
			}
		}
	}
	run()
	if n := testing.AllocsPerRun(100, run); n != 0 {
		t.Errorf("%v allocations per pipeline, want 0", n)
	}
}

func TestParseCount(t *testing.T) {
	tests := []struct {
		in   string
		want int64
		ok   bool
	}{
		{"0", 0, true}, {"1", 1, true}, {"-1", -1, true}, {"123", 123, true},
		{"9223372036854775807", 9223372036854775807, true},
		{"-9223372036854775808", -9223372036854775808, true},
		{"9223372036854775808", 0, false}, {"-9223372036854775809", 0, false},
		{"18446744073709551615", 0, false}, {"18446744073709551616", 0, false},
		{"", 0, false}, {"-", 0, false}, {"-0", 0, false}, {"00", 0, false},
		{"01", 0, false}, {"+1", 0, false}, {" 1", 0, false}, {"1 ", 0, false},
		{"1a", 0, false}, {"123456789012345678901", 0, false},
	}
	for _, tt := range tests {
		n, ok := parseCount([]byte(tt.in + "\r"))
		if n != tt.want || ok != tt.ok {
			t.Errorf("parseCount(%q) = %d, %v; want %d, %v", tt.in, n, ok, tt.want, tt.ok)
		}
	}
	if _, ok := parseCount([]byte("1")); ok {
		t.Errorf("parseCount without CR succeeded")
	}
}
