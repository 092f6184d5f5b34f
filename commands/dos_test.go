package commands_test

import (
	"io"
	"log/slog"
	"math/rand/v2"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/cellserver/cellserver/commands"
	"github.com/cellserver/cellserver/internal/resptest"
	"github.com/cellserver/cellserver/internal/servertest"
	"github.com/cellserver/cellserver/limiter"
	"github.com/cellserver/cellserver/resp"
	"github.com/cellserver/cellserver/server"
)

// direct drives a commands.Service in process, as benchDispatch does: each
// call goes through ServeRESP (lookup, arity, MULTI queueing, dispatch) on
// a zero resp.Conn, without a network.
type direct struct {
	t    testing.TB
	srv  *commands.Service
	conn *resp.Conn
}

func newDirect(t testing.TB, cfg commands.Config) *direct {
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

// checkArgs returns one CL.ALL check on key of limiter kind i%4, with
// quantity 0 (nothing is stored).
func checkArgs(i int, key string) []string {
	switch i % 4 {
	case 0:
		return []string{"CL.THROTTLE", key, "10", "10", "60", "0"}
	case 1:
		return []string{"CL.FIXED", key, "100", "60", "0", "MS"}
	case 2:
		return []string{"CL.SLIDING", key, "100", "60", "0"}
	}
	return []string{"CL.SLIDINGLOG", key, "100", "60", "0"}
}

// allArgs returns CL.ALL's arguments for n checks on keys keyOf(i), of
// the limiter kinds in turn.
func allArgs(n int, keyOf func(i int) string) []string {
	args := []string{"CL.ALL"}
	for i := range n {
		args = append(args, checkArgs(i, keyOf(i))...)
	}
	return args
}

// TestAllMaxChecks: CL.ALL takes up to 1024 checks and refuses more with
// an error, before locking or deciding anything; a repeated key is found
// among the largest number of checks as among two.
func TestAllMaxChecks(t *testing.T) {
	d := newDirect(t, commands.Config{})
	key := func(i int) string { return "all:" + strconv.Itoa(i) }
	d.want("*1024\r\n*5\r\n:0\r\n", allArgs(1024, key)...)
	const tooMany = "-ERR CL.ALL takes at most 1024 checks\r\n"
	if got := d.do(allArgs(1025, key)...); got != tooMany {
		t.Fatalf("CL.ALL with 1025 checks: %.100q, want %q", got, tooMany)
	}
	if got := d.do(allArgs(100000, key)...); got != tooMany {
		t.Fatalf("CL.ALL with 100000 checks: %.100q, want %q", got, tooMany)
	}
	dup := func(i int) string { return key(i % 1023) } // check 1023 repeats check 0's key
	d.want("-ERR CL.ALL checks must use distinct keys\r\n", allArgs(1024, dup)...)
}

// TestAllDupKeysModel compares CL.ALL's verdict (the first problem in
// argument order: a repeated key, a bad or incomplete check, too many
// checks; else one tuple per check) with a plain model over random calls
// of 1 to 1100 checks drawn from key pools, half of them small enough to
// repeat.
func TestAllDupKeysModel(t *testing.T) {
	d := newDirect(t, commands.Config{})
	rng := rand.New(rand.NewPCG(7, 12))
	const cases = 3000
	verdicts := map[string]int{}
	for c := range cases {
		n := 1 + rng.IntN(12)
		switch rng.IntN(10) {
		case 0:
			n = 1 + rng.IntN(200)
		case 1:
			n = 1000 + rng.IntN(100)
		}
		pool := 1 + rng.IntN(4*n)
		if rng.IntN(2) == 0 {
			pool = 1 << 40 // keys all but surely distinct
		}
		bad, badKind := -1, 0
		if rng.IntN(3) == 0 {
			bad, badKind = rng.IntN(n), rng.IntN(3)
		}
		args := []string{"CL.ALL"}
		want := ""
		seen := map[string]bool{}
		for i := range n {
			j := rng.IntN(pool)
			k := "m:" + strconv.Itoa(j)
			if want == "" && i == 1024 {
				want = "-ERR CL.ALL takes at most 1024 checks\r\n"
			}
			if i == bad {
				switch badKind {
				case 0:
					args = append(args, "CL.BOGUS", k, "1")
					if want == "" {
						want = "-ERR CL.ALL: unknown check 'CL.BOGUS' (expected CL.THROTTLE, CL.FIXED, CL.SLIDING, CL.SLIDINGLOG, CL.ACQUIRE or CL.RESERVE)\r\n"
					}
				case 1:
					args = append(args, "cl.fixed", k, "0", "60", "0")
					if want == "" {
						want = "-ERR limit must be a positive integer\r\n"
					}
				case 2: // the call ends inside this check
					args = append(args, "cl.sliding", k, "10")
					if want == "" {
						want = "-ERR CL.ALL: incomplete check, expected CL.SLIDING key limit period quantity [MS]\r\n"
					}
				}
				if badKind == 2 {
					break
				}
				continue
			}
			args = append(args, checkArgs(j, k)...) // a key keeps its kind from case to case
			if want == "" && seen[k] {
				want = "-ERR CL.ALL checks must use distinct keys\r\n"
			}
			seen[k] = true
		}
		if want == "" {
			want = "*" + strconv.Itoa(n) + "\r\n"
		}
		if len(args) < 6 { // CL.ALL's arity, checked first
			want = "-ERR wrong number of arguments for 'cl.all' command\r\n"
		}
		got := d.do(args...)
		if !strings.HasPrefix(got, want) || (want[0] == '-' && got != want) {
			t.Fatalf("case %d (%d checks, pool %d, bad check %d kind %d): %.120q, want %q", c, n, pool, bad, badKind, got, want)
		}
		verdict := "tuples"
		for _, v := range []string{"distinct keys", "at most 1024", "unknown check", "limit must", "incomplete", "wrong number"} {
			if strings.Contains(want, v) {
				verdict = v
			}
		}
		if len(args) > 1+8*6 {
			verdict += " (9 checks or more)"
		}
		verdicts[verdict]++
	}
	t.Logf("%d random CL.ALL calls checked against the model; verdicts: %v", cases, verdicts)
}

// BenchmarkAllChecks is one CL.ALL of n CL.THROTTLE checks on distinct
// keys, each admitted and stored (a bucket too large to fill), through
// the dispatcher: n = 1024 is the largest call.
func BenchmarkAllChecks(b *testing.B) {
	for _, n := range []int{1, 8, 9, 64, 1024} {
		b.Run("checks="+strconv.Itoa(n), func(b *testing.B) {
			d := newDirect(b, commands.Config{})
			args := [][]byte{[]byte("CL.ALL")}
			for i := range n {
				for _, a := range []string{"CL.THROTTLE", "bench:" + strconv.Itoa(i), "1000000000000", "1000000", "1", "1"} {
					args = append(args, []byte(a))
				}
			}
			want := "*" + strconv.Itoa(n) + "\r\n*5\r\n:0\r\n"
			if got := d.doBytes(args); !strings.HasPrefix(got, want) {
				b.Fatalf("reply %.100q", got)
			}
			b.ReportAllocs()
			for b.Loop() {
				d.doBytes(args)
			}
		})
	}
}

// BenchmarkExecFullQueue is EXEC of a transaction at the default command
// cap (queued untimed): DefaultMultiMaxCommands CL.THROTTLE on distinct
// keys, each admitted and stored, run with every shard lock held.
func BenchmarkExecFullQueue(b *testing.B) {
	d := newDirect(b, commands.Config{})
	cmds := make([][][]byte, commands.DefaultMultiMaxCommands)
	for i := range cmds {
		for _, a := range []string{"CL.THROTTLE", "bench:" + strconv.Itoa(i), "1000000000000", "1000000", "1", "1"} {
			cmds[i] = append(cmds[i], []byte(a))
		}
	}
	multi, exec := [][]byte{[]byte("MULTI")}, [][]byte{[]byte("EXEC")}
	b.ReportAllocs()
	for b.Loop() {
		b.StopTimer()
		d.doBytes(multi)
		for _, c := range cmds {
			d.doBytes(c)
		}
		b.StartTimer()
		if got := d.doBytes(exec); !strings.HasPrefix(got, "*10000\r\n*5\r\n:0\r\n") {
			b.Fatalf("EXEC: %.100q", got)
		}
	}
}

// TestAllFewChecksNoAllocs: CL.ALL with up to four checks (the client's
// buffer) allocates nothing once its keys exist, as a lone CL.THROTTLE.
func TestAllFewChecksNoAllocs(t *testing.T) {
	if testing.CoverMode() != "" {
		t.Skip("coverage instrumentation changes allocations")
	}
	srv, err := commands.New(commands.Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	conn := new(resp.Conn)
	srv.Open(conn)
	defer srv.Close(conn)
	for n := 1; n <= 4; n++ {
		var args [][]byte
		for _, a := range allArgs(n, func(i int) string { return "few:" + strconv.Itoa(i) }) {
			args = append(args, []byte(a))
		}
		call := func() {
			conn.Out = conn.Out[:0]
			srv.ServeRESP(conn, args)
		}
		call()
		if want := "*" + strconv.Itoa(n) + "\r\n*5\r\n:0\r\n"; !strings.HasPrefix(string(conn.Out), want) {
			t.Fatalf("%d checks: reply %.100q", n, conn.Out)
		}
		if allocs := testing.AllocsPerRun(200, call); allocs != 0 {
			t.Errorf("CL.ALL with %d checks: %v allocations per call, want 0", n, allocs)
		}
	}
}

// TestMGetOutputBounded: MGET naming one large value many times stops
// building its reply once it would pass the output buffer limit (the
// connection is closed without a reply), rather than building it whole
// first: the server allocates about the limit, not the reply's size.
func TestMGetOutputBounded(t *testing.T) {
	const value, names, limit = 1 << 20, 200, 4 << 20
	_, addr := servertest.Start(t, server.Config{MaxOutputBuffer: limit})
	c := resptest.MustDial(t, addr)
	c.MustDo(t, "SET", "big", strings.Repeat("v", value))
	args := []string{"MGET"}
	for range names {
		args = append(args, "big")
	}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	if v, err := c.Do(args...); err == nil {
		t.Fatalf("MGET of %d MiB past a %d MiB limit answered %c (%d elements), want the connection closed", names*value>>20, limit>>20, v.Kind, len(v.Elems))
	}
	runtime.ReadMemStats(&after)
	if grew := after.TotalAlloc - before.TotalAlloc; grew > 32<<20 {
		t.Errorf("MGET allocated %d MiB for a reply cut at %d MiB", grew>>20, limit>>20)
	}
	other := resptest.MustDial(t, addr)
	if v := other.MustDo(t, "PING"); v.Str != "PONG" {
		t.Errorf("PING from another client: %v", v)
	}
}
