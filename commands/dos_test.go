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

// TestMultiQueueLimits: MULTI queues at most MultiMaxCommands commands and
// MultiMaxBytes bytes; the command past either gets an error, later ones
// are answered QUEUED but not kept, and EXEC aborts without running
// anything, as Redis does after a command fails to queue. The next MULTI
// starts from an empty queue.
func TestMultiQueueLimits(t *testing.T) {
	const execAbort = "-EXECABORT Transaction discarded because of previous errors.\r\n"
	t.Run("commands", func(t *testing.T) {
		d := newDirect(t, commands.Config{MultiMaxCommands: 5})
		for round := range 2 {
			d.want("+OK\r\n", "MULTI")
			for range 5 {
				d.want("+QUEUED\r\n", "CL.FIXED", "f", "100", "60")
			}
			if round == 1 { // at the cap exactly, EXEC runs them all
				d.want("*5\r\n*5\r\n:0\r\n:100\r\n:99\r\n", "EXEC")
				break
			}
			d.want("-ERR MULTI queue is full: at most multi-max-commands commands can be queued\r\n", "CL.FIXED", "f", "100", "60")
			d.want("+QUEUED\r\n", "CL.FIXED", "f", "100", "60")
			d.want(execAbort, "EXEC")
			d.want(":0\r\n", "EXISTS", "f") // nothing ran
		}
	})
	t.Run("bytes", func(t *testing.T) {
		// SET k <300 bytes>: 304 bytes of arguments + 3*24 = 376 bytes.
		d := newDirect(t, commands.Config{MultiMaxBytes: 2*376 + 375})
		val := strings.Repeat("v", 300)
		d.want("+OK\r\n", "MULTI")
		d.want("+QUEUED\r\n", "SET", "a", val)
		d.want("+QUEUED\r\n", "SET", "b", val)
		d.want("-ERR MULTI queue is full: at most multi-max-bytes bytes can be queued\r\n", "SET", "c", val)
		d.want("+QUEUED\r\n", "GET", "a") // would fit, but the transaction is already doomed
		d.want(execAbort, "EXEC")
		d.want(":0\r\n", "EXISTS", "a")
		d.want("+OK\r\n", "MULTI")
		d.want("+QUEUED\r\n", "SET", "a", val)
		d.want("+QUEUED\r\n", "SET", "b", val)
		d.want("+QUEUED\r\n", "SET", "c", val[:299]) // 1127 bytes: exactly the cap
		d.want("*3\r\n+OK\r\n+OK\r\n+OK\r\n", "EXEC")
	})
	t.Run("defaults", func(t *testing.T) {
		d := newDirect(t, commands.Config{})
		d.want("+OK\r\n", "MULTI")
		for range commands.DefaultMultiMaxCommands {
			d.want("+QUEUED\r\n", "GET", "k")
		}
		d.want("-ERR MULTI queue is full", "GET", "k")
		d.want(execAbort, "EXEC")
		// One SET of DefaultMultiMaxBytes: over by its key and name.
		d.want("+OK\r\n", "MULTI")
		big := make([]byte, commands.DefaultMultiMaxBytes)
		if got := d.doBytes([][]byte{[]byte("SET"), []byte("k"), big}); !strings.HasPrefix(got, "-ERR MULTI queue is full: at most multi-max-bytes") {
			t.Fatalf("SET of %d bytes in MULTI: %.100q", len(big), got)
		}
		d.want(execAbort, "EXEC")
		t.Logf("default caps: %d commands, %d bytes", commands.DefaultMultiMaxCommands, commands.DefaultMultiMaxBytes)
	})
}
