package clustertool

import (
	"bufio"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"time"
)

// Dialer connects to nodes: TCP (TLS when TLS is set), then AUTH when
// Pass is set (AUTH user pass when User is set too), as redis-cli does
// with --user, --pass and --tls.
type Dialer struct {
	User, Pass string
	// TLS, when set, is the client TLS configuration; its ServerName is
	// set per node from the address dialled unless already set.
	TLS *tls.Config
	// Timeout bounds the dial and each command's round trip. Zero: 5s.
	Timeout time.Duration
}

// Conn is one node's connection. It is not safe for concurrent use.
type Conn struct {
	Addr    string
	nc      net.Conn
	r       *bufio.Reader
	timeout time.Duration
}

// ReplyError is an error reply of a node ("-ERR ...", "-MOVED ...").
type ReplyError struct{ Msg string }

func (e *ReplyError) Error() string { return e.Msg }

// errProtocol wraps a reply the client cannot parse.
var errProtocol = errors.New("clustertool: protocol error")

// Dial connects to addr and authenticates.
func (d *Dialer) Dial(addr string) (*Conn, error) {
	timeout := d.Timeout
	if timeout <= 0 {
		timeout = 5 * time.Second
	}
	nc, err := net.DialTimeout("tcp", addr, timeout)
	if err != nil {
		return nil, err
	}
	if d.TLS != nil {
		tc := d.TLS.Clone()
		if tc.ServerName == "" {
			host, _, _ := net.SplitHostPort(addr)
			tc.ServerName = host
		}
		tlsConn := tls.Client(nc, tc)
		_ = tlsConn.SetDeadline(time.Now().Add(timeout))
		if err := tlsConn.Handshake(); err != nil {
			nc.Close()
			return nil, fmt.Errorf("TLS handshake: %w", err)
		}
		nc = tlsConn
	}
	c := &Conn{Addr: addr, nc: nc, r: bufio.NewReader(nc), timeout: timeout}
	if d.Pass != "" {
		args := []string{"AUTH", d.Pass}
		if d.User != "" {
			args = []string{"AUTH", d.User, d.Pass}
		}
		if _, err := c.Do(args...); err != nil {
			c.Close()
			return nil, fmt.Errorf("AUTH: %w", err)
		}
	}
	return c, nil
}

// Close closes the connection.
func (c *Conn) Close() error { return c.nc.Close() }

// Do sends one command and reads its reply: a string (simple or bulk),
// an int64, a []any, nil (a nil bulk or array), or an error: a
// *ReplyError for an error reply, else an I/O or protocol error.
func (c *Conn) Do(args ...string) (any, error) {
	_ = c.nc.SetDeadline(time.Now().Add(c.timeout))
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	if _, err := io.WriteString(c.nc, b.String()); err != nil {
		return nil, err
	}
	v, err := c.read()
	if err != nil {
		return nil, err
	}
	if re, ok := v.(*ReplyError); ok {
		return nil, re
	}
	return v, nil
}

// String is Do for a command answering a string.
func (c *Conn) String(args ...string) (string, error) {
	v, err := c.Do(args...)
	if err != nil {
		return "", err
	}
	s, ok := v.(string)
	if !ok {
		return "", fmt.Errorf("%s: unexpected reply %v", args[0], v)
	}
	return s, nil
}

// read reads one RESP2 reply; an error reply is returned as a value (so
// that one inside an array does not stop the read).
func (c *Conn) read() (any, error) {
	line, err := c.r.ReadString('\n')
	if err != nil {
		return nil, err
	}
	line = strings.TrimSuffix(line, "\r\n")
	if line == "" {
		return nil, errProtocol
	}
	switch line[0] {
	case '+':
		return line[1:], nil
	case '-':
		return &ReplyError{Msg: line[1:]}, nil
	case ':':
		n, err := strconv.ParseInt(line[1:], 10, 64)
		if err != nil {
			return nil, fmt.Errorf("%w: %q", errProtocol, line)
		}
		return n, nil
	case '$':
		n, err := strconv.Atoi(line[1:])
		if err != nil || n < -1 || n > 512<<20 {
			return nil, fmt.Errorf("%w: %q", errProtocol, line)
		}
		if n < 0 {
			return nil, nil
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(c.r, buf); err != nil {
			return nil, err
		}
		return string(buf[:n]), nil
	case '*':
		n, err := strconv.Atoi(line[1:])
		if err != nil || n < -1 || n > 1<<24 {
			return nil, fmt.Errorf("%w: %q", errProtocol, line)
		}
		if n < 0 {
			return nil, nil
		}
		out := make([]any, n)
		for i := range out {
			if out[i], err = c.read(); err != nil {
				return nil, err
			}
		}
		return out, nil
	}
	return nil, fmt.Errorf("%w: %q", errProtocol, line)
}
