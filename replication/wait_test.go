package replication

import (
	"testing"
	"time"

	"github.com/cellserver/cellserver/keyspace"
)

// TestWaitCancel: cancel forgets a wait without calling done, once; a
// wait answered at once gets a cancel that does nothing.
func TestWaitCancel(t *testing.T) {
	ks, err := keyspace.New(keyspace.Config{})
	if err != nil {
		t.Fatal(err)
	}
	r, err := New(Config{Keyspace: ks})
	if err != nil {
		t.Fatal(err)
	}
	called := make(chan int, 4)
	cancels := []func(){
		r.Wait(1, 1, 0, func(c int) { called <- c }),         // no replica: waits forever
		r.Wait(1, 1, time.Hour, func(c int) { called <- c }), // with a timer
		r.Wait(1, 1, 0, func(c int) { called <- c }),         // cancelled twice
	}
	if got := r.Waiting(); got != 3 {
		t.Fatalf("Waiting %d, want 3", got)
	}
	for _, cancel := range cancels {
		cancel()
	}
	cancels[2]()
	if got := r.Waiting(); got != 0 {
		t.Fatalf("Waiting %d after cancel, want 0", got)
	}
	r.Wait(0, 0, 0, func(c int) { called <- c })() // answered at once, then cancelled
	if c := <-called; c != 0 {
		t.Fatalf("done(%d), want done(0)", c)
	}
	select {
	case c := <-called:
		t.Fatalf("a cancelled wait called done(%d)", c)
	default:
	}
}
