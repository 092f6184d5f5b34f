package server_test

import (
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cellserver/cellserver/internal/servertest"
	"github.com/cellserver/cellserver/server"
)

// With a password set, a client that has not authenticated may send
// commands of at most 10 elements and bulks of at most 16384 bytes, from
// its first byte: beyond, Redis's exact protocol error, then the close.
// AUTH and HELLO AUTH lift the limits (for the commands pipelined after
// them too), RESET restores them; without a password there are none.
func TestUnauthenticatedRequestLimits(t *testing.T) {
	const pass = "s3cret"
	for _, loops := range []int{0, -1} {
		_, addr := servertest.Start(t, server.Config{Password: pass, EventLoops: loops})
		_, open := servertest.Start(t, server.Config{EventLoops: loops})
		val := strings.Repeat("v", 20000)
		big := fmt.Sprintf("*2\r\n$4\r\nECHO\r\n$%d\r\n%s\r\n", len(val), val)
		bigReply := fmt.Sprintf("$%d\r\n%s\r\n", len(val), val)
		// ECHO with 10 arguments: an arity error, which is a reply.
		eleven := "*11\r\n$4\r\nECHO\r\n" + strings.Repeat("$1\r\nx\r\n", 10)
		arity := "-ERR wrong number of arguments for 'echo' command\r\n"
		auth := fmt.Sprintf("*2\r\n$4\r\nAUTH\r\n$%d\r\n%s\r\n", len(pass), pass)
		hello := fmt.Sprintf("*5\r\n$5\r\nHELLO\r\n$1\r\n2\r\n$4\r\nAUTH\r\n$7\r\ndefault\r\n$%d\r\n%s\r\n", len(pass), pass)
		const (
			errMulti = "-ERR Protocol error: unauthenticated multibulk length\r\n"
			errBulk  = "-ERR Protocol error: unauthenticated bulk length\r\n"
		)
		for _, tc := range []struct {
			name, addr, in, want string
			closes               bool
		}{
			{"11 elements", addr, "*11\r\n", errMulti, true},
			{"declared 16 MiB bulk", addr, "*1\r\n$16777216\r\n", errBulk, true},
			{"16385-byte bulk", addr, big, errBulk, true},
			{"16384-byte bulk", addr, fmt.Sprintf("*2\r\n$4\r\nECHO\r\n$16384\r\n%s\r\n", strings.Repeat("v", 16384)), "-NOAUTH Authentication required.\r\n", false},
			{"AUTH first", addr, auth + eleven + big, "+OK\r\n" + arity + bigReply, false},
			{"HELLO AUTH first", addr, hello + eleven, "", false},
			{"RESET", addr, auth + "*1\r\n$5\r\nRESET\r\n" + eleven, "+OK\r\n+RESET\r\n" + errMulti, true},
			{"no password", open, eleven + big, arity + bigReply, false},
		} {
			c, err := net.Dial("tcp", tc.addr)
			if err != nil {
				t.Fatal(err)
			}
			c.SetDeadline(time.Now().Add(10 * time.Second))
			if _, err := io.WriteString(c, tc.in); err != nil {
				t.Fatal(err)
			}
			if tc.closes {
				got, err := io.ReadAll(c)
				if err != nil && !errors.Is(err, syscall.ECONNRESET) {
					t.Errorf("loops %d, %s: %v", loops, tc.name, err)
				}
				if string(got) != tc.want {
					t.Errorf("loops %d, %s: got %.200q, want %q then the close", loops, tc.name, got, tc.want)
				}
			} else if tc.want != "" {
				got := make([]byte, len(tc.want))
				if _, err := io.ReadFull(c, got); err != nil || string(got) != tc.want {
					t.Errorf("loops %d, %s: got %.200q, %v; want %.200q", loops, tc.name, got, err, tc.want)
				}
			} else {
				// HELLO's map reply, then the arity error of ECHO.
				buf := make([]byte, 4096)
				var got []byte
				for !strings.HasSuffix(string(got), arity) {
					n, err := c.Read(buf)
					if err != nil {
						t.Fatalf("loops %d, %s: %v after %q", loops, tc.name, err, got)
					}
					got = append(got, buf[:n]...)
				}
				if !strings.HasPrefix(string(got), "*") {
					t.Errorf("loops %d, %s: got %q", loops, tc.name, got)
				}
			}
			c.Close()
		}
	}
}
