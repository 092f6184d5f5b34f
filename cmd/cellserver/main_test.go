package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

func TestHelpListsEveryOptionWithDefault(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run([]string{"--help"}, &out, &errb); code != 0 {
		t.Fatalf("--help exit %d, stderr %q", code, errb.String())
	}
	for _, want := range []string{
		"-addr", "127.0.0.1:6379", "-maxclients", "10000", "-timeout", "-proto-max-bulk-len", "16777216",
		"-proto-max-multibulk-len", "1048576", "-client-query-buffer-limit", "67108864",
		"-databases", "16", "-shards", "256", "-requirepass", "-shutdown-timeout", "10s", "-version",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("--help output lacks %q:\n%s", want, out.String())
		}
	}
}

func TestVersion(t *testing.T) {
	var out bytes.Buffer
	if code := run([]string{"--version"}, &out, io.Discard); code != 0 {
		t.Fatalf("exit %d", code)
	}
	if got := out.String(); got != "cellserver "+version+"\n" {
		t.Fatalf("got %q", got)
	}
}

func TestInvalidConfigReportsEveryProblem(t *testing.T) {
	var errb bytes.Buffer
	code := run([]string{"--addr", "nonsense", "--maxclients", "-1", "--databases", "-3", "--proto-max-bulk-len", "-5"}, io.Discard, &errb)
	if code == 0 {
		t.Fatal("invalid configuration exited 0")
	}
	for _, want := range []string{"addr", "MaxClients", "databases", "MaxBulkLen"} {
		if !strings.Contains(errb.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, errb.String())
		}
	}
	if code := run([]string{"--no-such-flag"}, io.Discard, io.Discard); code != 2 {
		t.Errorf("unknown flag: exit %d, want 2", code)
	}
	if code := run([]string{"extra"}, io.Discard, io.Discard); code != 2 {
		t.Errorf("stray argument: exit %d, want 2", code)
	}
}

// buildBinary compiles cellserver once per test run.
func buildBinary(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "cellserver")
	cmd := exec.Command("go", "build", "-o", bin, ".")
	cmd.Stderr = os.Stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("build: %v", err)
	}
	return bin
}

var addrRE = regexp.MustCompile(`addr=(127\.0\.0\.1:\d+)`)

// startBinary runs the real binary on a free loopback port and returns the
// process, its address and a channel carrying its exit error.
func startBinary(t *testing.T, bin string, args ...string) (*exec.Cmd, string, <-chan error, *bytes.Buffer) {
	t.Helper()
	cmd := exec.Command(bin, append([]string{"--addr", "127.0.0.1:0"}, args...)...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	addrc := make(chan string, 1)
	exited := make(chan error, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		sent := false
		for sc.Scan() {
			logs.WriteString(sc.Text() + "\n")
			if m := addrRE.FindStringSubmatch(sc.Text()); m != nil && !sent {
				addrc <- m[1]
				sent = true
			}
		}
		exited <- cmd.Wait()
	}()
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	select {
	case addr := <-addrc:
		return cmd, addr, exited, &logs
	case err := <-exited:
		t.Fatalf("server exited before listening: %v\n%s", err, logs.String())
	case <-time.After(20 * time.Second):
		t.Fatal("server did not report its address")
	}
	return nil, "", nil, nil
}

// TestGracefulShutdownOfRealBinary: with clients connected (one idle, one
// in the middle of a pipeline), SIGTERM lets the pipeline's replies arrive,
// closes every connection and exits 0.
func TestGracefulShutdownOfRealBinary(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin := buildBinary(t)
	cmd, addr, exited, logs := startBinary(t, bin)

	idle, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer idle.Close()

	rdb := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	defer rdb.Close()
	ctx := context.Background()
	const n = 5000
	pipe := rdb.Pipeline()
	cmds := make([]*redis.Cmd, n)
	for i := range cmds {
		cmds[i] = pipe.Do(ctx, "CL.THROTTLE", "user:shutdown", 10, 1, 1)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		t.Fatalf("pipeline before shutdown: %v", err)
	}
	allowed := 0
	for _, c := range cmds {
		v, err := c.Slice()
		if err != nil || len(v) != 5 {
			t.Fatalf("reply %v, %v", v, err)
		}
		if v[0].(int64) == 0 {
			allowed++
		}
	}
	if allowed != 11 {
		t.Fatalf("allowed %d of a burst of 11", allowed)
	}

	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("exit: %v\n%s", err, logs.String())
		}
	case <-time.After(15 * time.Second):
		t.Fatalf("server did not stop within 15s\n%s", logs.String())
	}
	// The idle client sees its connection closed.
	_ = idle.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := idle.Read(make([]byte, 1)); err == nil {
		t.Fatal("idle connection still open after shutdown")
	} else if ne := (net.Error)(nil); errors.As(err, &ne) && ne.Timeout() {
		t.Fatal("idle connection not closed by shutdown")
	}
	if !strings.Contains(logs.String(), "stopped") {
		t.Errorf("no 'stopped' log line:\n%s", logs.String())
	}
}

// TestStartupLogLine: one line at startup with version, address,
// persistence mode and limits.
func TestStartupLogLine(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin := buildBinary(t)
	_, addr, _, logs := startBinary(t, bin, "--maxclients", "77")
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	if err := rdb.Ping(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	line := strings.SplitN(logs.String(), "\n", 2)[0]
	for _, want := range []string{"cellserver started", "version=", "addr=" + addr, "persistence=none", "maxclients=77"} {
		if !strings.Contains(line, want) {
			t.Errorf("startup line lacks %q: %s", want, line)
		}
	}
}
