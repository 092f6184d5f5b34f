package commands

import "testing"

// TestWaitForgottenWhenClientLeaves: a client that leaves while blocked
// in WAIT without a timeout is uncounted from blocked_clients and its wait
// is dropped from the replication's waiters, which otherwise keep it (and
// the client through its reply function) until replicas acknowledge: with
// none, forever, one more per client that does so.
func TestWaitForgottenWhenClientLeaves(t *testing.T) {
	h := newWatchHarness(t, Config{})
	const n = 20
	for i := range n {
		c := h.open()
		if out := h.do(c, "WAIT", "1", "0"); out != "" {
			t.Fatalf("WAIT 1 0 without replicas answered %q, want it to block", out)
		}
		if got, want := h.s.blocked.Load(), int64(1); got != want {
			t.Fatalf("client %d blocked: blocked_clients %d, want %d", i, got, want)
		}
		h.s.Close(c)
		if got := h.s.blocked.Load(); got != 0 {
			t.Fatalf("client %d left: blocked_clients %d, want 0", i, got)
		}
	}
	if got := h.s.repl.Waiting(); got != 0 {
		t.Errorf("%d WAITs kept after their %d clients left, want 0", got, n)
	}
}
