package resp

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/tidwall/redcon"

	"github.com/cellserver/cellserver/internal/syncbuf"
)

// testTimeout bounds every wait on the network in these tests.
const testTimeout = 10 * time.Second

// testHandler is a small command set for the server tests.
type testHandler struct {
	mu   sync.Mutex
	data map[string]string

	opens, closes atomic.Int64
	ran           atomic.Int64 // commands run
	closed        chan int64   // receives the ID of each closed connection
	blocked       chan struct{}
	release       chan struct{}
	maxOutAtEntry atomic.Int64

	// SHARED: what the last AppendShared returned, and Out's capacity
	// after it.
	sharedOK     atomic.Bool
	sharedOutCap atomic.Int64
}

// sharedReply is the reply SHARED appends with AppendShared: one bulk
// string of 1 MiB, built once, as a cached reply is.
var sharedReply = redcon.AppendBulk(nil, bytes.Repeat([]byte("s"), 1<<20))

func newTestHandler() *testHandler {
	return &testHandler{
		data:    make(map[string]string),
		closed:  make(chan int64, 100),
		blocked: make(chan struct{}, 10),
		release: make(chan struct{}),
	}
}

func (h *testHandler) Open(c *Conn) {
	h.opens.Add(1)
	c.SetContext(c.ID())
}

func (h *testHandler) Close(c *Conn) {
	h.closes.Add(1)
	h.closed <- c.ID()
}

func (h *testHandler) ServeRESP(c *Conn, args [][]byte) {
	h.ran.Add(1)
	if n := int64(len(c.Out)); n > h.maxOutAtEntry.Load() {
		h.maxOutAtEntry.Store(n)
	}
	switch strings.ToUpper(string(args[0])) {
	case "PING":
		if len(args) > 1 {
			c.Out = redcon.AppendBulk(c.Out, args[1])
		} else {
			c.Out = redcon.AppendString(c.Out, "PONG")
		}
	case "ECHO":
		c.Out = redcon.AppendBulk(c.Out, args[1])
	case "SET":
		h.mu.Lock()
		h.data[string(args[1])] = string(args[2])
		h.mu.Unlock()
		c.Out = redcon.AppendOK(c.Out)
	case "GET":
		h.mu.Lock()
		v, ok := h.data[string(args[1])]
		h.mu.Unlock()
		if ok {
			c.Out = redcon.AppendBulkString(c.Out, v)
		} else {
			c.Out = redcon.AppendNull(c.Out)
		}
	case "BLOCK":
		h.blocked <- struct{}{}
		<-h.release
		c.Out = redcon.AppendOK(c.Out)
	case "PANIC":
		panic("test panic")
	case "QUIT":
		c.Out = redcon.AppendOK(c.Out)
		c.CloseAfterReply()
	case "BIG":
		n, _ := strconv.Atoi(string(args[1]))
		c.Out = redcon.AppendBulk(c.Out, bytes.Repeat([]byte("b"), n))
	case "SHARED":
		h.sharedOK.Store(c.AppendShared(sharedReply))
		h.sharedOutCap.Store(int64(cap(c.Out)))
	case "SHAREDMIX": // as EXEC would: replies around two shared ones
		c.Out = redcon.AppendString(c.Out, "A")
		ok := c.AppendShared(sharedReply)
		c.Out = redcon.AppendString(c.Out, "B")
		ok = c.AppendShared(sharedReply) && ok
		c.Out = redcon.AppendString(c.Out, "C")
		h.sharedOK.Store(ok)
	case "OUTCAP":
		c.Out = redcon.AppendInt(c.Out, int64(cap(c.Out)))
	case "QBUF":
		c.Out = redcon.AppendInt(c.Out, int64(c.QueryBufLen()))
	case "BATCH":
		c.Out = redcon.AppendInt(c.Out, int64(c.Batch()))
	case "CTX":
		c.Out = redcon.AppendInt(c.Out, c.Context().(int64))
	case "LIMIT":
		n, _ := strconv.ParseInt(string(args[1]), 10, 64)
		c.SetMaxMultiBulkLen(n)
		c.Out = redcon.AppendOK(c.Out)
	default:
		c.Out = redcon.AppendError(c.Out, "ERR unknown command '"+string(args[0])+"'")
	}
}

func discardLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// startServer serves h on a loopback port and returns the server and its
// address. Cleanup closes the server and checks what Serve returned.
func startServer(t testing.TB, cfg Config, h Handler) (*Server, string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Logger == nil {
		cfg.Logger = discardLogger()
	}
	if cfg.EventLoops == 0 {
		cfg.EventLoops = testEventLoops
	}
	s := NewServer(cfg, h)
	served := make(chan error, 1)
	go func() { served <- s.Serve(ln) }()
	t.Cleanup(func() {
		s.Close()
		if err := <-served; !errors.Is(err, ErrServerClosed) {
			t.Errorf("Serve returned %v, want ErrServerClosed", err)
		}
	})
	return s, ln.Addr().String()
}

func dial(t testing.TB, addr string) net.Conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, testTimeout)
	if err != nil {
		t.Fatal(err)
	}
	c.SetDeadline(time.Now().Add(testTimeout))
	t.Cleanup(func() { c.Close() })
	return c
}

// roundTrip writes req and reads exactly len(want) bytes.
func roundTrip(t testing.TB, c net.Conn, req, want string) {
	t.Helper()
	if _, err := io.WriteString(c, req); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len(want))
	if _, err := io.ReadFull(c, got); err != nil {
		t.Fatalf("reading reply to %q: %v (got %q)", req, err, got)
	}
	if string(got) != want {
		t.Fatalf("reply to %q: %q, want %q", req, got, want)
	}
}

// readToEOF reads until the server closes the connection. A reset counts
// as a close: when the server closes with input it has not read (a QUIT
// or a protocol error followed by more commands, as in Redis), the kernel
// answers with RST, which Linux reports after the data already received.
func readToEOF(t testing.TB, c net.Conn) string {
	t.Helper()
	b, err := io.ReadAll(c)
	if err != nil && !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("reading to EOF: %v (got %q)", err, b)
	}
	return string(b)
}

func newClient(t testing.TB, addr string) *redis.Client {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{
		Addr:            addr,
		Protocol:        2,
		DisableIdentity: true,
		MaxRetries:      -1,
		ReadTimeout:     testTimeout,
		WriteTimeout:    testTimeout,
	})
	t.Cleanup(func() { rdb.Close() })
	return rdb
}

func TestServerGoRedis(t *testing.T) {
	_, addr := startServer(t, Config{}, newTestHandler())
	rdb := newClient(t, addr)
	ctx := context.Background()

	if v, err := rdb.Do(ctx, "PING").Text(); err != nil || v != "PONG" {
		t.Fatalf("PING: %q, %v", v, err)
	}
	if v, err := rdb.Do(ctx, "ECHO", "héllo\r\n").Text(); err != nil || v != "héllo\r\n" {
		t.Fatalf("ECHO: %q, %v", v, err)
	}
	if err := rdb.Do(ctx, "NOPE").Err(); err == nil || err.Error() != "ERR unknown command 'NOPE'" {
		t.Fatalf("NOPE: %v", err)
	}
	big := strings.Repeat("v", 1<<20)
	if err := rdb.Set(ctx, "big", big, 0).Err(); err != nil {
		t.Fatal(err)
	}
	if v, err := rdb.Get(ctx, "big").Result(); err != nil || v != big {
		t.Fatalf("GET big: %d bytes, %v", len(v), err)
	}

	const n = 1000
	cmds, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i := range n {
			p.Set(ctx, fmt.Sprint("k", i), fmt.Sprint("v", i), 0)
			p.Get(ctx, fmt.Sprint("k", i))
		}
		return nil
	})
	if err != nil || len(cmds) != 2*n {
		t.Fatalf("pipeline: %d commands, %v", len(cmds), err)
	}
	for i := range n {
		if v := cmds[2*i+1].(*redis.StringCmd).Val(); v != fmt.Sprint("v", i) {
			t.Fatalf("pipeline GET k%d = %q", i, v)
		}
	}
}

func TestServerInline(t *testing.T) {
	_, addr := startServer(t, Config{}, newTestHandler())
	c := dial(t, addr)
	roundTrip(t, c, "PING\r\n", "+PONG\r\n")
	roundTrip(t, c, "\r\n\nECHO \"a b\"\n", "$3\r\na b\r\n")
	roundTrip(t, c, "PING\r\n*2\r\n$4\r\nECHO\r\n$1\r\nx\r\nPING y\n", "+PONG\r\n$1\r\nx\r\n$1\r\ny\r\n")
}

// Every protocol error reaches the client as "-ERR <text>", after the
// replies of the commands before it, then the connection closes.
func TestServerProtocolErrors(t *testing.T) {
	tests := []struct{ in, want string }{
		{"*x\r\n", "-ERR Protocol error: invalid multibulk length\r\n"},
		{"*2097152\r\n", "-ERR Protocol error: invalid multibulk length\r\n"},
		{"*1\r\n$x\r\n", "-ERR Protocol error: invalid bulk length\r\n"},
		{"*1\r\n$16777217\r\n", "-ERR Protocol error: invalid bulk length\r\n"},
		{"*1\r\n$1\r\nabc", "-ERR Protocol error: invalid bulk length\r\n"},
		{"*1\r\nfoo\r\n", "-ERR Protocol error: expected '$', got 'f'\r\n"},
		{"*1\r\n\r\n", "-ERR Protocol error: expected '$', got ' '\r\n"},
		{"*" + strings.Repeat("1", 65<<10), "-ERR Protocol error: too big mbulk count string\r\n"},
		{"*1\r\n$" + strings.Repeat("1", 65<<10), "-ERR Protocol error: too big bulk count string\r\n"},
		{strings.Repeat("a", 65<<10), "-ERR Protocol error: too big inline request\r\n"},
		{"ECHO 'x\r\n", "-ERR Protocol error: unbalanced quotes in request\r\n"},
		{"PING\r\nPING\r\n*1\r\n:1\r\n", "+PONG\r\n+PONG\r\n-ERR Protocol error: expected '$', got ':'\r\n"},
	}
	s, addr := startServer(t, Config{}, newTestHandler())
	for i, tt := range tests {
		c := dial(t, addr)
		if _, err := io.WriteString(c, tt.in); err != nil {
			t.Fatal(err)
		}
		if got := readToEOF(t, c); got != tt.want {
			t.Errorf("%d: %.30q: got %q, want %q", i, tt.in, got, tt.want)
		}
	}
	if got, want := s.Stats().ProtocolErrors, int64(len(tests)); got != want {
		t.Errorf("ProtocolErrors = %d, want %d", got, want)
	}
}

// A client's protocol error closes it while another is served on.
func TestServerProtocolErrorIsolated(t *testing.T) {
	var logs syncbuf.Buffer
	logger := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	_, addr := startServer(t, Config{Logger: logger}, newTestHandler())
	good := dial(t, addr)
	roundTrip(t, good, "PING\r\n", "+PONG\r\n")

	bad := dial(t, addr)
	io.WriteString(bad, "*1\r\n$4\r\nPING\r\n*1\r\nxx\r\n*1\r\n$4\r\nPING\r\n")
	if got, want := readToEOF(t, bad), "+PONG\r\n-ERR Protocol error: expected '$', got 'x'\r\n"; got != want {
		t.Errorf("bad client got %q, want %q", got, want)
	}
	roundTrip(t, good, "PING\r\n", "+PONG\r\n")
	if l := logs.String(); !strings.Contains(l, "level=DEBUG") || !strings.Contains(l, "protocol error") {
		t.Errorf("protocol error not logged at debug level: %q", l)
	}
}

func TestServerMaxClients(t *testing.T) {
	h := newTestHandler()
	s, addr := startServer(t, Config{MaxClients: 2}, h)
	c1 := dial(t, addr)
	roundTrip(t, c1, "PING\r\n", "+PONG\r\n")
	c2 := dial(t, addr)
	roundTrip(t, c2, "PING\r\n", "+PONG\r\n")

	c3 := dial(t, addr)
	if got := readToEOF(t, c3); got != "-ERR max number of clients reached\r\n" {
		t.Fatalf("third client got %q", got)
	}
	st := s.Stats()
	if st.ConnectedClients != 2 || st.RejectedConnections != 1 || st.TotalConnections != 2 {
		t.Errorf("stats %+v", st)
	}

	// A slot frees when a client leaves.
	c1.Close()
	<-h.closed
	c4 := dial(t, addr)
	roundTrip(t, c4, "PING\r\n", "+PONG\r\n")
	if id := s.snapshot()[1].ID(); id != 3 {
		t.Errorf("new client has ID %d, want 3 (refused ones get none)", id)
	}
}

// A panicking handler closes its connection only; the panic is logged with
// its stack and Handler.Close still runs.
func TestServerPanic(t *testing.T) {
	var logs syncbuf.Buffer
	h := newTestHandler()
	logger := slog.New(slog.NewTextHandler(&logs, nil))
	_, addr := startServer(t, Config{Logger: logger}, h)
	good := dial(t, addr)
	roundTrip(t, good, "PING\r\n", "+PONG\r\n")

	bad := dial(t, addr)
	io.WriteString(bad, "PING\r\nPANIC\r\nPING\r\n")
	if got := readToEOF(t, bad); got != "" {
		t.Errorf("panicking connection got %q, want nothing", got)
	}
	if id := <-h.closed; id != 2 {
		t.Errorf("closed connection %d, want 2", id)
	}
	roundTrip(t, good, "PING\r\n", "+PONG\r\n")
	l := logs.String()
	for _, want := range []string{"level=ERROR", "test panic", "goroutine", "testHandler"} {
		if !strings.Contains(l, want) {
			t.Errorf("log lacks %q: %s", want, l)
		}
	}
}

// Shutdown closes idle clients at once, lets a client mid-pipeline receive
// every reply of the batch being run, and returns when all are gone.
func TestServerShutdownMidPipeline(t *testing.T) {
	h := newTestHandler()
	s, addr := startServer(t, Config{}, h)

	idle := dial(t, addr)
	roundTrip(t, idle, "PING\r\n", "+PONG\r\n")

	busy := dial(t, addr)
	const n = 1000
	var req, want strings.Builder
	for i := range n - 1 {
		arg := strconv.Itoa(i)
		fmt.Fprintf(&req, "*2\r\n$4\r\nECHO\r\n$%d\r\n%s\r\n", len(arg), arg)
		fmt.Fprintf(&want, "$%d\r\n%s\r\n", len(arg), arg)
	}
	req.WriteString("BLOCK\r\n")
	want.WriteString("+OK\r\n")
	if _, err := io.WriteString(busy, req.String()); err != nil {
		t.Fatal(err)
	}
	<-h.blocked // the whole pipeline has been read; BLOCK is running

	shutdown := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
		defer cancel()
		shutdown <- s.Shutdown(ctx)
	}()
	if got := readToEOF(t, idle); got != "" {
		t.Errorf("idle client got %q", got)
	}
	select {
	case err := <-shutdown:
		t.Fatalf("Shutdown returned %v while a batch was running", err)
	default:
	}
	close(h.release)
	if got := readToEOF(t, busy); got != want.String() {
		t.Errorf("busy client got %d bytes, want %d", len(got), want.Len())
	}
	if err := <-shutdown; err != nil {
		t.Errorf("Shutdown: %v", err)
	}
	if h.opens.Load() != 2 || h.closes.Load() != 2 {
		t.Errorf("opens %d, closes %d; want 2, 2", h.opens.Load(), h.closes.Load())
	}
	if _, err := net.Dial("tcp", addr); err == nil {
		t.Errorf("dial after Shutdown succeeded")
	}
	st := s.Stats()
	if want := int64(len("PING\r\n") + req.Len()); st.NetInputBytes != want {
		t.Errorf("NetInputBytes = %d, want %d", st.NetInputBytes, want)
	}
	if want := int64(len("+PONG\r\n") + want.Len()); st.NetOutputBytes != want {
		t.Errorf("NetOutputBytes = %d, want %d", st.NetOutputBytes, want)
	}
	if st.ConnectedClients != 0 || st.TotalConnections != 2 {
		t.Errorf("stats %+v", st)
	}
}

// When the context ends first, Shutdown closes the remaining connections
// and returns the context's error.
func TestServerShutdownContext(t *testing.T) {
	h := newTestHandler()
	s, addr := startServer(t, Config{}, h)
	c := dial(t, addr)
	io.WriteString(c, "PING\r\nBLOCK\r\n")
	<-h.blocked
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := s.Shutdown(ctx); !errors.Is(err, context.Canceled) {
		t.Errorf("Shutdown = %v, want context.Canceled", err)
	}
	if got := readToEOF(t, c); got != "" {
		t.Errorf("client got %q after a forced close", got)
	}
	close(h.release)
	<-h.closed
}

func TestServerIdleTimeout(t *testing.T) {
	const idle = 50 * time.Millisecond
	h := newTestHandler()
	_, addr := startServer(t, Config{IdleTimeout: idle}, h)
	c := dial(t, addr)
	before := time.Now() // the server's deadline is set after this
	roundTrip(t, c, "PING\r\n", "+PONG\r\n")
	if got := readToEOF(t, c); got != "" {
		t.Errorf("silent client got %q", got)
	}
	if d := time.Since(before); d < idle {
		t.Errorf("closed after %v, before the idle timeout", d)
	}
	<-h.closed
}

func TestServerQuit(t *testing.T) {
	h := newTestHandler()
	_, addr := startServer(t, Config{}, h)
	c := dial(t, addr)
	io.WriteString(c, "PING\r\nQUIT\r\nPING\r\n")
	if got := readToEOF(t, c); got != "+PONG\r\n+OK\r\n" {
		t.Errorf("got %q", got)
	}
	<-h.closed
	if n := h.ran.Load(); n != 2 {
		t.Errorf("%d commands ran, want 2", n)
	}
}

func TestServerKillAndRange(t *testing.T) {
	h := newTestHandler()
	s, addr := startServer(t, Config{}, h)
	start := time.Now()
	c1 := dial(t, addr)
	roundTrip(t, c1, "PING\r\n", "+PONG\r\n")
	c2 := dial(t, addr)
	roundTrip(t, c2, "CTX\r\n", ":2\r\n")
	if got := s.Addr(); got == nil || got.String() != addr {
		t.Errorf("Addr = %v, want %s", got, addr)
	}

	var seen []*Conn
	s.Range(func(c *Conn) bool {
		seen = append(seen, c)
		return true
	})
	if len(seen) != 2 || seen[0].ID() != 1 || seen[1].ID() != 2 {
		t.Fatalf("Range saw %d connections", len(seen))
	}
	for i, cl := range []net.Conn{c1, c2} {
		c := seen[i]
		if c.RemoteAddr() != cl.LocalAddr().String() || c.LocalAddr() != addr {
			t.Errorf("conn %d: addresses %s, %s", c.ID(), c.RemoteAddr(), c.LocalAddr())
		}
		if c.Created().Before(start) || c.LastActive().Before(c.Created()) {
			t.Errorf("conn %d: created %v, last active %v", c.ID(), c.Created(), c.LastActive())
		}
		// QueryBufLen and OutLen are updated after the reply is written,
		// so only the handler's own view of them is deterministic (see
		// TestServerQueryBufLen).
		if c.Context() != c.ID() {
			t.Errorf("conn %d: context %v", c.ID(), c.Context())
		}
	}
	n := 0
	s.Range(func(*Conn) bool { n++; return false })
	if n != 1 {
		t.Errorf("Range went on after false")
	}

	seen[0].Kill()
	if got := readToEOF(t, c1); got != "" {
		t.Errorf("killed client got %q", got)
	}
	if id := <-h.closed; id != 1 {
		t.Errorf("closed %d", id)
	}
	roundTrip(t, c2, "PING\r\n", "+PONG\r\n")
}

// Replies are written out once past 64 KiB within a batch, and a reply
// buffer grown past 1 MiB is dropped after the batch.
func TestServerLargeReplies(t *testing.T) {
	h := newTestHandler()
	_, addr := startServer(t, Config{}, h)
	c := dial(t, addr)
	const n, size = 100, 10000
	reply := fmt.Sprintf("$%d\r\n%s\r\n", size, strings.Repeat("b", size))
	roundTrip(t, c, strings.Repeat("BIG 10000\r\n", n), strings.Repeat(reply, n))
	if m := h.maxOutAtEntry.Load(); m > maxPendingOut+int64(len(reply)) {
		t.Errorf("reply buffer reached %d bytes within a batch", m)
	}
	big := 2 << 20
	roundTrip(t, c, fmt.Sprintf("BIG %d\r\n", big), fmt.Sprintf("$%d\r\n%s\r\n", big, strings.Repeat("b", big)))
	roundTrip(t, c, "OUTCAP\r\n", ":0\r\n")
}

// TestServerAppendShared: a shared reply (AppendShared) reaches the client
// in its place among the replies, without being copied to Out; past the
// output buffer limit the client is disconnected without its replies and
// without the reply being copied, counted in OutputLimitDrops as a reply
// over the limit in Out is. Other clients are served.
func TestServerAppendShared(t *testing.T) {
	h := newTestHandler()
	s, addr := startServer(t, Config{MaxOutputBuffer: 4 << 20}, h)
	c := dial(t, addr)
	shared := string(sharedReply)
	roundTrip(t, c, "PING\r\nSHARED\r\nPING\r\n", "+PONG\r\n"+shared+"+PONG\r\n")
	if !h.sharedOK.Load() {
		t.Fatal("AppendShared under the limit returned false")
	}
	if n := h.sharedOutCap.Load(); n >= int64(len(sharedReply)) {
		t.Errorf("Out grew to %d bytes for a shared reply of %d: copied", n, len(sharedReply))
	}
	roundTrip(t, c, "PING\r\nSHAREDMIX\r\nPING\r\n", "+PONG\r\n+A\r\n"+shared+"+B\r\n"+shared+"+C\r\n+PONG\r\n")
	roundTrip(t, c, strings.Repeat("SHARED\r\n", 3), strings.Repeat(shared, 3))

	s2, addr2 := startServer(t, Config{MaxOutputBuffer: 64 << 10}, h)
	c2 := dial(t, addr2)
	if _, err := io.WriteString(c2, "PING\r\nSHARED\r\nPING\r\n"); err != nil {
		t.Fatal(err)
	}
	if got := readToEOF(t, c2); got != "" {
		t.Fatalf("client over the limit read %d bytes (%.40q), want the connection closed without its replies", len(got), got)
	}
	if h.sharedOK.Load() {
		t.Error("AppendShared over the limit returned true")
	}
	if n := h.sharedOutCap.Load(); n >= int64(len(sharedReply)) {
		t.Errorf("Out grew to %d bytes for a refused shared reply of %d", n, len(sharedReply))
	}
	if got := s2.Stats().OutputLimitDrops; got != 1 {
		t.Errorf("OutputLimitDrops = %d, want 1", got)
	}
	if got := s.Stats().OutputLimitDrops; got != 0 {
		t.Errorf("OutputLimitDrops of the server under the limit = %d, want 0", got)
	}
	roundTrip(t, dial(t, addr2), "PING\r\n", "+PONG\r\n")
}

func TestServerQueryBufLen(t *testing.T) {
	_, addr := startServer(t, Config{}, newTestHandler())
	c := dial(t, addr)
	roundTrip(t, c, "QBUF\r\n", ":6\r\n")
}

func TestServerPerConnLimit(t *testing.T) {
	_, addr := startServer(t, Config{}, newTestHandler())
	c := dial(t, addr)
	roundTrip(t, c, "LIMIT 2\r\n", "+OK\r\n")
	roundTrip(t, c, "*2\r\n$4\r\nECHO\r\n$1\r\nx\r\n", "$1\r\nx\r\n")
	io.WriteString(c, "LIMIT 0\r\n*3\r\n$4\r\nPING\r\n$1\r\nx\r\n$1\r\ny\r\nLIMIT 2\r\n*3\r\n")
	if got, want := readToEOF(t, c), "+OK\r\n$1\r\nx\r\n+OK\r\n-ERR Protocol error: invalid multibulk length\r\n"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}

// Open may write a reply and turn the client away.
type refusingHandler struct{ testHandler }

func (h *refusingHandler) Open(c *Conn) {
	c.Out = redcon.AppendError(c.Out, "ERR go away")
	c.CloseAfterReply()
}

func TestServerOpenRefuses(t *testing.T) {
	h := &refusingHandler{*newTestHandler()}
	_, addr := startServer(t, Config{}, h)
	c := dial(t, addr)
	io.WriteString(c, "PING\r\n")
	if got := readToEOF(t, c); got != "-ERR go away\r\n" {
		t.Errorf("got %q", got)
	}
	if n := h.ran.Load(); n != 0 {
		t.Errorf("%d commands ran", n)
	}
}

func TestServerClose(t *testing.T) {
	h := newTestHandler()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := NewServer(Config{Logger: discardLogger()}, h)
	if s.Addr() != nil {
		t.Errorf("Addr before Serve = %v", s.Addr())
	}
	served := make(chan error, 1)
	go func() { served <- s.Serve(ln) }()
	c := dial(t, ln.Addr().String())
	roundTrip(t, c, "PING\r\n", "+PONG\r\n")
	if err := s.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	if err := <-served; !errors.Is(err, ErrServerClosed) {
		t.Errorf("Serve = %v", err)
	}
	if got := readToEOF(t, c); got != "" {
		t.Errorf("client got %q", got)
	}
	<-h.closed
	ln2, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Serve(ln2); !errors.Is(err, ErrServerClosed) {
		t.Errorf("Serve after Close = %v", err)
	}
	if err := s.Shutdown(context.Background()); err != nil {
		t.Errorf("Shutdown after Close = %v", err)
	}
}

func TestServeInvalidConfig(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := NewServer(Config{MaxClients: -1}, newTestHandler())
	if err := s.Serve(ln); err == nil || !strings.Contains(err.Error(), "MaxClients") {
		t.Errorf("Serve = %v", err)
	}
}

// tempErrListener fails Accept with a temporary error a few times, then
// hands out one end of a pipe.
type tempErrListener struct {
	fails  int
	conns  chan net.Conn
	closed chan struct{}
	once   sync.Once
}

type tempErr struct{}

func (tempErr) Error() string   { return "temporary" }
func (tempErr) Timeout() bool   { return false }
func (tempErr) Temporary() bool { return true }

func (l *tempErrListener) Accept() (net.Conn, error) {
	if l.fails > 0 {
		l.fails--
		return nil, tempErr{}
	}
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.closed:
		return nil, net.ErrClosed
	}
}

func (l *tempErrListener) Close() error {
	l.once.Do(func() { close(l.closed) })
	return nil
}

func (l *tempErrListener) Addr() net.Addr { return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)} }

func TestServeRetriesTemporaryErrors(t *testing.T) {
	var logs syncbuf.Buffer
	ln := &tempErrListener{fails: 3, conns: make(chan net.Conn, 1), closed: make(chan struct{})}
	s := NewServer(Config{Logger: slog.New(slog.NewTextHandler(&logs, nil))}, newTestHandler())
	served := make(chan error, 1)
	go func() { served <- s.Serve(ln) }()
	client, server := net.Pipe()
	ln.conns <- server
	client.SetDeadline(time.Now().Add(testTimeout))
	roundTrip(t, client, "PING\r\n", "+PONG\r\n")
	if err := s.Shutdown(context.Background()); err != nil {
		t.Errorf("Shutdown: %v", err)
	}
	if err := <-served; !errors.Is(err, ErrServerClosed) {
		t.Errorf("Serve = %v", err)
	}
	if n := strings.Count(logs.String(), "accept error"); n != 3 {
		t.Errorf("%d accept errors logged, want 3", n)
	}
	for _, d := range []string{"delay=5ms", "delay=10ms", "delay=20ms"} {
		if !strings.Contains(logs.String(), d) {
			t.Errorf("log lacks %s", d)
		}
	}
}

func TestConfigValidate(t *testing.T) {
	if err := (Config{}).Validate(); err != nil {
		t.Errorf("zero Config: %v", err)
	}
	d := Config{}.withDefaults()
	if d.MaxClients != 10000 || d.IdleTimeout != 0 || d.MaxBulkLen != 16<<20 || d.MaxMultiBulkLen != 1048576 ||
		d.MaxQueryBuffer != 64<<20 || d.MaxInlineLen != 64<<10 || d.Logger == nil {
		t.Errorf("defaults %+v", d)
	}
	bad := Config{MaxClients: -1, IdleTimeout: -1, MaxBulkLen: -1, MaxMultiBulkLen: 1 << 31, MaxQueryBuffer: -1, MaxInlineLen: -1, EventLoops: -2}
	err := bad.Validate()
	for _, f := range []string{"MaxClients", "IdleTimeout", "MaxBulkLen", "MaxMultiBulkLen", "MaxQueryBuffer", "MaxInlineLen", "EventLoops"} {
		if err == nil || !strings.Contains(err.Error(), f) {
			t.Errorf("error lacks %s: %v", f, err)
		}
	}
	if err := (Config{MaxBulkLen: 64 << 20}).Validate(); err == nil || !strings.Contains(err.Error(), "MaxQueryBuffer") {
		t.Errorf("bulk larger than the query buffer: %v", err)
	}
	if err := (Config{MaxBulkLen: 1 << 20, MaxQueryBuffer: 1<<20 + QueryBufferOverhead}).Validate(); err != nil {
		t.Errorf("smallest query buffer: %v", err)
	}
	if err := (Config{MaxInlineLen: 64 << 20}).Validate(); err == nil {
		t.Errorf("inline larger than the query buffer accepted")
	}
}

// dialFrom connects to addr from the loopback address ip (any address of
// 127.0.0.0/8 is local on Linux), so that tests can tell clients apart by
// their source address.
func dialFrom(t testing.TB, ip, addr string) net.Conn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}, Timeout: testTimeout}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Skipf("cannot connect from %s: %v", ip, err)
	}
	c.SetDeadline(time.Now().Add(testTimeout))
	t.Cleanup(func() { c.Close() })
	return c
}

// Connections that Config.Refuse turns away get its reply and the close as
// they are accepted, before they send anything, and never count towards
// MaxClients: local clients are still served.
func TestServerRefuse(t *testing.T) {
	const msg = "-DENIED go away\r\n"
	h := newTestHandler()
	refuse := func(a net.Addr) []byte {
		if ta, ok := a.(*net.TCPAddr); ok && ta.IP.Equal(net.IPv4(127, 0, 0, 2)) {
			return []byte(msg)
		}
		return nil
	}
	s, addr := startServer(t, Config{MaxClients: 2, Refuse: refuse}, h)
	const remotes = 10
	for i := range remotes {
		c := dialFrom(t, "127.0.0.2", addr)
		if got := readToEOF(t, c); got != msg {
			t.Fatalf("refused client %d got %q, want %q then the close", i, got, msg)
		}
	}
	for range 2 {
		roundTrip(t, dial(t, addr), "PING\r\n", "+PONG\r\n")
	}
	st := s.Stats()
	if st.ConnectedClients != 2 || st.RejectedConnections != remotes || st.TotalConnections != 2 {
		t.Errorf("stats %+v", st)
	}
	if n := h.opens.Load(); n != 2 {
		t.Errorf("Handler.Open ran %d times, want 2", n)
	}
}
