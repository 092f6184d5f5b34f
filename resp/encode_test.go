package resp

import (
	"testing"

	"github.com/tidwall/redcon"
)

// TestAppenders: each protocol-aware appender's bytes in RESP2 and RESP3,
// as Redis 7.0 writes them (networking.c), and RESP2's as redcon's where
// redcon has one.
func TestAppenders(t *testing.T) {
	cases := []struct {
		name       string
		f          func(b []byte, p Protocol) []byte
		resp2, res string
	}{
		{"null", AppendNull, "$-1\r\n", "_\r\n"},
		{"null array", AppendNullArray, "*-1\r\n", "_\r\n"},
		{"map of 2", func(b []byte, p Protocol) []byte { return AppendMapLen(b, p, 2) }, "*4\r\n", "%2\r\n"},
		{"set of 3", func(b []byte, p Protocol) []byte { return AppendSetLen(b, p, 3) }, "*3\r\n", "~3\r\n"},
		{"push of 3", func(b []byte, p Protocol) []byte { return AppendPushLen(b, p, 3) }, "*3\r\n", ">3\r\n"},
		{"verbatim", func(b []byte, p Protocol) []byte { return AppendVerbatim(b, p, "a\r\nb") }, "$4\r\na\r\nb\r\n", "=8\r\ntxt:a\r\nb\r\n"},
		{"empty verbatim", func(b []byte, p Protocol) []byte { return AppendVerbatim(b, p, "") }, "$0\r\n\r\n", "=4\r\ntxt:\r\n"},
	}
	for _, c := range cases {
		for _, p := range []Protocol{RESP2, RESP3} {
			want := c.resp2
			if p == RESP3 {
				want = c.res
			}
			prefix := []byte("+x\r\n")
			got := c.f(append([]byte(nil), prefix...), p)
			if string(got) != string(prefix)+want {
				t.Errorf("%s in RESP%d: %q, want %q", c.name, p, got[len(prefix):], want)
			}
		}
	}
	if got, want := string(AppendNull(nil, RESP2)), string(redcon.AppendNull(nil)); got != want {
		t.Errorf("RESP2 null %q, redcon's %q", got, want)
	}
	if got, want := string(AppendVerbatim(nil, RESP2, "info")), string(redcon.AppendBulkString(nil, "info")); got != want {
		t.Errorf("RESP2 verbatim %q, redcon's bulk %q", got, want)
	}
}

// TestConnProtocol: a connection starts in RESP2, and keeps what
// SetProtocol records; any other value reads as RESP2.
func TestConnProtocol(t *testing.T) {
	c := new(Conn)
	if p := c.Protocol(); p != RESP2 {
		t.Fatalf("new connection: RESP%d, want RESP2", p)
	}
	c.SetProtocol(RESP3)
	if p := c.Protocol(); p != RESP3 {
		t.Fatalf("after SetProtocol(RESP3): RESP%d", p)
	}
	c.SetProtocol(RESP2)
	if p := c.Protocol(); p != RESP2 {
		t.Fatalf("after SetProtocol(RESP2): RESP%d", p)
	}
	c.SetProtocol(7)
	if p := c.Protocol(); p != RESP2 {
		t.Fatalf("after SetProtocol(7): RESP%d, want RESP2", p)
	}
}
