package durability_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestDiskFullTmpfs runs the server on a 20 MB tmpfs (mounting one needs
// root; the test is skipped without) and writes past its size with
// --fsync everysec and no: the server must keep running and answering (pebble
// v1.1.5 panics when it cannot write its WAL), and once space is freed (a
// filler file removed) stop cleanly and start again from the directory.
func TestDiskFullTmpfs(t *testing.T) {
	needBinary(t)
	for _, fsync := range []string{"everysec", "no"} {
		t.Run(fsync, func(t *testing.T) { diskFullTmpfs(t, fsync) })
	}
}

func diskFullTmpfs(t *testing.T, fsync string) {
	mnt := t.TempDir()
	if err := syscall.Mount("tmpfs", mnt, "tmpfs", 0, "size=20m"); err != nil {
		t.Skipf("cannot mount a tmpfs (%v)", err)
	}
	t.Cleanup(func() { syscall.Unmount(mnt, syscall.MNT_DETACH) })
	filler := filepath.Join(mnt, "filler")
	if err := os.WriteFile(filler, make([]byte, 8<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(mnt, "data")
	p := startServer(t, "--data-dir", dir, "--fsync", fsync)
	rdb := client(p.addr, 1)
	defer rdb.Close()
	ctx := context.Background()
	// Values compressible, so that the tables stay small: the WAL alone
	// fills the disk.
	big := strings.Repeat("x", 64<<10)
	deadline := time.Now().Add(60 * time.Second)
	status := "ok"
	for i := 0; status == "ok"; i++ {
		if time.Now().After(deadline) {
			t.Fatalf("no write error after %d writes of 64 KiB on a 20 MB tmpfs", i)
		}
		if err := rdb.Set(ctx, fmt.Sprintf("big:%d", i%512), big, 0).Err(); err != nil {
			t.Logf("SET big:%d: %v", i, err) // a MISCONF-style refusal is fine
		}
		var err error
		if status, err = infoField(ctx, rdb, "persistence", "last_write_status"); err != nil {
			t.Fatalf("INFO after %d writes: %v\n%s", i, err, p.Logs)
		}
		if i%16 == 15 {
			runtime.Gosched()
		}
	}
	select {
	case <-p.Exited:
		t.Fatalf("the server exited on a full disk: %v\n%s", p.Err, p.Logs)
	default:
	}
	if err := rdb.Ping(ctx).Err(); err != nil {
		t.Fatalf("PING on a full disk: %v\n%s", err, p.Logs)
	}
	t.Logf("disk full reached; server alive")
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	// With space back, the directory must still open: a clean stop, and
	// a start that loads it. (That the changes made meanwhile are stored
	// is for the write queue; TestPebbleDiskFull checks the store.)
	p.stop(t)
	p = startServer(t, "--data-dir", dir)
	keys, _ := p.loaded(t)
	t.Logf("restart with space back: %d keys loaded", keys)
	p.stop(t)
}
