package commands

import (
	"io"
	"log/slog"
	"strings"
	"testing"

	"github.com/cellserver/cellserver/policy"
	"github.com/cellserver/cellserver/resp"
)

// TestApplyPinsOneSet: a reload that lands between the resolution of a
// CL.APPLY's keys (from set A: a hierarchy's member key) and its run does
// not change what the call applies: the keys, parameters and reply all
// come from A. The next call uses B.
func TestApplyPinsOneSet(t *testing.T) {
	def := func(limit, prefix string) *policy.Set {
		s, err := policy.Parse([]byte("policies:\n  - {name: m, algorithm: fixed, limit: " + limit +
			", period: 1h}\n  - {name: h, all: [{policy: m, key: \"" + prefix + ":${key}\"}]}\n"))
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	a, b := def("10", "A"), def("20", "B")
	srv, err := New(Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Policies: a})
	if err != nil {
		t.Fatal(err)
	}
	conn := new(resp.Conn)
	srv.Open(conn)
	defer srv.Close(conn)
	cl := conn.Context().(*client)
	x := &cl.x
	sp := srv.table["cl.apply"]

	// As dispatch does: resolve the keys, then run; the swap in between.
	x.args = [][]byte{[]byte("CL.APPLY"), []byte("k"), []byte("h")}
	x.polSet, x.haveNow = nil, false
	x.resolveKeys(sp, x.db())
	srv.pol.set.Store(b)
	srv.call(x, sp)
	x.keys = nil
	if have, want := string(conn.Out), "*5\r\n:0\r\n:10\r\n:9\r\n"; !strings.HasPrefix(have, want) {
		t.Fatalf("call resolved with A, run after the swap: %q, want A's reply %q...", have, want)
	}
	nowMS := x.clockMS()
	if srv.ks.DB(0).Shard([]byte("A:k")).Peek([]byte("A:k"), nowMS) == nil {
		t.Fatal("A:k not charged")
	}
	if srv.ks.DB(0).Shard([]byte("B:k")).Peek([]byte("B:k"), nowMS) != nil {
		t.Fatal("B:k charged by a call resolved with A")
	}
	conn.Out = conn.Out[:0]
	srv.ServeRESP(conn, [][]byte{[]byte("CL.APPLY"), []byte("k"), []byte("h")})
	if have, want := string(conn.Out), "*5\r\n:0\r\n:20\r\n:19\r\n"; !strings.HasPrefix(have, want) {
		t.Fatalf("next call: %q, want B's reply %q...", have, want)
	}
}
