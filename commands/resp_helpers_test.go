package commands_test

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

// Raw RESP2 helpers shared by the golden, fuzz, table and transaction
// tests. They talk to a server over a plain net.Conn so that the exact
// bytes on the wire are what is checked, not a client library's reading.

// respTimeout bounds every read and write of the raw helpers.
const respTimeout = 10 * time.Second

// respValue is one RESP2 or RESP3 reply.
type respValue struct {
	kind  byte        // '+', '-', ':', '$', '*'; RESP3: '%', '~', '>', '_', ',', '#', '(', '=', '!'
	str   string      // simple string, error text, integer digits or bulk content
	null  bool        // $-1 or *-1
	elems []respValue // a map's keys and values alternate
}

func (v respValue) String() string { return strconv.Quote(string(v.encode(nil))) }

// encode appends v to b as it was read.
func (v respValue) encode(b []byte) []byte {
	switch v.kind {
	case '$', '=', '!':
		if v.null {
			return append(b, "$-1\r\n"...)
		}
		b = append(b, v.kind)
		b = strconv.AppendInt(b, int64(len(v.str)), 10)
		b = append(b, "\r\n"...)
		b = append(b, v.str...)
		return append(b, "\r\n"...)
	case '*', '%', '~', '>':
		if v.null {
			return append(b, "*-1\r\n"...)
		}
		n := len(v.elems)
		if v.kind == '%' {
			n /= 2
		}
		b = append(b, v.kind)
		b = strconv.AppendInt(b, int64(n), 10)
		b = append(b, "\r\n"...)
		for _, e := range v.elems {
			b = e.encode(b)
		}
		return b
	default:
		b = append(b, v.kind)
		b = append(b, v.str...)
		return append(b, "\r\n"...)
	}
}

// sortLeaves sorts, recursively, the elements of every array whose
// elements are all non-arrays, by their encoding: it makes replies whose
// order is unspecified (KEYS, SCAN) comparable.
func (v *respValue) sortLeaves() {
	if v.kind != '*' && v.kind != '~' {
		return
	}
	leaves := true
	for i := range v.elems {
		if k := v.elems[i].kind; k == '*' || k == '~' || k == '%' {
			leaves = false
			v.elems[i].sortLeaves()
		}
	}
	if leaves {
		sort.Slice(v.elems, func(i, j int) bool {
			return bytes.Compare(v.elems[i].encode(nil), v.elems[j].encode(nil)) < 0
		})
	}
}

// errProtocol reports bytes that are not valid RESP2.
var errProtocol = errors.New("resp test: malformed reply")

// readRESP reads one reply strictly: every line must end in CRLF and hold
// no other CR or LF, integers must be integers, bulk strings must be as
// long as announced.
func readRESP(r *bufio.Reader) (respValue, error) {
	line, err := readRESPLine(r)
	if err != nil {
		return respValue{}, err
	}
	if len(line) == 0 {
		return respValue{}, fmt.Errorf("%w: empty line", errProtocol)
	}
	v := respValue{kind: line[0], str: line[1:]}
	switch v.kind {
	case '+', '-', '(':
		return v, nil
	case '_':
		if v.str != "" {
			return respValue{}, fmt.Errorf("%w: null %q", errProtocol, v.str)
		}
		return v, nil
	case '#':
		if v.str != "t" && v.str != "f" {
			return respValue{}, fmt.Errorf("%w: boolean %q", errProtocol, v.str)
		}
		return v, nil
	case ',':
		if _, err := strconv.ParseFloat(v.str, 64); err != nil && v.str != "inf" && v.str != "-inf" && v.str != "nan" {
			return respValue{}, fmt.Errorf("%w: double %q", errProtocol, v.str)
		}
		return v, nil
	case ':':
		if _, err := strconv.ParseInt(v.str, 10, 64); err != nil {
			return respValue{}, fmt.Errorf("%w: integer %q", errProtocol, v.str)
		}
		return v, nil
	case '$', '*', '%', '~', '>', '=', '!':
		n, err := strconv.ParseInt(v.str, 10, 64)
		if err != nil || n < -1 || n > 1<<30 || n == -1 && v.kind != '$' && v.kind != '*' {
			return respValue{}, fmt.Errorf("%w: length %q", errProtocol, v.str)
		}
		v.str = ""
		if n == -1 {
			v.null = true
			return v, nil
		}
		if v.kind == '=' && n < 4 {
			return respValue{}, fmt.Errorf("%w: verbatim string without a format", errProtocol)
		}
		if v.kind == '$' || v.kind == '=' || v.kind == '!' {
			buf := make([]byte, n+2)
			if _, err := io.ReadFull(r, buf); err != nil {
				return respValue{}, err
			}
			if buf[n] != '\r' || buf[n+1] != '\n' {
				return respValue{}, fmt.Errorf("%w: bulk not CRLF terminated", errProtocol)
			}
			v.str = string(buf[:n])
			return v, nil
		}
		if v.kind == '%' {
			n *= 2
		}
		v.elems = make([]respValue, 0, min(n, 1024))
		for i := int64(0); i < n; i++ {
			e, err := readRESP(r)
			if err != nil {
				return respValue{}, err
			}
			v.elems = append(v.elems, e)
		}
		return v, nil
	}
	return respValue{}, fmt.Errorf("%w: type byte %q", errProtocol, v.kind)
}

func readRESPLine(r *bufio.Reader) (string, error) {
	line, err := r.ReadString('\n')
	if err != nil {
		if err == io.EOF && line != "" {
			err = io.ErrUnexpectedEOF
		}
		return "", err
	}
	if len(line) < 2 || line[len(line)-2] != '\r' {
		return "", fmt.Errorf("%w: line %q not CRLF terminated", errProtocol, line)
	}
	line = line[:len(line)-2]
	if bytes.ContainsAny([]byte(line), "\r\n") {
		return "", fmt.Errorf("%w: CR or LF inside line %q", errProtocol, line)
	}
	return line, nil
}

// appendCommand appends args as a RESP2 array of bulk strings.
func appendCommand(b []byte, args ...string) []byte {
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

// rawConn is one client connection speaking raw RESP2.
type rawConn struct {
	nc net.Conn
	r  *bufio.Reader
}

func dialRaw(t testing.TB, addr string) *rawConn {
	t.Helper()
	nc, err := net.DialTimeout("tcp", addr, respTimeout)
	if err != nil {
		t.Fatalf("dial %s: %v", addr, err)
	}
	t.Cleanup(func() { nc.Close() })
	return &rawConn{nc: nc, r: bufio.NewReader(nc)}
}

// send writes one command.
func (c *rawConn) send(args ...string) error {
	c.nc.SetWriteDeadline(time.Now().Add(respTimeout))
	_, err := c.nc.Write(appendCommand(nil, args...))
	return err
}

// read reads one reply.
func (c *rawConn) read() (respValue, error) {
	c.nc.SetReadDeadline(time.Now().Add(respTimeout))
	return readRESP(c.r)
}

// do sends one command and reads its reply.
func (c *rawConn) do(args ...string) (respValue, error) {
	if err := c.send(args...); err != nil {
		return respValue{}, err
	}
	return c.read()
}

// mustDo is do for commands that must get a reply.
func (c *rawConn) mustDo(t testing.TB, args ...string) respValue {
	t.Helper()
	v, err := c.do(args...)
	if err != nil {
		t.Fatalf("%q: %v", args, err)
	}
	return v
}

// closed reports whether the server has closed the connection (EOF
// before any further byte, within respTimeout).
func (c *rawConn) closed() (bool, error) {
	c.nc.SetReadDeadline(time.Now().Add(respTimeout))
	b, err := c.r.ReadByte()
	if err == io.EOF {
		return true, nil
	}
	if err != nil {
		return false, err
	}
	return false, fmt.Errorf("unexpected byte %q after the reply", b)
}
