package durability

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/cellserver/cellserver/internal/binproc"
)

// misconfPrefix is the start of the reply to a write command while the
// data directory cannot be written (commands/errors.go msgMisconf).
const misconfPrefix = "MISCONF Errors writing to the data directory (--data-dir): "

// TestDiskFullTmpfs runs the real binary on a 20 MB tmpfs (mounting one
// needs root; the test is skipped without), with --fsync everysec, no and
// always, and plays the disk-full scenario end to end:
//   - SETs of 256 KiB random values (and small ones) fill what a filler
//     file leaves free, until a write is refused with MISCONF;
//   - while the disk is full, every write command gets MISCONF (none +OK),
//     reads (GET, CL.INFO, CL.PEEK), PING and INFO are served and INFO
//     persistence shows last_write_status:err;
//   - once the filler is removed, writes are accepted again;
//   - after a SIGTERM and a restart on the same directory, every write
//     answered +OK is there with its value, and no write refused with
//     MISCONF left a trace. With fsync always a write whose batch failed
//     may get a closed connection (its outcome is unknown: absent or its
//     value), never +OK.
//
// always-kill is always with a SIGKILL while the disk is full (then the
// filler removed and a restart): what fsync always acknowledged was synced,
// so it survives without the retries that a clean stop gives.
func TestDiskFullTmpfs(t *testing.T) {
	binproc.Binary(t)
	for _, mode := range []string{"everysec", "no", "always", "always-kill"} {
		t.Run(mode, func(t *testing.T) {
			fsync, kill := strings.CutSuffix(mode, "-kill")
			diskFullTmpfs(t, fsync, kill)
		})
	}
}

// outcome is what the client saw for one write.
type outcome int

const (
	acked   outcome = iota // +OK
	refused                // -MISCONF ...
	unknown                // no reply (connection closed): stored or not
)

// fullWrite is one SET of the test: key, the seed and size of its value,
// and its outcome.
type fullWrite struct {
	key   string
	seed  int64
	size  int
	out   outcome
	phase string
}

func (w fullWrite) value() []byte {
	b := make([]byte, w.size)
	rand.New(rand.NewSource(w.seed)).Read(b)
	return b
}

func diskFullTmpfs(t *testing.T, fsync string, kill bool) {
	mnt := t.TempDir()
	if err := syscall.Mount("tmpfs", mnt, "tmpfs", 0, "size=20m"); err != nil {
		t.Skipf("cannot mount a tmpfs (%v)", err)
	}
	t.Cleanup(func() { syscall.Unmount(mnt, syscall.MNT_DETACH) })
	// A 17 MB filler, written before the server starts: it leaves less
	// than pebble's WAL preallocation (110% of the 16 MB memtable), so
	// the WAL takes the free space as it grows, and removing the filler
	// gives space back.
	filler := filepath.Join(mnt, "filler")
	if err := os.WriteFile(filler, make([]byte, 17<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(mnt, "data")
	p := startServer(t, "--data-dir", dir, "--fsync", fsync)
	rdb := client(p.addr, 1)
	defer func() { rdb.Close() }()
	ctx := context.Background()

	var writes []fullWrite
	// set sends one SET with a fresh key and records what the client saw.
	set := func(phase string) fullWrite {
		i := len(writes)
		w := fullWrite{key: fmt.Sprintf("k:%d", i), seed: int64(i) + 1, size: 256 << 10, phase: phase}
		if i%4 == 3 {
			w.size = 100
		}
		err := rdb.Set(ctx, w.key, w.value(), 0).Err()
		switch {
		case err == nil:
			w.out = acked
		case strings.HasPrefix(err.Error(), misconfPrefix):
			w.out = refused
		case fsync == "always" && isConnErr(err):
			// The change's batch failed: not acknowledged.
			w.out = unknown
		default:
			t.Fatalf("SET %s (%s): %v\n%s", w.key, phase, err, p.Logs)
		}
		writes = append(writes, w)
		return w
	}

	// A few writes on a working disk, and a limiter key to read later.
	for range 8 {
		if w := set("before"); w.out != acked {
			t.Fatalf("SET %s on a working disk: %v", w.key, w.out)
		}
	}
	if err := rdb.Do(ctx, "CL.THROTTLE", "lim", "100", "100", "3600").Err(); err != nil {
		t.Fatal(err)
	}

	// Fill: SET until one is refused with MISCONF.
	deadline := time.Now().Add(30 * time.Second)
	for {
		if time.Now().After(deadline) {
			t.Fatalf("no MISCONF after %d writes on a full 20 MB tmpfs\n%s", len(writes), p.Logs)
		}
		if w := set("filling"); w.out == refused {
			break
		}
	}
	nFill := len(writes)

	// Full: the server is alive, refuses writes, serves reads.
	select {
	case <-p.Exited:
		t.Fatalf("the server exited on a full disk: %v\n%s", p.Err, p.Logs)
	default:
	}
	if err := rdb.Ping(ctx).Err(); err != nil {
		t.Fatalf("PING on a full disk: %v", err)
	}
	status, err := infoField(ctx, rdb, "persistence", "last_write_status")
	if err != nil || status != "err" {
		t.Fatalf("INFO persistence on a full disk: last_write_status:%s (%v), want err", status, err)
	}
	for _, w := range writes[:nFill] {
		if w.out != acked {
			continue
		}
		got, err := rdb.Get(ctx, w.key).Bytes()
		if err != nil || !bytes.Equal(got, w.value()) {
			t.Fatalf("GET %s on a full disk: %d bytes, %v; want its %d acknowledged bytes", w.key, len(got), err, w.size)
		}
	}
	if err := rdb.Do(ctx, "CL.INFO", "lim").Err(); err != nil {
		t.Errorf("CL.INFO on a full disk: %v", err)
	}
	if err := rdb.Do(ctx, "CL.PEEK", "lim", "100", "100", "3600").Err(); err != nil {
		t.Errorf("CL.PEEK on a full disk: %v", err)
	}
	for _, cmd := range [][]any{{"CL.THROTTLE", "lim", "100", "100", "3600"}, {"DEL", "k:0"}, {"EXPIRE", "k:1", "100"}} {
		if err := rdb.Do(ctx, cmd...).Err(); err == nil || !strings.HasPrefix(err.Error(), misconfPrefix) {
			t.Errorf("%v on a full disk: %v, want %q...", cmd, err, misconfPrefix)
		}
	}
	for range 5 {
		set("full")
	}

	nFull := len(writes)
	if kill {
		p.kill(t)
		if err := os.Remove(filler); err != nil {
			t.Fatal(err)
		}
	} else {
		// Space back: writes are accepted again (the retries succeed).
		if err := os.Remove(filler); err != nil {
			t.Fatal(err)
		}
		deadline = time.Now().Add(20 * time.Second)
		for set("freed").out != acked {
			if time.Now().After(deadline) {
				out, _ := exec.Command("ls", "-la", dir).CombinedOutput()
				t.Fatalf("writes still refused 20s after space was freed\n%s\n%s", out, p.Logs)
			}
		}
		for range 4 {
			if w := set("after"); w.out != acked {
				t.Fatalf("SET %s after recovery: %v", w.key, w.out)
			}
		}
		if status, err := infoField(ctx, rdb, "persistence", "last_write_status"); err != nil || status != "ok" {
			t.Errorf("INFO persistence after recovery: last_write_status:%s (%v), want ok", status, err)
		}
		p.stop(t)
	}

	count := map[outcome]int{}
	for i, w := range writes {
		count[w.out]++
		if i >= nFill && i < nFull && w.out == acked {
			t.Errorf("SET %s answered +OK while the disk was full (MISCONF in force)", w.key)
		}
	}
	t.Logf("fsync %s (kill %v): %d writes: %d +OK, %d MISCONF, %d unanswered; first MISCONF at write %d",
		fsync, kill, len(writes), count[acked], count[refused], count[unknown], nFill-1)

	// Restart on the same directory: every acknowledged write is there.
	rdb.Close()
	p = startServer(t, "--data-dir", dir)
	rdb = client(p.addr, 1)
	missing, wrong := 0, 0
	for _, w := range writes {
		got, err := rdb.Get(ctx, w.key).Bytes()
		present := err == nil
		if err != nil && !errors.Is(err, redis.Nil) {
			t.Fatalf("GET %s after restart: %v", w.key, err)
		}
		switch {
		case w.out == acked && !present:
			missing++
			t.Errorf("SET %s (%s) answered +OK, missing after restart", w.key, w.phase)
		case w.out == refused && present:
			t.Errorf("SET %s (%s) refused with MISCONF, present after restart", w.key, w.phase)
		case present && !bytes.Equal(got, w.value()):
			wrong++
			t.Errorf("SET %s (%s): %d bytes after restart, not its value", w.key, w.phase, len(got))
		}
	}
	if missing+wrong > 0 {
		t.Errorf("fsync %s (kill %v): %d acknowledged writes missing, %d wrong after restart", fsync, kill, missing, wrong)
	}
	p.stop(t)
}

// isConnErr reports whether err is a lost connection rather than a reply.
func isConnErr(err error) bool {
	var re redis.Error
	return !errors.As(err, &re)
}
