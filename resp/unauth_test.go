package resp

import (
	"bytes"
	"fmt"
	"io"
	"math/rand/v2"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/tidwall/redcon"
)

// A reader of a client that has not authenticated refuses commands of more
// than 10 elements and bulks over 16384 bytes with Redis's texts; the
// configured limits still come first, as in Redis.
func TestReaderUnauthenticated(t *testing.T) {
	bulk := func(n int) string { return fmt.Sprintf("$%d\r\n%s\r\n", n, strings.Repeat("v", n)) }
	tests := []struct {
		in      string
		unauth  bool
		wantErr string
		wantN   int // commands parsed
	}{
		{"*10\r\n" + strings.Repeat(bulk(1), 10), true, "", 1},
		{"*11\r\n", true, msgUnauthMultibulk, 0},
		{"*11\r\n" + strings.Repeat(bulk(1), 11), false, "", 1},
		{"*1\r\n" + bulk(16384), true, "", 1},
		{"*1\r\n$16385\r\n", true, msgUnauthBulk, 0},
		{"*1\r\n" + bulk(16385), false, "", 1},
		{"*2\r\n" + bulk(4) + "$16385\r\n", true, msgUnauthBulk, 0},
		{"*1\r\n$4\r\nPING\r\n*11\r\n", true, msgUnauthMultibulk, 1},
		// Over the configured limits: their own errors, first.
		{"*2000000\r\n", true, msgInvalidMultibulk, 0},
		{"*1\r\n$999999999\r\n", true, msgInvalidBulk, 0},
		// Inline commands keep their own limit only.
		{"PING " + strings.Repeat("a ", 20) + "\r\n", true, "", 1},
	}
	for i, tt := range tests {
		for _, chunk := range []int{0, 1, 5} {
			r := newTestReader(limits{})
			r.unauth = tt.unauth
			have, herr := parseAll(t, r, &chunkReader{data: []byte(tt.in), n: chunk})
			if herr != tt.wantErr || len(have) != tt.wantN {
				t.Errorf("%d (chunk %d, unauth %v): %d commands, error %q; want %d, %q", i, chunk, tt.unauth, len(have), herr, tt.wantN, tt.wantErr)
			}
		}
	}
}

// boundReader checks, at every read, that the reader's buffer is no larger
// than what has arrived of the pending command justifies.
type boundReader struct {
	t     *testing.T
	r     *reader
	src   io.Reader
	rng   *rand.Rand
	reads int
}

func (b *boundReader) Read(p []byte) (int, error) {
	pending := b.r.end - b.r.start
	if limit := max(initReadBuf, 2*(pending+minRead)); len(b.r.buf) > limit {
		b.t.Fatalf("read %d: buffer of %d bytes for %d received (limit %d)", b.reads, len(b.r.buf), pending, limit)
	}
	b.reads++
	// Pieces of 1 byte to 256 KiB.
	n := 1 + b.rng.IntN(256<<10)
	return b.src.Read(p[:min(len(p), n)])
}

// Declaring a 16 MiB bulk and sending one byte of it costs the first 16 KiB
// read buffer and nothing more, however many clients do it; and the data,
// when it does come, in pieces, is parsed as usual.
func TestReaderDeclaredBulkReservesNothing(t *testing.T) {
	const clients, size = 16, 16 << 20
	header := fmt.Sprintf("*2\r\n$4\r\nECHO\r\n$%d\r\n", size)
	readers := make([]*reader, clients)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for i := range readers {
		r := newTestReader(limits{})
		// The header, parsed, then one byte of the bulk, in a read of
		// its own.
		for _, in := range []string{header, "x"} {
			if n, _ := r.fill(strings.NewReader(in)); n != len(in) {
				t.Fatalf("read %d bytes of %d", n, len(in))
			}
			if args, err := r.next(); args != nil || err != nil {
				t.Fatalf("next on an incomplete command: %q, %v", args, err)
			}
		}
		readers[i] = r
	}
	runtime.ReadMemStats(&after)
	allocated := after.TotalAlloc - before.TotalAlloc
	t.Logf("%d clients declaring %d-byte bulks: %d bytes allocated", clients, size, allocated)
	// The buffers are checked exactly below; the process-wide count gets
	// room for whatever else runs, and still fails on a single buffer
	// sized for a declared bulk.
	if limit := uint64(4 << 20); allocated > limit {
		t.Errorf("allocated %d bytes, want at most %d", allocated, limit)
	}
	for i, r := range readers {
		if len(r.buf) != initReadBuf {
			t.Errorf("reader %d: buffer of %d bytes", i, len(r.buf))
		}
	}

	// The rest arrives in random pieces: the buffer follows the data, and
	// the command is whole.
	val := bytes.Repeat([]byte("0123456789abcdef"), size/16)
	r := readers[0]
	b := &boundReader{t: t, r: r, src: io.MultiReader(bytes.NewReader(val[1:]), strings.NewReader("\r\n")), rng: rand.New(rand.NewPCG(1, 2))}
	val[0] = 'x'
	var args [][]byte
	for args == nil {
		if n, err := r.fill(b); n == 0 && err != nil {
			t.Fatalf("input ended before the command: %v", err)
		}
		var err error
		if args, err = r.next(); err != nil {
			t.Fatal(err)
		}
	}
	if len(args) != 2 || string(args[0]) != "ECHO" || !bytes.Equal(args[1], val) {
		t.Fatalf("parsed %d args, second of %d bytes", len(args), len(args[1]))
	}
	t.Logf("value of %d bytes read in %d pieces; final buffer %d bytes", size, b.reads, len(r.buf))
}

// authHandler requires AUTH, as a Handler with a password does.
type authHandler struct{ *testHandler }

func (h authHandler) Open(c *Conn) {
	h.testHandler.Open(c)
	c.SetAuthenticated(false)
}

func (h authHandler) ServeRESP(c *Conn, args [][]byte) {
	switch strings.ToUpper(string(args[0])) {
	case "AUTH":
		c.SetAuthenticated(true)
		c.Out = redcon.AppendOK(c.Out)
	case "RESET":
		c.SetAuthenticated(false)
		c.Out = redcon.AppendString(c.Out, "RESET")
	case "ECHOLEN": // the sizes of the arguments
		c.Out = redcon.AppendInt(c.Out, int64(len(args)))
	default:
		h.testHandler.ServeRESP(c, args)
	}
}

func TestServerUnauthenticated(t *testing.T) {
	h := authHandler{newTestHandler()}
	s, addr := startServer(t, Config{}, h)
	arr := func(n int) string {
		return fmt.Sprintf("*%d\r\n$7\r\nECHOLEN\r\n%s", n, strings.Repeat("$1\r\nx\r\n", n-1))
	}
	big := fmt.Sprintf("*2\r\n$4\r\nECHO\r\n$20000\r\n%s\r\n", strings.Repeat("v", 20000))
	bigReply := fmt.Sprintf("$20000\r\n%s\r\n", strings.Repeat("v", 20000))

	// From the first byte: the exact text, then the close.
	for _, tc := range []struct{ in, want string }{
		{"*11\r\n", "-ERR Protocol error: unauthenticated multibulk length\r\n"},
		{"*1\r\n$16385\r\n", "-ERR Protocol error: unauthenticated bulk length\r\n"},
		{arr(10) + "*2\r\n$4\r\nECHO\r\n$16385\r\n", ":10\r\n-ERR Protocol error: unauthenticated bulk length\r\n"},
	} {
		c := dial(t, addr)
		io.WriteString(c, tc.in)
		if got := readToEOF(t, c); got != tc.want {
			t.Errorf("%.40q: got %q, want %q", tc.in, got, tc.want)
		}
	}
	if n := s.Stats().ProtocolErrors; n != 3 {
		t.Errorf("%d protocol errors counted, want 3", n)
	}

	// AUTH lifts the limits, for the commands pipelined after it too;
	// RESET restores them.
	c := dial(t, addr)
	roundTrip(t, c, "AUTH\r\n"+arr(11)+big, "+OK\r\n:11\r\n"+bigReply)
	roundTrip(t, c, "RESET\r\n"+arr(10), "+RESET\r\n:10\r\n")
	io.WriteString(c, arr(11))
	if got, want := readToEOF(t, c), "-ERR Protocol error: unauthenticated multibulk length\r\n"; got != want {
		t.Errorf("after RESET: got %q, want %q", got, want)
	}
}

// Many clients declaring 16 MiB bulks and sending one byte make the server
// allocate about one 16 KiB read buffer each, not the declared sizes; the
// bulk is served once it all arrives.
func TestServerDeclaredBulksReserveNothing(t *testing.T) {
	const clients, size = 16, 16 << 20
	s, addr := startServer(t, Config{}, newTestHandler())
	header := fmt.Sprintf("*2\r\n$4\r\nECHO\r\n$%d\r\n", size)
	conns := make([]io.ReadWriter, clients)
	// A first client starts the event loops, outside the measure.
	roundTrip(t, dial(t, addr), "PING\r\n", "+PONG\r\n")
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	// Wait until the server holds n bytes of every client's command (polled
	// every millisecond, as each look allocates a little).
	waitHeld := func(n int) {
		deadline := time.Now().Add(testTimeout)
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		for ; ; <-tick.C {
			held := 0
			s.Range(func(c *Conn) bool {
				if c.QueryBufLen() == n {
					held++
				}
				return true
			})
			if held == clients {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%d of %d clients have %d bytes held after %v", held, clients, n, testTimeout)
			}
		}
	}
	// The header, read, then one byte of the bulk, read on its own.
	for i := range conns {
		c := dial(t, addr)
		io.WriteString(c, header)
		conns[i] = c
	}
	waitHeld(len(header))
	for _, c := range conns {
		io.WriteString(c, "x")
	}
	waitHeld(len(header) + 1)
	runtime.ReadMemStats(&after)
	allocated := after.TotalAlloc - before.TotalAlloc
	t.Logf("%d clients declaring %d-byte bulks: %d bytes allocated in the process", clients, size, allocated)
	// 16 KiB per connection on the server, plus the clients' and the
	// connections' own overhead and whatever else runs (about 300 KiB in
	// all, measured): the limit fails on a single buffer sized for a
	// declared 16 MiB bulk.
	if limit := uint64(8 << 20); allocated > limit {
		t.Errorf("allocated %d bytes, want at most %d", allocated, limit)
	}

	// The rest of one bulk arrives: it is served whole.
	val := bytes.Repeat([]byte("v"), size)
	val[0] = 'x'
	c := conns[0]
	go c.Write(append(val[1:len(val):len(val)], "\r\n"...))
	reply := make([]byte, len(fmt.Sprintf("$%d\r\n", size))+size+2)
	if _, err := io.ReadFull(c, reply); err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprintf("$%d\r\n%s\r\n", size, val); string(reply) != want {
		t.Errorf("reply of %d bytes differs", len(reply))
	}
}
