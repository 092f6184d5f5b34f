// Package resptest is the raw RESP client of the tests: it writes commands
// on a plain net.Conn and reads replies strictly, so that the exact bytes
// on the wire are what a test checks, not a client library's reading.
package resptest

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"sort"
	"strconv"
	"testing"
	"time"
)

// Timeout bounds every dial, read and write of a Conn.
const Timeout = 30 * time.Second

// Bounds of what Read accepts: a bulk string's length (Redis's default
// proto-max-bulk-len), an aggregate's count and the nesting depth.
const (
	maxBulk  = 512 << 20
	maxCount = 1 << 24
	maxDepth = 32
)

// ErrProtocol reports bytes that are not valid RESP.
var ErrProtocol = errors.New("resp test: malformed reply")

// Value is one RESP2 or RESP3 reply.
type Value struct {
	Kind  byte    // '+', '-', ':', '$', '*'; RESP3: '%', '~', '>', '_', ',', '#', '(', '=', '!'
	Str   string  // simple string, error text, integer digits or bulk content
	Null  bool    // $-1 or *-1
	Elems []Value // a map's keys and values alternate
}

// String returns v's encoding, quoted, cut after 1 KiB.
func (v Value) String() string {
	b := v.Encode(nil)
	if len(b) > 1024 {
		return strconv.Quote(string(b[:1024])) + fmt.Sprintf("...(%d bytes)", len(b))
	}
	return strconv.Quote(string(b))
}

// Encode appends v to b as it was read.
func (v Value) Encode(b []byte) []byte {
	switch v.Kind {
	case '$', '=', '!':
		if v.Null {
			return append(b, "$-1\r\n"...)
		}
		b = append(b, v.Kind)
		b = strconv.AppendInt(b, int64(len(v.Str)), 10)
		b = append(b, "\r\n"...)
		b = append(b, v.Str...)
		return append(b, "\r\n"...)
	case '*', '%', '~', '>':
		if v.Null {
			return append(b, "*-1\r\n"...)
		}
		n := len(v.Elems)
		if v.Kind == '%' {
			n /= 2
		}
		b = append(b, v.Kind)
		b = strconv.AppendInt(b, int64(n), 10)
		b = append(b, "\r\n"...)
		for _, e := range v.Elems {
			b = e.Encode(b)
		}
		return b
	default:
		b = append(b, v.Kind)
		b = append(b, v.Str...)
		return append(b, "\r\n"...)
	}
}

// Int returns an integer reply's value; ok is false for any other reply.
func (v Value) Int() (n int64, ok bool) {
	if v.Kind != ':' {
		return 0, false
	}
	n, err := strconv.ParseInt(v.Str, 10, 64)
	return n, err == nil
}

// Ints returns an array of integers as a slice, or nil if v is not one.
func (v Value) Ints() []int64 {
	if v.Kind != '*' || v.Null {
		return nil
	}
	out := make([]int64, len(v.Elems))
	for i, e := range v.Elems {
		n, ok := e.Int()
		if !ok {
			return nil
		}
		out[i] = n
	}
	return out
}

// SortLeaves sorts, recursively, the elements of every array whose
// elements are all non-arrays, by their encoding: it makes replies whose
// order is unspecified (KEYS, SCAN) comparable.
func (v *Value) SortLeaves() {
	if v.Kind != '*' && v.Kind != '~' {
		return
	}
	leaves := true
	for i := range v.Elems {
		if k := v.Elems[i].Kind; k == '*' || k == '~' || k == '%' {
			leaves = false
			v.Elems[i].SortLeaves()
		}
	}
	if leaves {
		sort.Slice(v.Elems, func(i, j int) bool {
			return bytes.Compare(v.Elems[i].Encode(nil), v.Elems[j].Encode(nil)) < 0
		})
	}
}

// Read reads one reply strictly: every line must end in CRLF and hold no
// other CR or LF, integers must be integers, bulk strings must be as long
// as announced. An end of input inside a reply is io.ErrUnexpectedEOF.
func Read(r *bufio.Reader) (Value, error) { return read(r, 0) }

func read(r *bufio.Reader, depth int) (Value, error) {
	if depth > maxDepth {
		return Value{}, fmt.Errorf("%w: nested deeper than %d", ErrProtocol, maxDepth)
	}
	line, err := readLine(r)
	if err != nil {
		if depth > 0 && err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return Value{}, err
	}
	if len(line) == 0 {
		return Value{}, fmt.Errorf("%w: empty line", ErrProtocol)
	}
	v := Value{Kind: line[0], Str: line[1:]}
	switch v.Kind {
	case '+', '-', '(':
		return v, nil
	case '_':
		if v.Str != "" {
			return Value{}, fmt.Errorf("%w: null %q", ErrProtocol, v.Str)
		}
		return v, nil
	case '#':
		if v.Str != "t" && v.Str != "f" {
			return Value{}, fmt.Errorf("%w: boolean %q", ErrProtocol, v.Str)
		}
		return v, nil
	case ',':
		if _, err := strconv.ParseFloat(v.Str, 64); err != nil && v.Str != "inf" && v.Str != "-inf" && v.Str != "nan" {
			return Value{}, fmt.Errorf("%w: double %q", ErrProtocol, v.Str)
		}
		return v, nil
	case ':':
		if _, err := strconv.ParseInt(v.Str, 10, 64); err != nil {
			return Value{}, fmt.Errorf("%w: integer %q", ErrProtocol, v.Str)
		}
		return v, nil
	case '$', '=', '!':
		n, err := strconv.ParseInt(v.Str, 10, 64)
		if err != nil || n < -1 || n > maxBulk || n == -1 && v.Kind != '$' {
			return Value{}, fmt.Errorf("%w: length %q", ErrProtocol, v.Str)
		}
		v.Str = ""
		if n == -1 {
			v.Null = true
			return v, nil
		}
		if v.Kind == '=' && n < 4 {
			return Value{}, fmt.Errorf("%w: verbatim string without a format", ErrProtocol)
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(r, buf); err != nil {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return Value{}, err
		}
		if buf[n] != '\r' || buf[n+1] != '\n' {
			return Value{}, fmt.Errorf("%w: bulk not CRLF terminated", ErrProtocol)
		}
		v.Str = string(buf[:n])
		return v, nil
	case '*', '%', '~', '>':
		n, err := strconv.ParseInt(v.Str, 10, 64)
		if err != nil || n < -1 || n > maxCount || n == -1 && v.Kind != '*' {
			return Value{}, fmt.Errorf("%w: length %q", ErrProtocol, v.Str)
		}
		v.Str = ""
		if n == -1 {
			v.Null = true
			return v, nil
		}
		if v.Kind == '%' {
			n *= 2
		}
		v.Elems = make([]Value, 0, min(n, 1024))
		for i := int64(0); i < n; i++ {
			e, err := read(r, depth+1)
			if err != nil {
				return Value{}, err
			}
			v.Elems = append(v.Elems, e)
		}
		return v, nil
	}
	return Value{}, fmt.Errorf("%w: type byte %q", ErrProtocol, v.Kind)
}

func readLine(r *bufio.Reader) (string, error) {
	line, err := r.ReadString('\n')
	if err != nil {
		if err == io.EOF && line != "" {
			err = io.ErrUnexpectedEOF
		}
		return "", err
	}
	if len(line) < 2 || line[len(line)-2] != '\r' {
		return "", fmt.Errorf("%w: line %q not CRLF terminated", ErrProtocol, line)
	}
	line = line[:len(line)-2]
	if bytes.ContainsAny([]byte(line), "\r\n") {
		return "", fmt.Errorf("%w: CR or LF inside line %q", ErrProtocol, line)
	}
	return line, nil
}

// AppendCommand appends args as a RESP array of bulk strings.
func AppendCommand(b []byte, args ...string) []byte {
	b = append(b, '*')
	b = strconv.AppendInt(b, int64(len(args)), 10)
	b = append(b, "\r\n"...)
	for _, a := range args {
		b = append(b, '$')
		b = strconv.AppendInt(b, int64(len(a)), 10)
		b = append(b, "\r\n"...)
		b = append(b, a...)
		b = append(b, "\r\n"...)
	}
	return b
}

// Conn is one client connection speaking raw RESP.
type Conn struct {
	C net.Conn
	R *bufio.Reader
}

// Dial connects to addr.
func Dial(addr string) (*Conn, error) {
	c, err := net.DialTimeout("tcp", addr, Timeout)
	if err != nil {
		return nil, err
	}
	return &Conn{C: c, R: bufio.NewReaderSize(c, 64<<10)}, nil
}

// MustDial connects to addr or fails t, and closes the connection when
// t ends.
func MustDial(t testing.TB, addr string) *Conn {
	t.Helper()
	c, err := Dial(addr)
	if err != nil {
		t.Fatalf("dial %s: %v", addr, err)
	}
	t.Cleanup(func() { c.C.Close() })
	return c
}

// Close closes the connection.
func (c *Conn) Close() error { return c.C.Close() }

// Send writes one command.
func (c *Conn) Send(args ...string) error {
	c.C.SetWriteDeadline(time.Now().Add(Timeout))
	_, err := c.C.Write(AppendCommand(nil, args...))
	return err
}

// Read reads one reply.
func (c *Conn) Read() (Value, error) {
	c.C.SetReadDeadline(time.Now().Add(Timeout))
	return Read(c.R)
}

// Do sends one command and reads its reply.
func (c *Conn) Do(args ...string) (Value, error) {
	if err := c.Send(args...); err != nil {
		return Value{}, err
	}
	return c.Read()
}

// MustDo is Do for commands that must get a reply.
func (c *Conn) MustDo(t testing.TB, args ...string) Value {
	t.Helper()
	v, err := c.Do(args...)
	if err != nil {
		t.Fatalf("%q: %v", args, err)
	}
	return v
}

// Closed reports whether the server has closed the connection (EOF
// before any further byte, within Timeout).
func (c *Conn) Closed() (bool, error) {
	c.C.SetReadDeadline(time.Now().Add(Timeout))
	b, err := c.R.ReadByte()
	if err == io.EOF {
		return true, nil
	}
	if err != nil {
		return false, err
	}
	return false, fmt.Errorf("unexpected byte %q after the reply", b)
}

// DoBytes is Do that returns the reply's bytes, as they came.
func (c *Conn) DoBytes(args ...string) ([]byte, error) {
	v, err := c.Do(args...)
	if err != nil {
		return nil, err
	}
	return v.Encode(nil), nil
}
