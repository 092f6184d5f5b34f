package compat

import (
	"context"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
)

// cliOutput is what redis-cli (7.0, the Debian redis-tools version) prints
// for the reply when its stdout is not a terminal: the raw format, one line
// per array element, no "(integer)" or quotes. An error prints its text
// followed by an empty line and no "(error) " prefix (that prefix only
// appears on a tty); a null bulk prints an empty line.
func (r reply) cliOutput() string {
	var b strings.Builder
	switch r.kind {
	case replyInts:
		for _, n := range r.ints {
			b.WriteString(strconv.FormatInt(n, 10) + "\n")
		}
	case replyBulks:
		for _, s := range r.strs {
			b.WriteString(s + "\n")
		}
	case replyInt:
		b.WriteString(strconv.FormatInt(r.n, 10) + "\n")
	case replyBulk, replyStatus:
		b.WriteString(r.s + "\n")
	case replyNil:
		b.WriteString("\n")
	case replyError:
		b.WriteString(r.s + "\n\n")
	}
	return b.String()
}

// TestReplayRedisCLI replays every transcript with one redis-cli process per
// command (argv, stdout and stderr captured through a pipe). A SELECT in the
// transcript becomes -n for the following commands, since each process has
// its own connection.
//
// Commands with an argument holding a NUL byte or invalid UTF-8 cannot go
// through argv and are skipped here only (the raw and go-redis replays send
// them); they are counted as skipped in the log. Such commands only ever
// expect error replies that change no state, so skipping them does not
// change what later commands see.
func TestReplayRedisCLI(t *testing.T) {
	cli, err := exec.LookPath("redis-cli")
	if err != nil {
		t.Skip("redis-cli not installed")
	}
	home := t.TempDir() // no ~/.redisclirc, no history file of the user's
	env := []string{"PATH=" + os.Getenv("PATH"), "HOME=" + home}
	forEachBlock(t, "redis-cli", func(t *testing.T, b *block) (int, int) {
		clk, addr := startServer(t)
		host, port, err := net.SplitHostPort(addr)
		if err != nil {
			t.Fatal(err)
		}
		db := "0"
		checked, skipped := 0, 0
		for _, in := range b.instants {
			clk.Set(t0.Add(in.at))
			for _, c := range in.cmds {
				if !argvSafe(c.args) {
					skipped++
					continue
				}
				argv := []string{"-h", host, "-p", port, "-n", db}
				argv = append(argv, c.args...)
				ctx, cancel := context.WithTimeout(context.Background(), ioTimeout)
				cmd := exec.CommandContext(ctx, cli, argv...)
				cmd.Env = env
				out, runErr := cmd.CombinedOutput()
				cancel()
				// The exit status is not compared: redis-cli versions differ
				// on whether an error reply makes it exit non-zero.
				if want := c.want.cliOutput(); string(out) != want {
					t.Errorf("%s: at t0+%v: redis-cli %s\n got: %q (%v)\nwant: %q", b.where(c), in.at, c, out, runErr, want)
				}
				if eqFoldASCII(c.args[0], "select") && len(c.args) == 2 && c.want.kind == replyStatus {
					db = c.args[1]
				}
				checked++
			}
		}
		return checked, skipped
	})
}
