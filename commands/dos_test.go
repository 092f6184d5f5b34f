package commands_test

import (
	"bytes"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"testing"

	"github.com/cellserver/cellserver/commands"
	"github.com/cellserver/cellserver/internal/servertest"
	"github.com/cellserver/cellserver/limiter"
	"github.com/cellserver/cellserver/resp"
)

// direct drives a commands.Server in process, as benchDispatch does: each
// call goes through ServeRESP (lookup, arity, MULTI queueing, dispatch) on
// a zero resp.Conn, without a network.
type direct struct {
	t    *testing.T
	srv  *commands.Server
	conn *resp.Conn
}

func newDirect(t *testing.T, cfg commands.Config) *direct {
	t.Helper()
	if cfg.Clock == nil {
		cfg.Clock = servertest.NewClock(limT0).Now
	}
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	srv, err := commands.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	d := &direct{t: t, srv: srv, conn: new(resp.Conn)}
	srv.Open(d.conn)
	t.Cleanup(func() { srv.Close(d.conn) })
	return d
}

// do runs one command and returns its raw reply.
func (d *direct) do(args ...string) string {
	b := make([][]byte, len(args))
	for i, a := range args {
		b[i] = []byte(a)
	}
	return d.doBytes(b)
}

func (d *direct) doBytes(args [][]byte) string {
	d.conn.Out = d.conn.Out[:0]
	d.srv.ServeRESP(d.conn, args)
	return string(d.conn.Out)
}

// want runs one command and fails unless its raw reply starts with prefix.
func (d *direct) want(prefix string, args ...string) string {
	d.t.Helper()
	got := d.do(args...)
	if !strings.HasPrefix(got, prefix) {
		d.t.Fatalf("%.200q: reply %.300q, want one starting with %q", strings.Join(args, " "), got, prefix)
	}
	return got
}

// TestAcquireLeasesBounded: a key holds at most limiter.MaxLeases leases,
// so the work of each CL.ACQUIRE/CL.RELEASE on it (a scan of its leases) is
// bounded: a larger limit is refused, standalone and inside CL.ALL, and at
// the largest limit the key holds exactly MaxLeases leases.
func TestAcquireLeasesBounded(t *testing.T) {
	d := newDirect(t, commands.Config{})
	over := strconv.Itoa(limiter.MaxLeases + 1)
	max := strconv.Itoa(limiter.MaxLeases)
	const msg = "-ERR limit must be between 1 and 10000 for CL.ACQUIRE\r\n"
	if got := d.do("CL.ACQUIRE", "c", over, "60", "t"); got != msg {
		t.Fatalf("CL.ACQUIRE limit %s: %q, want %q", over, got, msg)
	}
	if got := d.do("CL.ALL", "CL.FIXED", "f", "1", "60", "1", "CL.ACQUIRE", "c", over, "60", "t"); got != msg {
		t.Fatalf("CL.ALL with CL.ACQUIRE limit %s: %q, want %q", over, got, msg)
	}
	d.want("*-1\r\n", "CL.INFO", "c") // nothing was created
	for i := range limiter.MaxLeases {
		d.want("*5\r\n:0\r\n", "CL.ACQUIRE", "c", max, "60", "tok-"+strconv.Itoa(i))
	}
	d.want("*5\r\n:1\r\n:10000\r\n:0\r\n", "CL.ACQUIRE", "c", max, "60", "one-too-many")
	info := d.do("CL.INFO", "c")
	if !strings.Contains(info, "$6\r\nleases\r\n:10000\r\n") {
		t.Fatalf("CL.INFO c: %.200q, want 10000 leases", info)
	}
	t.Logf("%d leases acquired at the largest limit; limit %s refused", limiter.MaxLeases, over)
}

var _ = bytes.Equal
