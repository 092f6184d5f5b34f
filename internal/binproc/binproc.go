// Package binproc builds the cellserver binary and runs it as a child
// process for black-box tests (crash recovery, hostile inputs): on
// 127.0.0.1 at a port the kernel picks, with its log captured and its
// address read from the startup line.
package binproc

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Build compiles ./cmd/cellserver into a new temporary directory and
// returns the binary's path and a function that removes the directory.
func Build() (path string, cleanup func(), err error) {
	dir, err := os.MkdirTemp("", "cellserver-bin-")
	if err != nil {
		return "", func() {}, err
	}
	cleanup = func() { os.RemoveAll(dir) }
	path = filepath.Join(dir, "cellserver")
	cmd := exec.Command("go", "build", "-o", path, "github.com/cellserver/cellserver/cmd/cellserver")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return "", cleanup, fmt.Errorf("go build: %v\n%s", err, out.String())
	}
	return path, cleanup, nil
}

// built is the binary Path builds, once per test process.
var built struct {
	once    sync.Once
	path    string
	cleanup func()
	err     error
}

// Path returns the cellserver binary of this test process: $CELLSERVER_BIN
// if set, else one Build makes on the first call (and RemoveBinary
// removes). It returns "" if that build failed; Binary says why.
func Path() string {
	built.once.Do(func() {
		if built.path = os.Getenv("CELLSERVER_BIN"); built.path == "" {
			built.path, built.cleanup, built.err = Build()
		}
	})
	if built.err != nil {
		return ""
	}
	return built.path
}

// Binary is Path for a test that runs the binary: it skips the test under
// -short and fails it if the build failed.
func Binary(t testing.TB) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds and runs the cellserver binary")
	}
	if p := Path(); p != "" {
		return p
	}
	t.Fatal(built.err)
	return ""
}

// RemoveBinary removes the binary Path built, if any; TestMain calls it
// once the tests have run.
func RemoveBinary() {
	if built.cleanup != nil {
		built.cleanup()
	}
}

// Main is a TestMain for packages that need nothing else: it runs the
// tests, removes the binary and exits with the tests' code.
func Main(m *testing.M) {
	code := m.Run()
	RemoveBinary()
	os.Exit(code)
}

// maxLogBytes bounds what Logs keeps of a process's log.
const maxLogBytes = 1 << 20

// Logs is a goroutine-safe log sink that keeps the first MiB of lines.
type Logs struct {
	mu      sync.Mutex // guards b, dropped
	b       bytes.Buffer
	dropped int
}

// Add appends one line.
func (l *Logs) Add(line string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.b.Len() > maxLogBytes {
		l.dropped++
		return
	}
	l.b.WriteString(line)
	l.b.WriteByte('\n')
}

// String returns the lines kept, and says how many were dropped.
func (l *Logs) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.dropped > 0 {
		return l.b.String() + fmt.Sprintf("(%d more lines dropped)\n", l.dropped)
	}
	return l.b.String()
}

// Proc is one running cellserver process.
type Proc struct {
	Cmd    *exec.Cmd
	Logs   *Logs
	Exited chan struct{} // closed once the process has exited
	Err    error         // Wait's result, valid once Exited is closed
}

var addrRE = regexp.MustCompile(`addr=(127\.0\.0\.1:\d+)`)

// Launch starts bin with --addr 127.0.0.1:0 followed by args. The returned
// channel receives the listening address once the "cellserver started"
// line is logged; it never receives if the process exits first (wait on
// Exited as well).
func Launch(bin string, args ...string) (*Proc, <-chan string, error) {
	cmd := exec.Command(bin, append([]string{"--addr", "127.0.0.1:0"}, args...)...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, nil, err
	}
	cmd.Stdout = cmd.Stderr
	if err := cmd.Start(); err != nil {
		return nil, nil, err
	}
	p := &Proc{Cmd: cmd, Logs: &Logs{}, Exited: make(chan struct{})}
	addrc := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		sent := false
		for sc.Scan() {
			line := sc.Text()
			p.Logs.Add(line)
			if m := addrRE.FindStringSubmatch(line); m != nil && !sent && strings.Contains(line, "cellserver started") {
				addrc <- m[1]
				sent = true
			}
		}
		io.Copy(io.Discard, stderr)
		p.Err = cmd.Wait()
		close(p.Exited)
	}()
	return p, addrc, nil
}

// StartTimeout bounds how long StartServer waits for the startup line.
const StartTimeout = 20 * time.Second

// StartServer launches the test process's binary (Binary) with args,
// kills it when the test ends, and waits (StartTimeout at most) until it
// listens: it returns the process and its address, or fails the test with
// the process's log.
func StartServer(t testing.TB, args ...string) (*Proc, string) {
	t.Helper()
	p, addrc, err := Launch(Binary(t), args...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Kill)
	select {
	case addr := <-addrc:
		return p, addr
	case <-p.Exited:
		t.Fatalf("cellserver %v exited before listening: %v\n%s", args, p.Err, p.Logs)
	case <-time.After(StartTimeout):
		t.Fatalf("cellserver %v did not report its address within %v\n%s", args, StartTimeout, p.Logs)
	}
	return nil, ""
}

// Alive reports whether the process has not exited.
func (p *Proc) Alive() bool {
	select {
	case <-p.Exited:
		return false
	default:
		return true
	}
}

// Stop sends SIGTERM and fails the test unless the process then exits
// with status 0 within d: a clean, graceful shutdown.
func (p *Proc) Stop(t testing.TB, d time.Duration) {
	t.Helper()
	if err := p.Cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatalf("SIGTERM: %v", err)
	}
	select {
	case <-p.Exited:
		if p.Err != nil {
			t.Fatalf("cellserver exit after SIGTERM: %v\n%s", p.Err, p.Logs)
		}
	case <-time.After(d):
		t.Fatalf("cellserver did not exit within %v of SIGTERM\n%s", d, p.Logs)
	}
}

// Kill kills the process if it is still running and waits for it.
func (p *Proc) Kill() {
	select {
	case <-p.Exited:
	default:
		_ = p.Cmd.Process.Kill()
		<-p.Exited
	}
}

// Child is a process a multi-process test started with Start (redis-server,
// redis-sentinel, cellserver) or adopted from Launch with Adopt: its name
// for messages, its log, and its end.
type Child struct {
	Name   string
	Cmd    *exec.Cmd
	Logs   *Logs
	Exited chan struct{} // closed once the process has exited
	Err    error         // Wait's result, valid once Exited is closed
}

// Start starts argv, with env added to the environment, keeping its
// stdout and stderr in Logs.
func Start(name string, env []string, argv ...string) (*Child, error) {
	cmd := exec.Command(argv[0], argv[1:]...)
	if len(env) > 0 {
		cmd.Env = append(os.Environ(), env...)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	c := &Child{Name: name, Cmd: cmd, Logs: &Logs{}, Exited: make(chan struct{})}
	go func() {
		sc := bufio.NewScanner(out)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			c.Logs.Add(sc.Text())
		}
		io.Copy(io.Discard, out)
		c.Err = cmd.Wait()
		close(c.Exited)
	}()
	return c, nil
}

// Adopt makes a Child of a process Launch started.
func Adopt(name string, p *Proc) *Child {
	c := &Child{Name: name, Cmd: p.Cmd, Logs: p.Logs, Exited: make(chan struct{})}
	go func() {
		<-p.Exited
		c.Err = p.Err
		close(c.Exited)
	}()
	return c
}

// Kill sends SIGKILL to the process, by its PID, and waits (at most 20 s)
// until it is gone; it does nothing if the process already exited.
func (c *Child) Kill() {
	select {
	case <-c.Exited:
		return
	default:
	}
	_ = c.Cmd.Process.Kill()
	select {
	case <-c.Exited:
	case <-time.After(20 * time.Second):
	}
}

// Alive reports whether the process has not exited.
func (c *Child) Alive() bool {
	select {
	case <-c.Exited:
		return false
	default:
		return true
	}
}

// FreePorts returns n distinct loopback ports that were free a moment ago
// (every listener is held until all n are picked).
func FreePorts(n int) ([]int, error) {
	var lns []net.Listener
	defer func() {
		for _, ln := range lns {
			ln.Close()
		}
	}()
	var ports []int
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		lns = append(lns, ln)
		ports = append(ports, ln.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}
