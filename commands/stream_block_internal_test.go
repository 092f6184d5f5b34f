package commands

import "testing"

// TestXreadBlockForgottenAndBounded: a client that leaves while blocked in
// XREAD is dropped from every key it waited on, and past maxKeyWaiters a
// blocking read is refused rather than queued.
func TestXreadBlockForgottenAndBounded(t *testing.T) {
	h := newWatchHarness(t, Config{})
	const n = 20
	for i := range n {
		c := h.open()
		if out := h.do(c, "XREAD", "BLOCK", "0", "STREAMS", "a", "b", "a", "$", "$", "0"); out != "" {
			t.Fatalf("XREAD BLOCK answered %q, want it to block", out)
		}
		if got := h.s.kwait.n.Load(); got != 1 {
			t.Fatalf("client %d blocked: %d waiters, want 1", i, got)
		}
		h.s.Close(c)
		h.s.kwait.mu.Lock()
		keys, all := len(h.s.kwait.m), len(h.s.kwait.all)
		h.s.kwait.mu.Unlock()
		if got := h.s.kwait.n.Load(); got != 0 || keys != 0 || all != 0 {
			t.Fatalf("client %d left: %d waiters on %d keys (%d listed), want none", i, got, keys, all)
		}
	}
	h.s.kwait.n.Add(maxKeyWaiters) // as if that many clients were blocked
	c := h.open()
	if out := h.do(c, "XREAD", "BLOCK", "0", "STREAMS", "a", "$"); out != "-"+msgTooManyBlocked+"\r\n" {
		t.Fatalf("XREAD BLOCK past the limit answered %q", out)
	}
	h.s.kwait.n.Add(-maxKeyWaiters)
}
