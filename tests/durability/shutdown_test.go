package durability

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cellserver/cellserver/internal/testwait"
	"github.com/redis/go-redis/v9"
)

// redisCLI runs the real redis-cli against addr and returns its exit
// status and output.
func redisCLI(t *testing.T, addr string, args ...string) (int, string) {
	t.Helper()
	cli, err := exec.LookPath("redis-cli")
	if err != nil {
		t.Skip("redis-cli not installed")
	}
	host, port, _ := strings.Cut(addr, ":")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, cli, append([]string{"-h", host, "-p", port}, args...)...).CombinedOutput()
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.ExitCode(), string(out)
	} else if err != nil {
		t.Fatalf("redis-cli: %v", err)
	}
	return 0, string(out)
}

// waitExit requires the process to exit with status 0 within 30 s.
func (p *proc) waitExit(t *testing.T, why string) {
	t.Helper()
	select {
	case <-p.Exited:
		if p.Err != nil {
			t.Fatalf("cellserver exit after %s: %v\n%s", why, p.Err, p.Logs)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("cellserver still running 30s after %s\n%s", why, p.Logs)
	}
}

// replicaOnline waits until the primary counts one online replica.
func replicaOnline(t *testing.T, primary *redis.Client) {
	t.Helper()
	testwait.For(t, 20*time.Second, "replica online", func() (bool, string) {
		v, err := infoField(context.Background(), primary, "replication", "connected_slaves")
		return err == nil && v == "1", fmt.Sprint(v, err)
	})
}

// TestShutdownCommand: redis-cli SHUTDOWN stops a primary with a replica
// cleanly: exit status 0, its acknowledged writes on disk (a restart reads
// them all) and on the replica (read at once: SHUTDOWN waited for the
// replica to acknowledge them), and redis-cli sees the connection close
// without a reply, as with Redis.
func TestShutdownCommand(t *testing.T) {
	ctx := context.Background()
	dirP, dirR := t.TempDir(), t.TempDir()
	p := startServer(t, "--data-dir", dirP)
	rdb := client(p.addr, 4)
	defer rdb.Close()
	r := startServer(t, "--data-dir", dirR, "--replicaof", strings.Replace(p.addr, ":", " ", 1))
	rr := client(r.addr, 2)
	defer rr.Close()
	replicaOnline(t, rdb)

	const n = 2000
	pipe := rdb.Pipeline()
	for i := range n {
		pipe.Set(ctx, fmt.Sprintf("k:%d", i), i, 0)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		t.Fatal(err)
	}
	code, out := redisCLI(t, p.addr, "SHUTDOWN")
	if code != 0 || strings.TrimSpace(out) != "" {
		t.Fatalf("redis-cli SHUTDOWN: status %d, output %q (want 0 and nothing: the connection closes without a reply)", code, out)
	}
	p.waitExit(t, "SHUTDOWN")
	logs := p.Logs.String()
	for _, want := range []string{"User requested shutdown", "Saving the final checkpoint", "in_sync=1 replicas=1", "stopped"} {
		if !strings.Contains(logs, want) {
			t.Errorf("log lacks %q:\n%s", want, logs)
		}
	}
	// The replica has them all now: the primary waited for its ack.
	if got, err := rr.Get(ctx, fmt.Sprintf("k:%d", n-1)).Result(); err != nil || got != fmt.Sprint(n-1) {
		t.Fatalf("replica: k:%d = %q, %v right after the primary's SHUTDOWN", n-1, got, err)
	}
	if got, err := rr.DBSize(ctx).Result(); err != nil || got != n {
		t.Fatalf("replica DBSIZE %d, %v; want %d", got, err, n)
	}
	// The final checkpoint took the log: a restart reads Pebble only.
	if segs, _ := filepath.Glob(filepath.Join(dirP, "changelog", "*.clog")); len(segs) != 0 {
		t.Errorf("change log segments left after SHUTDOWN: %v", segs)
	}
	p2 := startServer(t, "--data-dir", dirP)
	rdb2 := client(p2.addr, 1)
	defer rdb2.Close()
	for i := range n {
		if got, err := rdb2.Get(ctx, fmt.Sprintf("k:%d", i)).Result(); err != nil || got != fmt.Sprint(i) {
			t.Fatalf("after restart: k:%d = %q, %v", i, got, err)
		}
	}
	p2.stop(t)
}

// TestShutdownAbortAndNow: a SHUTDOWN waiting for a replica that does not
// answer (stopped with SIGSTOP) is cancelled by SHUTDOWN ABORT (the
// waiting client gets Redis's error, the server keeps serving); SHUTDOWN
// NOW does not wait; SHUTDOWN NOSAVE keeps the change log, which the
// next start replays.
func TestShutdownAbortAndNow(t *testing.T) {
	ctx := context.Background()
	dirP := t.TempDir()
	p := startServer(t, "--data-dir", dirP, "--shutdown-timeout", "60s")
	rdb := client(p.addr, 4)
	defer rdb.Close()
	r := startServer(t, "--replicaof", strings.Replace(p.addr, ":", " ", 1))
	replicaOnline(t, rdb)
	if err := r.Cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	defer r.Cmd.Process.Signal(syscall.SIGCONT)
	if err := rdb.Set(ctx, "a", "1", 0).Err(); err != nil {
		t.Fatal(err)
	}
	res := make(chan error, 1)
	go func() { res <- rdb.Do(ctx, "SHUTDOWN").Err() }()
	testwait.Until(t, 20*time.Second, "SHUTDOWN waiting for the replica", func() bool {
		return strings.Contains(p.Logs.String(), "Waiting for replicas before shutting down")
	})
	if got, err := rdb.Do(ctx, "SHUTDOWN", "ABORT").Result(); err != nil || got != "OK" {
		t.Fatalf("SHUTDOWN ABORT: %v, %v", got, err)
	}
	select {
	case err := <-res:
		if err == nil || err.Error() != "ERR Errors trying to SHUTDOWN. Check logs." {
			t.Fatalf("the aborted SHUTDOWN got %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the aborted SHUTDOWN got no reply")
	}
	if err := rdb.Set(ctx, "b", "2", 0).Err(); err != nil {
		t.Fatalf("serving after the abort: %v", err)
	}
	if err := rdb.Do(ctx, "SHUTDOWN", "ABORT").Err(); err == nil || err.Error() != "ERR No shutdown in progress." {
		t.Fatalf("second SHUTDOWN ABORT: %v", err)
	}
	// NOW: the stopped replica is not waited for; NOSAVE: no last
	// checkpoint, the synced log stays.
	start := time.Now()
	code, out := redisCLI(t, p.addr, "SHUTDOWN", "NOW", "NOSAVE")
	if code != 0 || strings.TrimSpace(out) != "" {
		t.Fatalf("redis-cli SHUTDOWN NOW NOSAVE: status %d, output %q", code, out)
	}
	p.waitExit(t, "SHUTDOWN NOW NOSAVE")
	if d := time.Since(start); d > 30*time.Second {
		t.Fatalf("SHUTDOWN NOW took %v", d)
	}
	if strings.Contains(p.Logs.String(), "Saving the final checkpoint") {
		t.Errorf("NOSAVE made a checkpoint:\n%s", p.Logs)
	}
	if segs, _ := filepath.Glob(filepath.Join(dirP, "changelog", "*.clog")); len(segs) == 0 {
		t.Errorf("NOSAVE: no change log segment left (the last checkpoint ran)")
	}
	p2 := startServer(t, "--data-dir", dirP)
	rdb2 := client(p2.addr, 1)
	defer rdb2.Close()
	for k, v := range map[string]string{"a": "1", "b": "2"} {
		if got, err := rdb2.Get(ctx, k).Result(); err != nil || got != v {
			t.Fatalf("after restart: %s = %q, %v", k, got, err)
		}
	}
	p2.stop(t)
}

// TestSaveAndShutdownSave: SAVE and BGSAVE write checkpoints (LASTSAVE
// moves, INFO counts them); without a data directory SHUTDOWN SAVE fails
// and the server keeps serving, and SHUTDOWN SAVE FORCE stops it.
func TestSaveAndShutdownSave(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	p := startServer(t, "--data-dir", dir)
	rdb := client(p.addr, 2)
	defer rdb.Close()
	first, err := rdb.LastSave(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	before := infoInt(t, rdb, "checkpoints")
	if err := rdb.Set(ctx, "x", "1", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if got, err := rdb.Save(ctx).Result(); err != nil || got != "OK" {
		t.Fatalf("SAVE: %v, %v", got, err)
	}
	if got := infoInt(t, rdb, "checkpoints"); got != before+1 {
		t.Fatalf("checkpoints %d after SAVE, want %d", got, before+1)
	}
	if last, err := rdb.LastSave(ctx).Result(); err != nil || last < first || last < time.Now().Unix()-5 {
		t.Fatalf("LASTSAVE %d, %v after SAVE (first %d)", last, err, first)
	}
	if segs, _ := filepath.Glob(filepath.Join(dir, "changelog", "*.clog")); len(segs) != 1 {
		t.Errorf("after SAVE: segments %v, want the current one only", segs)
	}
	if err := rdb.Set(ctx, "y", "1", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if got, err := rdb.BgSave(ctx).Result(); err != nil || got != "Background saving started" {
		t.Fatalf("BGSAVE: %v, %v", got, err)
	}
	waitCheckpoint(t, rdb, before+1)
	p.stop(t)

	q := startServer(t)
	rq := client(q.addr, 2)
	defer rq.Close()
	if err := rq.Do(ctx, "SHUTDOWN", "SAVE").Err(); err == nil || err.Error() != "ERR Errors trying to SHUTDOWN. Check logs." {
		t.Fatalf("SHUTDOWN SAVE without a data directory: %v", err)
	}
	if err := rq.Ping(ctx).Err(); err != nil {
		t.Fatalf("not serving after a failed SHUTDOWN: %v", err)
	}
	code, out := redisCLI(t, q.addr, "SHUTDOWN", "SAVE", "FORCE")
	if code != 0 || strings.TrimSpace(out) != "" {
		t.Fatalf("redis-cli SHUTDOWN SAVE FORCE: status %d, output %q", code, out)
	}
	q.waitExit(t, "SHUTDOWN SAVE FORCE")
}
