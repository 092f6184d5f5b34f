package commands_test

import (
	"bytes"
	"context"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cellserver/cellserver/internal/servertest"
	"github.com/cellserver/cellserver/server"
)

// TestRedisCLIHint runs redis-cli interactively in a detached tmux pane
// against cellserver and types "CL.THROTTLE ": redis-cli 7 builds its help
// and hints from COMMAND DOCS, so a DOCS reply it cannot read shows no hint
// (or makes redis-cli assert). The pane's output is streamed through a FIFO
// (tmux pipe-pane), so the test waits on reads with a deadline, not on
// sleeps. Skipped without tmux or redis-cli.
func TestRedisCLIHint(t *testing.T) {
	tmux, err := exec.LookPath("tmux")
	if err != nil {
		t.Skip("tmux not installed")
	}
	cli, err := exec.LookPath("redis-cli")
	if err != nil {
		t.Skip("redis-cli not installed")
	}
	_, addr := servertest.Start(t, server.Config{})
	host, port, _ := net.SplitHostPort(addr)

	dir := t.TempDir()
	fifo := filepath.Join(dir, "pane")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Skipf("mkfifo: %v", err)
	}
	// O_RDWR: the open does not wait for a writer, and reads can time out.
	pane, err := os.OpenFile(fifo, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer pane.Close()

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// A tmux server of our own, its socket in dir (TMUX_TMPDIR).
	socket := "cellserver-hint-" + strconv.Itoa(os.Getpid())
	env := append(os.Environ(), "TMUX_TMPDIR="+dir, "HOME="+dir,
		"REDISCLI_HISTFILE=/dev/null", "REDISCLI_RCFILE=/dev/null")
	tm := func(args ...string) string {
		t.Helper()
		cmd := exec.CommandContext(ctx, tmux, append([]string{"-L", socket, "-f", "/dev/null"}, args...)...)
		cmd.Env = env
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("tmux %q: %v: %s", args, err, out)
		}
		return string(out)
	}
	// The shell waits for a line, so that pipe-pane is in place before
	// redis-cli writes anything.
	tm("new-session", "-d", "-s", "hint", "-x", "200", "-y", "20",
		"read _; exec "+cli+" -h "+host+" -p "+port)
	t.Cleanup(func() {
		cmd := exec.Command(tmux, "-L", socket, "kill-server")
		cmd.Env = env
		cmd.Run()
	})
	tm("pipe-pane", "-t", "hint", "-o", "cat >> "+fifo)
	tm("send-keys", "-t", "hint", "Enter")

	var out []byte
	waitFor := func(what string) {
		t.Helper()
		pane.SetReadDeadline(time.Now().Add(20 * time.Second))
		buf := make([]byte, 4096)
		for !bytes.Contains(out, []byte(what)) {
			n, err := pane.Read(buf)
			out = append(out, buf[:n]...)
			if err != nil {
				if errors.Is(err, os.ErrNoDeadline) {
					t.Skip("the FIFO does not support read deadlines")
				}
				t.Fatalf("waiting for %q in the redis-cli pane: %v; output so far: %q", what, err, out)
			}
		}
	}
	waitFor(host + ":" + port + "> ") // the prompt: help was built from COMMAND DOCS
	tm("send-keys", "-t", "hint", "-l", "CL.THROTTLE ")
	const hint = "key max_burst count period [quantity]"
	waitFor(hint)

	// The hint was written to the terminal; the pane shows it too.
	var screen string
	for i := 0; i < 100 && !strings.Contains(screen, "CL.THROTTLE "+hint); i++ {
		screen = tm("capture-pane", "-p", "-t", "hint")
	}
	if !strings.Contains(screen, "CL.THROTTLE "+hint) {
		t.Fatalf("the pane does not show the hint:\n%s", screen)
	}
	t.Logf("pane: %s", strings.TrimSpace(screen))
}
