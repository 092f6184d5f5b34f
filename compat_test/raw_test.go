package compat_test

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"testing"
	"time"
)

// ioTimeout bounds every network exchange (a real-time deadline, not a
// sleep): a hung server fails the test instead of hanging it.
const ioTimeout = 30 * time.Second

// rawConn is a plain RESP2 client that returns replies as raw bytes.
type rawConn struct {
	c net.Conn
	r *bufio.Reader
}

func dialRaw(t testing.TB, addr string) *rawConn {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, ioTimeout)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &rawConn{c: c, r: bufio.NewReader(c)}
}

// encodeCommand returns args as a RESP array of bulk strings.
func encodeCommand(args []string) []byte {
	b := fmt.Appendf(nil, "*%d\r\n", len(args))
	for _, a := range args {
		b = fmt.Appendf(b, "$%d\r\n%s\r\n", len(a), a)
	}
	return b
}

// do sends one command and returns the raw bytes of one complete reply.
func (rc *rawConn) do(args ...string) ([]byte, error) {
	if err := rc.c.SetDeadline(time.Now().Add(ioTimeout)); err != nil {
		return nil, err
	}
	if _, err := rc.c.Write(encodeCommand(args)); err != nil {
		return nil, err
	}
	return readFrame(rc.r, nil, 0)
}

// readFrame appends one complete RESP2 reply, byte for byte, to dst.
func readFrame(r *bufio.Reader, dst []byte, depth int) ([]byte, error) {
	if depth > 8 {
		return dst, errors.New("reply nested too deeply")
	}
	line, err := r.ReadSlice('\n')
	if err != nil {
		return append(dst, line...), fmt.Errorf("reading reply after %q: %w", dst, err)
	}
	dst = append(dst, line...)
	if len(line) < 3 || line[len(line)-2] != '\r' {
		return dst, fmt.Errorf("malformed reply line %q", line)
	}
	body := string(line[1 : len(line)-2])
	switch line[0] {
	case '+', '-', ':':
		return dst, nil
	case '$':
		n, err := strconv.Atoi(body)
		if err != nil || n < -1 || n > 1<<20 {
			return dst, fmt.Errorf("bad bulk length %q", line)
		}
		if n == -1 {
			return dst, nil
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(r, buf); err != nil {
			return append(dst, buf...), err
		}
		return append(dst, buf...), nil
	case '*':
		n, err := strconv.Atoi(body)
		if err != nil || n < -1 || n > 1<<16 {
			return dst, fmt.Errorf("bad array length %q", line)
		}
		for range n {
			if dst, err = readFrame(r, dst, depth+1); err != nil {
				return dst, err
			}
		}
		return dst, nil
	}
	return dst, fmt.Errorf("unexpected reply type %q", line)
}

// TestReplayRaw is the byte-for-byte proof: every command of every
// transcript goes out as a RESP array on a plain TCP connection and the
// reply must be exactly the expected reply encoded as RESP2.
func TestReplayRaw(t *testing.T) {
	forEachBlock(t, "raw", func(t *testing.T, b *block) (int, int) {
		clk, addr := startServer(t)
		rc := dialRaw(t, addr)
		n := 0
		for _, in := range b.instants {
			clk.Set(t0.Add(in.at))
			for _, c := range in.cmds {
				want := c.want.resp()
				got, err := rc.do(c.args...)
				if err != nil {
					t.Fatalf("%s: at t0+%v: %s: %v (read so far %s)", b.where(c), in.at, c, err, showBytes(got))
				}
				if !bytes.Equal(got, want) {
					t.Errorf("%s: at t0+%v: %s\n got: %s\nwant: %s", b.where(c), in.at, c, showBytes(got), showBytes(want))
				}
				n++
			}
		}
		return n, 0
	})
}

// TestEncodingMatchesSpecBytes pins the encoder used by TestReplayRaw to
// wire bytes quoted literally in the spec (sections 2 and 4), so that the
// raw replay does not only compare cellserver with itself.
func TestEncodingMatchesSpecBytes(t *testing.T) {
	cases := []struct {
		reply string
		wire  string
	}{
		{"[0,16,15,-1,2]", "*5\r\n:0\r\n:16\r\n:15\r\n:-1\r\n:2\r\n"},
		{"-Cell error: Store error: Zero rates are not supported", "-Cell error: Store error: Zero rates are not supported\r\n"},
		{"-Cell error: Store error: Usage: cl.throttle <key> <max_burst> <count per period> <period> [<quantity>]",
			"-Cell error: Store error: Usage: cl.throttle <key> <max_burst> <count per period> <period> [<quantity>]\r\n"},
		{"-Cell error: Store error: Error while setting key expire", "-Cell error: Store error: Error while setting key expire\r\n"},
		{`"1795312947207675371"`, "$19\r\n1795312947207675371\r\n"},
		{"2000", ":2000\r\n"},
		{"-1", ":-1\r\n"},
		{"+string", "+string\r\n"},
		{"(nil)", "$-1\r\n"},
		{`["k"]`, "*1\r\n$1\r\nk\r\n"},
		{`-"Cell error: Store error: Couldn't parse as integer: "`, "-Cell error: Store error: Couldn't parse as integer: \r\n"},
	}
	for _, c := range cases {
		r, err := parseReply(c.reply)
		if err != nil {
			t.Fatalf("%s: %v", c.reply, err)
		}
		if got := string(r.resp()); got != c.wire {
			t.Errorf("%s: encoded %q, want %q", c.reply, got, c.wire)
		}
		if got := r.String(); got != c.reply && !(r.kind == replyError && got == "-"+strconv.Quote(r.s)) {
			t.Errorf("%s: String() = %s", c.reply, got)
		}
		back, err := readFrame(bufio.NewReader(bytes.NewReader([]byte(c.wire))), nil, 0)
		if err != nil || string(back) != c.wire {
			t.Errorf("%s: readFrame = %q, %v", c.reply, back, err)
		}
	}
}
