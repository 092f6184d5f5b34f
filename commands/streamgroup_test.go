package commands_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/cellserver/cellserver/internal/resptest"
	"github.com/cellserver/cellserver/internal/servertest"
	"github.com/cellserver/cellserver/internal/testwait"
	"github.com/cellserver/cellserver/server"
)

// TestXReadGroupBlock: XREADGROUP BLOCK parks the client until an entry
// arrives for its group (each entry goes to one of the group's blocked
// consumers, in the order they blocked; the others re-evaluate and keep
// waiting), and answers as Redis 7.0.15 does when the group is destroyed
// (-NOGROUP), the key deleted or overwritten (-UNBLOCKED), or the timeout
// passes on the server's clock (a null array). Inside MULTI it does not
// block.
func TestXReadGroupBlock(t *testing.T) {
	clock := servertest.NewClock(goldenT0)
	_, addr := servertest.Start(t, server.Config{Clock: clock.Now})
	ctl := resptest.MustDial(t, addr)
	blockedIs := func(want int64) {
		t.Helper()
		testwait.For(t, 20*time.Second, fmt.Sprintf("blocked_clients %d", want), func() (bool, string) {
			got := infoInt(t, ctl, "clients", "blocked_clients")
			return got == want, fmt.Sprintf("blocked_clients is %d", got)
		})
	}
	read := func(c *resptest.Conn, want string) {
		t.Helper()
		v, err := c.Read()
		if err != nil || v.String() != want {
			t.Fatalf("got %v %v, want %s", v, err, want)
		}
	}
	block := func(consumer string, extra ...string) *resptest.Conn {
		t.Helper()
		c := resptest.MustDial(t, addr)
		args := append([]string{"XREADGROUP", "GROUP", "g", consumer}, extra...)
		if err := c.Send(append(args, "STREAMS", "s", ">")...); err != nil {
			t.Fatal(err)
		}
		return c
	}
	ctl.MustDo(t, "XGROUP", "CREATE", "s", "g", "$", "MKSTREAM")

	// Two consumers wait; each entry goes to the first still waiting.
	alice := block("alice", "BLOCK", "0")
	blockedIs(1)
	bob := block("bob", "COUNT", "5", "BLOCK", "0")
	blockedIs(2)
	ctl.MustDo(t, "XADD", "s", "1-0", "f", "v1")
	read(alice, `"*1\r\n*2\r\n$1\r\ns\r\n*1\r\n*2\r\n$3\r\n1-0\r\n*2\r\n$1\r\nf\r\n$2\r\nv1\r\n"`)
	blockedIs(1)
	ctl.MustDo(t, "XADD", "s", "2-0", "f", "v2")
	read(bob, `"*1\r\n*2\r\n$1\r\ns\r\n*1\r\n*2\r\n$3\r\n2-0\r\n*2\r\n$1\r\nf\r\n$2\r\nv2\r\n"`)
	blockedIs(0)
	if v := ctl.MustDo(t, "XPENDING", "s", "g"); v.String() !=
		`"*4\r\n:2\r\n$3\r\n1-0\r\n$3\r\n2-0\r\n*2\r\n*2\r\n$5\r\nalice\r\n$1\r\n1\r\n*2\r\n$3\r\nbob\r\n$1\r\n1\r\n"` {
		t.Fatalf("XPENDING: %v", v)
	}

	// NOACK: delivered, not pending.
	carol := block("carol", "NOACK", "BLOCK", "0")
	blockedIs(1)
	ctl.MustDo(t, "XADD", "s", "3-0", "f", "v3")
	read(carol, `"*1\r\n*2\r\n$1\r\ns\r\n*1\r\n*2\r\n$3\r\n3-0\r\n*2\r\n$1\r\nf\r\n$2\r\nv3\r\n"`)
	if v := ctl.MustDo(t, "XPENDING", "s", "g", "-", "+", "10", "carol"); v.String() != `"*0\r\n"` {
		t.Fatalf("carol's PEL: %v", v)
	}

	// The group destroyed, the key deleted, the key overwritten.
	c := block("alice", "BLOCK", "0")
	blockedIs(1)
	ctl.MustDo(t, "XGROUP", "DESTROY", "s", "g")
	read(c, `"-NOGROUP the consumer group this client was blocked on no longer exists\r\n"`)
	ctl.MustDo(t, "XGROUP", "CREATE", "s", "g", "$")
	c = block("alice", "BLOCK", "0")
	blockedIs(1)
	ctl.MustDo(t, "DEL", "s")
	read(c, `"-UNBLOCKED the stream key no longer exists\r\n"`)
	ctl.MustDo(t, "XGROUP", "CREATE", "s", "g", "$", "MKSTREAM")
	c = block("alice", "BLOCK", "0")
	blockedIs(1)
	ctl.MustDo(t, "SET", "s", "x")
	read(c, `"-UNBLOCKED the stream key no longer exists\r\n"`)
	blockedIs(0)

	// A change that serves nothing (another group's read) keeps it
	// waiting; the timeout answers a null array.
	ctl.MustDo(t, "DEL", "s")
	ctl.MustDo(t, "XGROUP", "CREATE", "s", "g", "$", "MKSTREAM")
	ctl.MustDo(t, "XGROUP", "CREATE", "s", "other", "$")
	c = block("alice", "BLOCK", "5000")
	blockedIs(1)
	ctl.MustDo(t, "XGROUP", "CREATECONSUMER", "s", "other", "x")
	clock.Advance(4 * time.Second)
	blockedIs(1)
	clock.Advance(time.Second)
	read(c, `"*-1\r\n"`)
	blockedIs(0)

	// Inside MULTI: answered at once.
	ctl.MustDo(t, "MULTI")
	ctl.MustDo(t, "XREADGROUP", "GROUP", "g", "alice", "BLOCK", "0", "STREAMS", "s", ">")
	if v := ctl.MustDo(t, "EXEC"); v.String() != `"*1\r\n*-1\r\n"` {
		t.Fatalf("EXEC: %v", v)
	}
}
