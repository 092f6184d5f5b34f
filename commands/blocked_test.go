package commands_test

import (
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/cellserver/cellserver/internal/resptest"
	"github.com/cellserver/cellserver/internal/servertest"
	"github.com/cellserver/cellserver/internal/testwait"
	"github.com/cellserver/cellserver/server"
)

// TestInfoBlockedClients: INFO clients' blocked_clients counts the
// clients blocked in CL.ACQUIRE ... WAIT and in WAIT, as Redis counts
// its blocked clients (WAIT included), and uncounts each exactly once:
// when it is served (before its reply reaches it), when its timeout
// passes, and when it disconnects while blocked. On event loops and with
// a goroutine per connection.
func TestInfoBlockedClients(t *testing.T) {
	for _, loops := range []int{0, -1} {
		t.Run("event-loops="+strconv.Itoa(loops), func(t *testing.T) {
			clock := servertest.NewClock(goldenT0)
			_, addr := servertest.Start(t, server.Config{Clock: clock.Now, EventLoops: loops})
			ctl := resptest.MustDial(t, addr)
			blocked := func() int64 { return infoInt(t, ctl, "clients", "blocked_clients") }
			blockedIs := func(want int64) {
				t.Helper()
				testwait.For(t, 20*time.Second, fmt.Sprintf("blocked_clients %d", want), func() (bool, string) {
					got := blocked()
					return got == want, fmt.Sprintf("blocked_clients is %d", got)
				})
			}
			if v := ctl.MustDo(t, "CL.ACQUIRE", "k", "1", "30s", "holder").Ints(); len(v) != 5 || v[0] != 0 {
				t.Fatalf("holder's CL.ACQUIRE: %v", v)
			}
			blockedIs(0)

			const n = 40 // half CL.ACQUIRE ... WAIT, half WAIT
			conns := make([]*resptest.Conn, n)
			for i := range conns {
				conns[i] = resptest.MustDial(t, addr)
				var err error
				if i%2 == 0 {
					// The first two time out at 5s on the server's clock.
					timeout := "60s"
					if i < 4 {
						timeout = "5s"
					}
					err = conns[i].Send("CL.ACQUIRE", "k", "1", "30s", "w"+strconv.Itoa(i), "WAIT", timeout)
				} else {
					err = conns[i].Send("WAIT", "1", "0") // no replica: blocks until it leaves
				}
				if err != nil {
					t.Fatal(err)
				}
			}
			blockedIs(n)
			if got := infoInt(t, ctl, "clients", "lease_waiters"); got != n/2 {
				t.Fatalf("lease_waiters %d, want %d", got, n/2)
			}

			// Timed out: the two 5s waiters answer limited, uncounted
			// before their replies are sent.
			clock.Advance(5 * time.Second)
			for _, i := range []int{0, 2} {
				if v, err := conns[i].Read(); err != nil || len(v.Ints()) != 5 || v.Ints()[0] != 1 {
					t.Fatalf("timed-out waiter %d: %v %v", i, v, err)
				}
			}
			if got := blocked(); got != n-2 {
				t.Fatalf("after 2 timeouts: blocked_clients %d, want %d", got, n-2)
			}

			// Served: the holder releases, the queue's head gets the lease.
			ctl.MustDo(t, "CL.RELEASE", "k", "holder")
			if v, err := conns[4].Read(); err != nil || len(v.Ints()) != 5 || v.Ints()[0] != 0 {
				t.Fatalf("served waiter: %v %v", v, err)
			}
			if got := blocked(); got != n-3 {
				t.Fatalf("after one was served: blocked_clients %d, want %d", got, n-3)
			}

			// Disconnected while blocked: all but two WAITs leave, then
			// those two.
			for i := 5; i < n; i++ {
				conns[i].Close()
			}
			blockedIs(2)
			if got := infoInt(t, ctl, "clients", "lease_waiters"); got != 0 {
				t.Fatalf("lease_waiters %d after the waiters left, want 0", got)
			}
			conns[1].Close()
			conns[3].Close()
			blockedIs(0)
		})
	}
}
