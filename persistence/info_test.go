package persistence_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cellserver/cellserver/keyspace"
	"github.com/cellserver/cellserver/persistence"
)

// fullDisk is the memory store with a switch that makes every Write and
// Sync fail.
type fullDisk struct {
	*persistence.Memory
	full atomic.Bool
}

func (d *fullDisk) Write(ops []persistence.Op, sync bool) error {
	if d.full.Load() {
		return errors.New("no space left on device")
	}
	return d.Memory.Write(ops, sync)
}

func (d *fullDisk) Sync() error {
	if d.full.Load() {
		return errors.New("no space left on device")
	}
	return d.Memory.Sync()
}

// TestInfoPersistenceShowsWriteFailure: INFO persistence says
// last_write_status:err with the store's error while writes fail, and ok
// again once a write succeeds.
func TestInfoPersistenceShowsWriteFailure(t *testing.T) {
	disk := &fullDisk{Memory: persistence.NewMemory()}
	w := persistence.NewWriter(disk, persistence.FsyncEverySec, slog.New(slog.NewTextHandler(io.Discard, nil)))
	ctx, cancel := context.WithCancel(context.Background())
	go w.Run(ctx)
	defer func() { cancel(); w.Close() }()
	info := func() []string {
		return persistence.Info("/data", w, disk, persistence.LoadStats{}, persistence.WALDamage{})
	}
	wait := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("%s: not within 20s; INFO persistence:\n%s", what, strings.Join(info(), "\n"))
			}
			<-tick.C
		}
	}
	if lines := info(); !slices.Contains(lines, "last_write_status:ok") || !slices.Contains(lines, "last_write_error:") {
		t.Fatalf("INFO persistence with a working disk:\n%s", strings.Join(lines, "\n"))
	}
	disk.full.Store(true)
	v := keyspace.Value{Kind: keyspace.KindString, Obj: []byte("v")}
	w.Put(0, []byte("k"), &v)
	wait("last_write_status:err", func() bool { return slices.Contains(info(), "last_write_status:err") })
	lines := strings.Join(info(), "\n")
	for _, want := range []string{"last_write_error:persistence: no space left on device", "failed_write_attempts:"} {
		if !strings.Contains(lines, want) {
			t.Errorf("INFO persistence while the disk is full lacks %q:\n%s", want, lines)
		}
	}
	if strings.Contains(lines, "writes_refused_since:0\n") {
		t.Errorf("writes_refused_since is 0 while writes are refused:\n%s", lines)
	}
	disk.full.Store(false)
	wait("last_write_status:ok", func() bool { return slices.Contains(info(), "last_write_status:ok") })
	if lines := info(); !slices.Contains(lines, "last_write_error:") || !slices.Contains(lines, "writes_refused_since:0") {
		t.Errorf("INFO persistence after recovery:\n%s", strings.Join(lines, "\n"))
	}
}
