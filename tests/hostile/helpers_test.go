// Package hostile attacks cellserver from the outside with hostile
// input: the real binary (built once per test run, without the race
// detector, so its RSS is the product's) is started on 127.0.0.1:0 and fed
// oversized bulks, huge arrays, garbage, half-open and non-reading clients,
// thousands of connections and key sprays under maxmemory, while a probe
// client checks that well-behaved clients keep being served. See
// TestHostile for the cases and the table it prints, soak_test.go for the
// mixed-workload soak and fuzz_test.go for the command fuzzers.
//
// Everything runs on loopback, every loop is bounded in count and time, and
// every wait has a deadline.
package hostile

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cellserver/cellserver/internal/binproc"
	"github.com/cellserver/cellserver/internal/resptest"
	"github.com/redis/go-redis/v9"
)

const (
	kib = 1 << 10
	mib = 1 << 20
)

func TestMain(m *testing.M) { binproc.Main(m) }

// proc is one running cellserver process.
type proc struct {
	*binproc.Proc
	pid  int
	addr string
	args []string
}

// startServer runs the binary with --addr 127.0.0.1:0 and args and waits
// (20 s at most) for its startup line. The process is killed when the test
// ends if it is still running.
func startServer(t testing.TB, args ...string) *proc {
	t.Helper()
	bp, addr := binproc.StartServer(t, args...)
	return &proc{Proc: bp, pid: bp.Cmd.Process.Pid, args: args, addr: addr}
}

// requireAlive fails the test if the server has exited (a crash).
func (p *proc) requireAlive(t testing.TB) {
	t.Helper()
	if !p.Alive() {
		t.Fatalf("cellserver exited: %v\n%s", p.Err, p.Logs)
	}
}

// stop requires the server alive, then a clean exit (status 0) within
// 15 s of SIGTERM: after an attack the server must still shut down
// gracefully.
func (p *proc) stop(t testing.TB) {
	t.Helper()
	p.requireAlive(t)
	p.Stop(t, 15*time.Second)
}

// procStatus returns a /proc/PID/status field in bytes ("VmRSS",
// "VmHWM"), or -1 if the process is gone.
func procStatus(pid int, field string) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return -1
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, field+":"); ok {
			f := strings.Fields(v)
			if len(f) >= 1 {
				n, err := strconv.ParseInt(f[0], 10, 64)
				if err == nil {
					return n * kib // reported in kB
				}
			}
		}
	}
	return -1
}

func (p *proc) rss() int64 { return procStatus(p.pid, "VmRSS") }

// hwm is the peak RSS since the process started (VmHWM): no sampling can
// miss a peak.
func (p *proc) hwm() int64 { return procStatus(p.pid, "VmHWM") }

// ---- RESP on raw connections ----

// ioTimeout bounds every exchange on a raw connection.
const ioTimeout = 30 * time.Second

// readAll reads until EOF or the deadline and returns what arrived and
// the error that ended the read (nil for a clean EOF).
func readAll(c net.Conn, timeout time.Duration) ([]byte, error) {
	c.SetReadDeadline(time.Now().Add(timeout))
	b, err := io.ReadAll(c)
	return b, err
}

// isTimeout reports a deadline expiry.
func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// isReset reports a connection reset or broken pipe: the server closed a
// connection that still had data in flight.
func isReset(err error) bool {
	return errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

// info returns the fields of INFO section, over a fresh connection.
func info(addr, section string) (map[string]string, error) {
	rc, err := resptest.Dial(addr)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	return infoOn(rc, section)
}

func infoOn(rc *resptest.Conn, section string) (map[string]string, error) {
	v, err := rc.Do("INFO", section)
	if err != nil {
		return nil, err
	}
	if v.Kind != '$' {
		return nil, fmt.Errorf("INFO %s: %v", section, v)
	}
	m := map[string]string{}
	for _, l := range strings.Split(v.Str, "\r\n") {
		if k, x, ok := strings.Cut(l, ":"); ok {
			m[k] = x
		}
	}
	return m, nil
}

// connectedClients is a condition for testwait: INFO clients, on rc or
// else on a new connection to addr (which counts itself), shows want
// connected clients.
func connectedClients(addr string, rc *resptest.Conn, want int64) func() (bool, string) {
	return func() (bool, string) {
		var m map[string]string
		var err error
		if rc != nil {
			m, err = infoOn(rc, "clients")
		} else {
			m, err = info(addr, "clients")
		}
		if err != nil {
			return false, err.Error()
		}
		n := infoInt(m, "connected_clients")
		return n == want, fmt.Sprintf("connected_clients:%d", n)
	}
}

func infoInt(m map[string]string, field string) int64 {
	n, err := strconv.ParseInt(m[field], 10, 64)
	if err != nil {
		return -1
	}
	return n
}

// ---- the probe ----

// probeStats summarises the probe's calls during one attack.
type probeStats struct {
	calls         int
	oom           int // OOM replies (accepted only under noeviction)
	p50, p99, max time.Duration
}

// probe is a well-behaved go-redis client that issues CL.THROTTLE probe:N
// 10 100 1 every 2 ms while an attack runs, over one connection, with no
// retries, recording each call's latency.
type probe struct {
	rdb      *redis.Client
	allowOOM bool
	stop     chan struct{}
	done     chan struct{}

	lat  []time.Duration
	oom  int
	errs []string
	nerr int
}

// probeInterval is the probe's pace; probeTimeout bounds one call.
const (
	probeInterval = 2 * time.Millisecond
	probeTimeout  = 10 * time.Second
	probeMaxCalls = 200000 // bounds the loop whatever happens
)

func newGoRedis(addr string, pool int) *redis.Client {
	return redis.NewClient(&redis.Options{
		Addr: addr, PoolSize: pool, MaxRetries: -1, Protocol: 2,
		DialTimeout: 10 * time.Second, ReadTimeout: probeTimeout, WriteTimeout: probeTimeout,
	})
}

// startProbe connects the probe (one call before returning, so its
// connection exists before the attack) and starts its loop. allowOOM
// accepts Redis's OOM error as an answer (noeviction: a probe key that
// expired cannot be created again while memory is full).
func startProbe(t testing.TB, addr string, allowOOM bool) *probe {
	t.Helper()
	p := &probe{rdb: newGoRedis(addr, 1), allowOOM: allowOOM, stop: make(chan struct{}), done: make(chan struct{})}
	if err := p.rdb.Do(context.Background(), "CL.THROTTLE", "probe:0", 10, 100, 1).Err(); err != nil {
		t.Fatalf("probe before the attack: %v", err)
	}
	go p.loop()
	t.Cleanup(func() {
		select {
		case <-p.stop:
		default:
			close(p.stop)
		}
		<-p.done
		p.rdb.Close()
	})
	return p
}

func (p *probe) loop() {
	defer close(p.done)
	tick := time.NewTicker(probeInterval)
	defer tick.Stop()
	for i := 1; i <= probeMaxCalls; i++ {
		select {
		case <-p.stop:
			return
		case <-tick.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), probeTimeout)
		start := time.Now()
		v, err := p.rdb.Do(ctx, "CL.THROTTLE", "probe:"+strconv.Itoa(i%16), 10, 100, 1).Slice()
		d := time.Since(start)
		cancel()
		p.lat = append(p.lat, d)
		switch {
		case err != nil && p.allowOOM && strings.HasPrefix(err.Error(), "OOM "):
			p.oom++
		case err != nil:
			p.nerr++
			if len(p.errs) < 5 {
				p.errs = append(p.errs, fmt.Sprintf("call %d after %v: %v", i, d, err))
			}
		case len(v) != 5:
			p.nerr++
			if len(p.errs) < 5 {
				p.errs = append(p.errs, fmt.Sprintf("call %d: reply %v", i, v))
			}
		}
	}
}

// finish stops the probe, fails the test if any call failed, and returns
// the latency figures.
func (p *probe) finish(t testing.TB) probeStats {
	t.Helper()
	select {
	case <-p.stop:
	default:
		close(p.stop)
	}
	<-p.done
	if p.nerr > 0 {
		t.Errorf("probe: %d of %d calls failed, e.g. %s", p.nerr, len(p.lat), strings.Join(p.errs, "; "))
	}
	if len(p.lat) == 0 {
		t.Errorf("probe made no call")
		return probeStats{}
	}
	s := slices.Clone(p.lat)
	slices.Sort(s)
	pct := func(q float64) time.Duration { return s[min(len(s)-1, int(q*float64(len(s))))] }
	return probeStats{calls: len(s), oom: p.oom, p50: pct(0.50), p99: pct(0.99), max: s[len(s)-1]}
}

// ---- the well-behaved client's state ----

// keepState is CL.PEEK keep 5 1 3600 after CL.THROTTLE keep 5 1 3600 3.
type keepState struct {
	peek []int64
	at   time.Time
}

func peekKeep(addr string) ([]int64, error) {
	rc, err := resptest.Dial(addr)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	v, err := rc.Do("CL.PEEK", "keep", "5", "1", "3600")
	if err != nil {
		return nil, err
	}
	if n := v.Ints(); len(n) == 5 {
		return n, nil
	}
	return nil, fmt.Errorf("CL.PEEK keep: %v", v)
}

// setKeep stores the well-behaved client's key before an attack.
func setKeep(t testing.TB, addr string) keepState {
	t.Helper()
	rc := resptest.MustDial(t, addr)
	defer rc.Close()
	v, err := rc.Do("CL.THROTTLE", "keep", "5", "1", "3600", "3")
	if n := v.Ints(); err != nil || len(n) != 5 || n[0] != 0 {
		t.Fatalf("CL.THROTTLE keep 5 1 3600 3: %v, %v", v, err)
	}
	peek, err := peekKeep(addr)
	if err != nil {
		t.Fatal(err)
	}
	if want := []int64{0, 6, 3, -1, 10800}; !slices.Equal(peek, want) {
		t.Fatalf("CL.PEEK keep after taking 3: %v, want %v", peek, want)
	}
	return keepState{peek: peek, at: time.Now()}
}

// checkKeep reports whether keep reads the same as before: the same
// limited/limit/remaining/retry_after, and reset_after lower by the time
// elapsed (whole seconds, rounded up by the server).
func checkKeep(addr string, before keepState) error {
	now, err := peekKeep(addr)
	if err != nil {
		return err
	}
	el := int64(time.Since(before.at)/time.Second) + 1
	if !slices.Equal(now[:4], before.peek[:4]) || now[4] > before.peek[4] || now[4] < before.peek[4]-el {
		return fmt.Errorf("CL.PEEK keep: %v before, %v now (%v later)", before.peek, now, time.Since(before.at).Round(time.Millisecond))
	}
	return nil
}

// ---- the results table ----

// row is one line of TestHostile's table.
type row struct {
	name     string
	flags    string
	bound    int64  // RSS bound in bytes
	boundWhy string // how the bound is made up
	base     int64  // RSS before the attack
	maxRSS   int64  // VmHWM at the end of the case
	probe    probeStats
	note     string
}

var results struct {
	sync.Mutex
	rows []row
}

func addRow(r row) {
	results.Lock()
	results.rows = append(results.rows, r)
	results.Unlock()
}

func mb(n int64) string { return fmt.Sprintf("%.1f MiB", float64(n)/mib) }

func ms(d time.Duration) string { return fmt.Sprintf("%.2f ms", float64(d)/float64(time.Millisecond)) }

// renderTable formats the rows as a Markdown table.
func renderTable(rows []row) string {
	var b strings.Builder
	b.WriteString("| case | server flags | RSS bound | base RSS | max RSS (VmHWM) | probe p50 | probe p99 | probe max | probe calls | notes |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range rows {
		calls := strconv.Itoa(r.probe.calls)
		if r.probe.oom > 0 {
			calls += fmt.Sprintf(" (%d OOM)", r.probe.oom)
		}
		fmt.Fprintf(&b, "| %s | `%s` | %s (%s) | %s | %s | %s | %s | %s | %s | %s |\n",
			r.name, r.flags, mb(r.bound), r.boundWhy, mb(r.base), mb(r.maxRSS),
			ms(r.probe.p50), ms(r.probe.p99), ms(r.probe.max), calls, r.note)
	}
	return b.String()
}

// nextRESP returns the length of the first complete RESP2 or RESP3 value
// in buf: 0 when buf holds only part of one, -1 when it is malformed.
// Lines must end in "\r\n"; lengths must be integers. RESP3 types: null
// '_', double ',', boolean '#', big number '(' (one line each), verbatim
// '=' and blob error '!' (as bulks), set '~' and push '>' (as arrays), map
// '%' and attribute '|' (two values per entry; an attribute is followed by
// the value it annotates).
func nextRESP(buf []byte) int { return nextRESPDepth(buf, 0) }

func nextRESPDepth(buf []byte, depth int) int {
	if depth > 64 {
		return -1
	}
	i := bytes.Index(buf, []byte("\r\n"))
	if i < 0 {
		if bytes.IndexByte(buf, '\n') >= 0 {
			return -1
		}
		return 0
	}
	if i == 0 {
		return -1
	}
	kind, body, n := buf[0], string(buf[1:i]), i+2
	count := func() (int64, bool) {
		c, err := strconv.ParseInt(body, 10, 64)
		return c, err == nil && c >= -1
	}
	switch kind {
	case '+', '-', ',', '(':
		return n
	case ':':
		if _, err := strconv.ParseInt(body, 10, 64); err != nil {
			return -1
		}
		return n
	case '_':
		if body != "" {
			return -1
		}
		return n
	case '#':
		if body != "t" && body != "f" {
			return -1
		}
		return n
	case '$', '=', '!':
		c, ok := count()
		if !ok {
			return -1
		}
		if c == -1 {
			return n
		}
		if int64(len(buf)-n) < c+2 {
			return 0
		}
		if buf[n+int(c)] != '\r' || buf[n+int(c)+1] != '\n' {
			return -1
		}
		return n + int(c) + 2
	case '*', '~', '>', '%', '|':
		c, ok := count()
		if !ok {
			return -1
		}
		if kind == '%' || kind == '|' {
			c *= 2
		}
		if kind == '|' {
			c++ // the annotated value
		}
		for ; c > 0; c-- {
			m := nextRESPDepth(buf[n:], depth+1)
			if m <= 0 {
				return m
			}
			n += m
		}
		return n
	}
	return -1
}
