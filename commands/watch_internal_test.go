package commands

import (
	"fmt"
	"io"
	"log/slog"
	"testing"

	"github.com/cellserver/cellserver/resp"
)

// watchHarness drives a Service without a network: each client is a zero
// resp.Conn, which is enough for the transaction commands (they touch
// only Out and the context).
type watchHarness struct {
	t *testing.T
	s *Service
}

func newWatchHarness(t *testing.T, cfg Config) *watchHarness {
	t.Helper()
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return &watchHarness{t: t, s: s}
}

func (h *watchHarness) open() *resp.Conn {
	c := new(resp.Conn)
	h.s.Open(c)
	return c
}

// do runs one command on c and returns its raw reply.
func (h *watchHarness) do(c *resp.Conn, args ...string) string {
	h.t.Helper()
	b := make([][]byte, len(args))
	for i, a := range args {
		b[i] = []byte(a)
	}
	c.Out = c.Out[:0]
	h.s.ServeRESP(c, b)
	return string(c.Out)
}

// registered counts the watch table's entries by walking it, and checks
// the counter agrees.
func (h *watchHarness) registered() int {
	h.t.Helper()
	n := 0
	for i := range h.s.watch.stripes {
		st := &h.s.watch.stripes[i]
		st.mu.Lock()
		for k, list := range st.m {
			if len(list) == 0 {
				h.t.Errorf("key %q kept with no watcher", k)
			}
			n += len(list)
		}
		st.mu.Unlock()
	}
	if c := h.s.watch.n.Load(); c != int64(n) {
		h.t.Errorf("watch counter %d, table holds %d", c, n)
	}
	return n
}

// TestWatchFreedOnEveryEnd: every way a client's watch ends leaves nothing
// of it in the watch table, while another client's watch of the same keys
// stays; closing the connection too.
func TestWatchFreedOnEveryEnd(t *testing.T) {
	h := newWatchHarness(t, Config{})
	other := h.open()
	keys := make([]string, 100)
	for i := range keys {
		keys[i] = fmt.Sprintf("key:%d", i)
	}
	if r := h.do(other, append([]string{"WATCH"}, keys...)...); r != "+OK\r\n" {
		t.Fatalf("WATCH: %q", r)
	}
	ends := []struct {
		name string
		cmds [][]string
		last string // the last command's reply
	}{
		{"exec", [][]string{{"MULTI"}, {"GET", "x"}, {"EXEC"}}, "*1\r\n$-1\r\n"},
		{"exec empty", [][]string{{"MULTI"}, {"EXEC"}}, "*0\r\n"},
		{"exec aborted by a touch", [][]string{{"SET", "key:7", "v"}, {"MULTI"}, {"EXEC"}}, "*-1\r\n"},
		{"execabort", [][]string{{"MULTI"}, {"NOSUCH"}, {"EXEC"}}, "-EXECABORT Transaction discarded because of previous errors.\r\n"},
		{"exec with bad arity", [][]string{{"MULTI"}, {"EXEC", "x"}}, "-EXECABORT Transaction discarded because of: wrong number of arguments for 'exec' command\r\n"},
		{"discard", [][]string{{"MULTI"}, {"DISCARD"}}, "+OK\r\n"},
		{"unwatch", [][]string{{"UNWATCH"}}, "+OK\r\n"},
		{"reset", [][]string{{"RESET"}}, "+RESET\r\n"},
		{"close", nil, ""},
	}
	for _, e := range ends {
		c := h.open()
		h.do(c, append([]string{"WATCH", "k", "k"}, keys...)...)
		if n := h.registered(); n != 2*len(keys)+1 {
			t.Fatalf("%s: %d registered after WATCH, want %d", e.name, n, 2*len(keys)+1)
		}
		var r string
		for _, cmd := range e.cmds {
			r = h.do(c, cmd...)
		}
		if e.cmds == nil {
			h.s.Close(c)
		} else if r != e.last {
			t.Errorf("%s: last reply %q, want %q", e.name, r, e.last)
		}
		if n := h.registered(); n != len(keys) {
			t.Errorf("%s: %d registered after it, want %d (the other client's)", e.name, n, len(keys))
		}
	}
	h.s.Close(other)
	if n := h.registered(); n != 0 {
		t.Errorf("%d registered after every client closed", n)
	}
	t.Logf("%d ways a watch ends", len(ends))
}
