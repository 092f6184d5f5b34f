package hostile

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cellserver/cellserver/internal/resptest"
)

// garbageSeed seeds case 3; every connection's input is a function of it
// and the connection's index, so a failure is replayable.
const garbageSeed = 20260101

// harmless is the vocabulary of well-formed commands mixed into garbage:
// none touches the keep key or flushes anything.
var harmless = [][]string{
	{"PING"}, {"ECHO", "hello"}, {"GET", "g:k"}, {"SET", "g:k", "v"}, {"CL.THROTTLE", "g:t", "1", "1", "1"},
	{"CL.FIXED", "g:f", "5", "1s"}, {"CL.SLIDINGLOG", "g:l", "5", "1s"}, {"CL.ACQUIRE", "g:a", "2", "1s", "tok"},
	{"CL.INFO", "g:f"}, {"EXISTS", "g:k"}, {"TYPE", "g:k"}, {"TTL", "g:k"}, {"SCAN", "0"}, {"INFO", "stats"},
	{"COMMAND", "COUNT"}, {"MULTI"}, {"EXEC"}, {"DISCARD"}, {"CLIENT", "ID"}, {"SELECT", "1"}, {"HELLO", "2"},
	{"CL.ALL", "cl.fixed", "g:f2", "5", "1s", "1"}, {"CL.PEEK", "g:t", "1", "1", "1"},
}

// garbage returns connection i's hostile input: one of several kinds of
// malformed RESP, chosen and filled from the seeded generator.
func garbage(i int) (kind string, b []byte) {
	r := rand.New(rand.NewPCG(garbageSeed, uint64(i)))
	randBytes := func(n int) []byte {
		b := make([]byte, n)
		for j := range b {
			b[j] = byte(r.UintN(256))
		}
		return b
	}
	valid := func() []byte { return resptest.AppendCommand(nil, harmless[r.IntN(len(harmless))]...) }
	switch i % 9 {
	case 0:
		return "random bytes", randBytes(1 + r.IntN(64<<10))
	case 1:
		return "'*' then random bytes", append([]byte{'*'}, randBytes(r.IntN(4096))...)
	case 2: // valid commands with bytes flipped, inserted, deleted and the stream cut
		var s []byte
		for k := r.IntN(50); k >= 0; k-- {
			s = append(s, valid()...)
		}
		for k := 1 + r.IntN(8); k > 0; k-- {
			p := r.IntN(len(s))
			switch r.IntN(3) {
			case 0:
				s[p] = byte(r.UintN(256))
			case 1:
				s = append(s[:p], append([]byte{"\r\n*$:+-0123456789"[r.IntN(17)]}, s[p:]...)...)
			case 2:
				s = append(s[:p], s[p+1:]...)
			}
		}
		return "mutated commands", s[:r.IntN(len(s)+1)]
	case 3: // nested arrays: RESP2 requests are flat, so "*1\r\n*1\r\n..."
		depth := 1 + r.IntN(100000)
		return "nested arrays", bytes.Repeat([]byte("*1\r\n"), depth)
	case 4: // absurd counts
		counts := []string{"*-1\r\n", "*-9223372036854775808\r\n", "*+1\r\n", "*01\r\n", "* 1\r\n", "*1 \r\n", "*\r\n",
			"*1\n", "*1\r\r\n", "*1\r\n$-1\r\n", "*1\r\n$+1\r\nx\r\n", "*1\r\n$01\r\nx\r\n", "*1\r\n$1\r\nxx\r\n",
			"*1\r\n$1\r\nx\n\n", "*1\r\n:1\r\n", "*1\r\n+PING\r\n", "*2\r\n$4\r\nPING\r\n*1\r\n", "$4\r\nPING\r\n",
			"*3000000000\r\n", "*1\r\n$" + strings.Repeat("9", 70000) + "\r\n", "*" + strings.Repeat("1", 70000) + "\r\n"}
		var s []byte
		for k := 1 + r.IntN(4); k > 0; k-- {
			if r.IntN(2) == 0 {
				s = append(s, valid()...)
			}
			s = append(s, counts[r.IntN(len(counts))]...)
		}
		return "absurd counts", s
	case 5: // inline lines: quotes, escapes, NULs, overlong
		lines := []string{"PING\r\n", "\"unterminated\r\n", "'single\r\n", "\"a\"b\r\n", "ECHO \"\\x4\"\r\n", "ECHO \"\\xzz\\\"\"\r\n",
			"ECHO 'it\\'s'\r\n", "\x00\x00\x00\n", "   \t  \r\n", "\r\n\r\n\r\n", "ECHO \"" + strings.Repeat("a", 70000) + "\"\r\n",
			strings.Repeat("x", 70000) + "\n", "GET \xff\xfe\r\n", "SET g:k \"\\n\\r\\t\\b\\a\"\r\n"}
		var s []byte
		for k := 1 + r.IntN(6); k > 0; k-- {
			s = append(s, lines[r.IntN(len(lines))]...)
		}
		return "inline lines", s
	case 6:
		return "CR/LF/NUL soup", bytes.Map(func(rune) rune { return rune("\r\n\x00*$"[r.IntN(5)]) }, make([]byte, 1+r.IntN(20000)))
	case 7: // a valid command cut at every kind of place, then random bytes
		c := valid()
		return "truncated command + noise", append(c[:r.IntN(len(c))], randBytes(r.IntN(512))...)
	default: // a bulk header promising more than is sent
		return "short bulk", fmt.Appendf(nil, "*2\r\n$4\r\nECHO\r\n$%d\r\n%s", 1+r.IntN(1<<20), randBytes(r.IntN(1000)))
	}
}

// checkStream requires b to be a sequence of complete RESP2 values. If the
// connection ended with a reset, a cut final value is tolerated.
func checkStream(b []byte, reset bool) (values int, protoErr bool, err error) {
	r := bufio.NewReaderSize(bytes.NewReader(b), 1<<20)
	for {
		if _, err := r.Peek(1); err != nil {
			return values, protoErr, nil
		}
		v, err := resptest.Read(r)
		if err != nil {
			if reset && errors.Is(err, io.ErrUnexpectedEOF) {
				return values, protoErr, nil
			}
			return values, protoErr, fmt.Errorf("reply %d: %v", values, err)
		}
		values++
		if v.Kind == '-' && strings.HasPrefix(v.Str, "ERR Protocol error: ") {
			protoErr = true
		}
	}
}

// Case 3: deeply malformed RESP and random bytes. 360 connections (16 at
// a time), each sending one seeded kind of garbage (random bytes up to
// 64 KiB, mutated and truncated commands, 100,000-deep nested arrays,
// absurd counts, broken inline quoting, overlong lines, CR/LF/NUL soup,
// short bulks), then half-closing. The server must answer with well-formed
// RESP only (every reply parses) and close each connection, never crash.
//
// RSS bound: base + 64 MiB (runtime and GC headroom; each connection
// holds at most a 1 MiB read buffer, 16 at a time).
func caseGarbage(t *testing.T) {
	a := begin(t, "3. malformed RESP and random bytes", false)
	const conns = 360
	var values, protoErrs, resets atomic.Int64
	kinds := map[string]bool{}
	for i := 0; i < 9; i++ {
		k, _ := garbage(i)
		kinds[k] = true
	}
	errs, n := runParallel(conns, 16, func(i int) error {
		kind, data := garbage(i)
		rc, err := resptest.Dial(a.addr)
		if err != nil {
			return err
		}
		defer rc.Close()
		rc.C.SetWriteDeadline(time.Now().Add(ioTimeout))
		_, werr := rc.C.Write(data)
		if werr != nil && !isReset(werr) {
			return fmt.Errorf("%s: write: %v", kind, werr)
		}
		if werr == nil {
			rc.C.(*net.TCPConn).CloseWrite()
		}
		got, rerr := readAll(rc.C, 20*time.Second)
		reset := false
		switch {
		case rerr == nil:
		case isReset(rerr):
			reset = true
			resets.Add(1)
		default:
			return fmt.Errorf("%s (%d bytes): not closed: %v", kind, len(data), rerr)
		}
		nv, pe, err := checkStream(got, reset)
		values.Add(int64(nv))
		if pe {
			protoErrs.Add(1)
		}
		if err != nil {
			return fmt.Errorf("%s: malformed reply stream %q: %v", kind, clip(got), err)
		}
		return nil
	})
	reportErrs(t, "garbage connections", errs, n)
	a.p.requireAlive(t)
	st, err := info(a.addr, "stats")
	if err != nil {
		t.Fatal(err)
	}
	bound := a.base + 64*mib
	a.end(bound, "base + 64 MiB", false, fmt.Sprintf("%d garbage connections of %d kinds (seed %d): %d protocol-error closes (server counts %s), %d resets, %d well-formed replies",
		conns, len(kinds), garbageSeed, protoErrs.Load(), st["protocol_errors"], resets.Load(), values.Load()))
}
