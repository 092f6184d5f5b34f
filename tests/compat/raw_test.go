package compat

import (
	"bufio"
	"bytes"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cellserver/cellserver/internal/resptest"
)

// ioTimeout bounds every network exchange (a real-time deadline, not a
// sleep): a hung server fails the test instead of hanging it.
const ioTimeout = 30 * time.Second

// TestReplayRaw is the byte-for-byte proof: every command of every
// transcript goes out as a RESP array on a plain TCP connection and the
// reply must be exactly the expected reply encoded as RESP2.
func TestReplayRaw(t *testing.T) {
	forEachBlock(t, "raw", func(t *testing.T, b *block) (int, int) {
		clk, addr := startServer(t)
		rc := resptest.MustDial(t, addr)
		n := 0
		for _, in := range b.instants {
			clk.Set(t0.Add(in.at))
			for _, c := range in.cmds {
				want := c.want.resp()
				got, err := rc.DoBytes(c.args...)
				if err != nil {
					t.Fatalf("%s: at t0+%v: %s: %v", b.where(c), in.at, c, err)
				}
				if !bytes.Equal(got, want) {
					t.Errorf("%s: at t0+%v: %s\n got: %s\nwant: %s", b.where(c), in.at, c, showBytes(got), showBytes(want))
				}
				n++
			}
		}
		return n, 0
	})
}

// TestEncodingMatchesSpecBytes pins the encoder used by TestReplayRaw to
// wire bytes quoted literally in the spec (sections 2 and 4), so that the
// raw replay does not only compare cellserver with itself.
func TestEncodingMatchesSpecBytes(t *testing.T) {
	cases := []struct {
		reply string
		wire  string
	}{
		{"[0,16,15,-1,2]", "*5\r\n:0\r\n:16\r\n:15\r\n:-1\r\n:2\r\n"},
		{"-Cell error: Store error: Zero rates are not supported", "-Cell error: Store error: Zero rates are not supported\r\n"},
		{"-Cell error: Store error: Usage: cl.throttle <key> <max_burst> <count per period> <period> [<quantity>]",
			"-Cell error: Store error: Usage: cl.throttle <key> <max_burst> <count per period> <period> [<quantity>]\r\n"},
		{"-Cell error: Store error: Error while setting key expire", "-Cell error: Store error: Error while setting key expire\r\n"},
		{`"1795312947207675371"`, "$19\r\n1795312947207675371\r\n"},
		{"2000", ":2000\r\n"},
		{"-1", ":-1\r\n"},
		{"+string", "+string\r\n"},
		{"(nil)", "$-1\r\n"},
		{`["k"]`, "*1\r\n$1\r\nk\r\n"},
		{`-"Cell error: Store error: Couldn't parse as integer: "`, "-Cell error: Store error: Couldn't parse as integer: \r\n"},
	}
	for _, c := range cases {
		r, err := parseReply(c.reply)
		if err != nil {
			t.Fatalf("%s: %v", c.reply, err)
		}
		if got := string(r.resp()); got != c.wire {
			t.Errorf("%s: encoded %q, want %q", c.reply, got, c.wire)
		}
		if got := r.String(); got != c.reply && !(r.kind == replyError && got == "-"+strconv.Quote(r.s)) {
			t.Errorf("%s: String() = %s", c.reply, got)
		}
		back, err := resptest.Read(bufio.NewReader(strings.NewReader(c.wire)))
		if err != nil || string(back.Encode(nil)) != c.wire {
			t.Errorf("%s: resptest.Read = %v, %v", c.reply, back, err)
		}
	}
}
