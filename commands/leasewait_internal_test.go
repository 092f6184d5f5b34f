package commands

import (
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cellserver/cellserver/resp"
)

// checkLeaseQueues checks the queues' invariants: no queue is kept empty
// or holds more than max waiters, and the counter agrees with them.
func checkLeaseQueues(t *testing.T, s *Service, max int) int {
	t.Helper()
	w := &s.leases
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for qk, q := range w.q {
		if len(q) == 0 || len(q) > max {
			t.Fatalf("queue %q holds %d waiters (QUEUE %d)", qk.key, len(q), max)
		}
		n += len(q)
	}
	if c := w.n.Load(); c != int64(n) {
		t.Fatalf("waiter counter %d, queues hold %d", c, n)
	}
	return n
}

// TestLeaseQueueProperty: random sequences of CL.ACQUIRE ... WAIT (QUEUE
// 3, limit 2, two keys), CL.RELEASE, clock moves, hang-ups and queue
// services never leave a queue longer than 3, an empty queue kept, the
// counter wrong, or more than 2 leases on a key; closing every
// connection at the end leaves nothing.
func TestLeaseQueueProperty(t *testing.T) {
	const (
		cases, steps = 200, 60
		limit, queue = 2, 3
	)
	rng := rand.New(rand.NewPCG(19, 2026))
	for cs := range cases {
		var mu sync.Mutex
		now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
		h := newWatchHarness(t, Config{Clock: func() time.Time { mu.Lock(); defer mu.Unlock(); return now }})
		var conns []*resp.Conn
		var toks []string
		for step := range steps {
			key := "k" + strconv.Itoa(rng.IntN(2))
			switch op := rng.IntN(6); {
			case op <= 1: // a new client acquires, waiting up to 1-3 s
				c := h.open()
				tok := "t" + strconv.Itoa(step)
				h.do(c, "CL.ACQUIRE", key, strconv.Itoa(limit), "10s", tok, "WAIT", strconv.Itoa(1+rng.IntN(3)), "QUEUE", strconv.Itoa(queue))
				conns, toks = append(conns, c), append(toks, tok)
			case op == 2 && len(toks) > 0: // some client releases
				i := rng.IntN(len(toks))
				h.do(h.open(), "CL.RELEASE", key, toks[i])
			case op == 3: // the clock moves
				mu.Lock()
				now = now.Add(time.Duration(rng.IntN(4000)) * time.Millisecond)
				mu.Unlock()
			case op == 4 && len(conns) > 0: // a client hangs up
				i := rng.IntN(len(conns))
				h.s.Close(conns[i])
			default:
				h.s.serveLeaseQueues()
			}
			checkLeaseQueues(t, h.s, queue)
			for _, k := range []string{"k0", "k1"} {
				info := h.do(h.open(), "CL.INFO", k)
				if i := strings.Index(info, "leases\r\n:"); i >= 0 {
					if n, _ := strconv.Atoi(info[i+9 : i+9+strings.Index(info[i+9:], "\r")]); n > limit {
						t.Fatalf("case %d step %d: %s holds %d leases", cs, step, k, n)
					}
				}
			}
		}
		for _, c := range conns {
			h.s.Close(c)
		}
		if n := checkLeaseQueues(t, h.s, queue); n != 0 {
			t.Fatalf("case %d: %d waiters left after every client closed", cs, n)
		}
	}
	t.Logf("%d cases of %d steps checked", cases, steps)
}
