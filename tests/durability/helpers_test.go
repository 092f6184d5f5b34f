// Package durability checks cellserver's persistence from the outside:
// the real binary, built once per test run, is started on 127.0.0.1:0 with
// --data-dir, driven with go-redis, killed with SIGKILL or stopped with
// SIGTERM, and restarted on the same directory.
package durability

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cellserver/cellserver/internal/binproc"
	"github.com/redis/go-redis/v9"
)

func TestMain(m *testing.M) { binproc.Main(m) }

// proc is one running cellserver process.
type proc struct {
	*binproc.Proc
	addr string
}

// launch starts the binary with --addr 127.0.0.1:0 and args; the returned
// channel carries the listening address once the startup line is logged.
func launch(t *testing.T, args ...string) (*proc, <-chan string) {
	t.Helper()
	bp, addrc, err := binproc.Launch(binproc.Path(), args...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(bp.Kill)
	return &proc{Proc: bp}, addrc
}

// startServer starts the binary and waits (20 s at most) until it listens.
func startServer(t *testing.T, args ...string) *proc {
	t.Helper()
	bp, addr := binproc.StartServer(t, args...)
	return &proc{Proc: bp, addr: addr}
}

// runToExit starts the binary, which is expected to refuse to start, and
// returns its exit code and output (20 s at most). If it starts serving
// instead, it is killed and the code is -1.
func runToExit(t *testing.T, args ...string) (int, string) {
	t.Helper()
	p, addrc := launch(t, args...)
	select {
	case <-p.Exited:
	case <-addrc:
		p.kill(t)
		return -1, p.Logs.String()
	case <-time.After(20 * time.Second):
		t.Fatalf("cellserver %v still running after 20s (expected it to refuse to start)\n%s", args, p.Logs)
	}
	var ee *exec.ExitError
	switch {
	case p.Err == nil:
		return 0, p.Logs.String()
	case errors.As(p.Err, &ee):
		return ee.ExitCode(), p.Logs.String()
	}
	t.Fatalf("wait: %v", p.Err)
	return 0, ""
}

// kill sends SIGKILL and waits for the process to be gone.
func (p *proc) kill(t *testing.T) {
	t.Helper()
	if err := p.Cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatalf("SIGKILL: %v", err)
	}
	select {
	case <-p.Exited:
	case <-time.After(20 * time.Second):
		t.Fatal("process still alive 20s after SIGKILL")
	}
}

// stop requires a clean exit (status 0) within 30 s of SIGTERM.
func (p *proc) stop(t *testing.T) {
	t.Helper()
	p.Stop(t, 30*time.Second)
}

var loadedRE = regexp.MustCompile(`loaded persisted state\b.*\bkeys=(\d+) expired_dropped=(\d+) duration=(\S+)`)

// loaded returns the keys and expired counts of the "loaded persisted
// state" log line.
func (p *proc) loaded(t *testing.T) (keys, expired int) {
	t.Helper()
	m := loadedRE.FindStringSubmatch(p.Logs.String())
	if m == nil {
		t.Fatalf("no 'loaded persisted state' line in the log:\n%s", p.Logs)
	}
	keys, _ = strconv.Atoi(m[1])
	expired, _ = strconv.Atoi(m[2])
	return keys, expired
}

// client is a go-redis client that never retries: a command sent to a
// killed server must fail, not be sent again to its successor.
func client(addr string, pool int) *redis.Client {
	return redis.NewClient(&redis.Options{
		Addr: addr, Protocol: 2, DisableIdentity: true, MaxRetries: -1,
		PoolSize: pool, MinIdleConns: 0, DialTimeout: 5 * time.Second,
		ReadTimeout: 15 * time.Second, WriteTimeout: 15 * time.Second,
	})
}

// infoField reads one field of INFO section.
func infoField(ctx context.Context, rdb *redis.Client, section, field string) (string, error) {
	s, err := rdb.Info(ctx, section).Result()
	if err != nil {
		return "", err
	}
	for _, line := range strings.Split(s, "\n") {
		line = strings.TrimSpace(line)
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			return v, nil
		}
	}
	return "", fmt.Errorf("INFO %s has no %s field:\n%s", section, field, s)
}
