package commands_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cellserver/cellserver/commands"
	"github.com/cellserver/cellserver/internal/resptest"
	"github.com/cellserver/cellserver/keyspace"
	"github.com/cellserver/cellserver/persistence"
	"github.com/cellserver/cellserver/resp"
)

// brokenDisk is the memory store with a switch that makes every Write and
// Sync fail, as a full disk does.
type brokenDisk struct {
	*persistence.Memory
	full atomic.Bool
}

var errNoSpace = errors.New("write /data/000007.log: no space left on device")

func (d *brokenDisk) Write(ops []persistence.Op, sync bool) error {
	if d.full.Load() {
		return errNoSpace
	}
	return d.Memory.Write(ops, sync)
}

func (d *brokenDisk) Sync() error {
	if d.full.Load() {
		return errNoSpace
	}
	return d.Memory.Sync()
}

// startWithStore serves the commands layer on 127.0.0.1:0 with a
// persistence Writer (fsync always) on store, wired as server.New wires
// Pebble's.
func startWithStore(t *testing.T, store persistence.Store) (addr string, w *persistence.Writer) {
	t.Helper()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	w = persistence.NewWriter(store, persistence.FsyncAlways, log)
	ctx, cancel := context.WithCancel(context.Background())
	go w.Run(ctx)
	ks, err := keyspace.New(keyspace.Config{Journal: w})
	if err != nil {
		t.Fatal(err)
	}
	cmds, err := commands.New(commands.Config{Keyspace: ks, Logger: log, Durability: w, WriteError: w.Failing,
		PersistenceInfo: func() []string { return []string{"fsync:always"} }})
	if err != nil {
		t.Fatal(err)
	}
	rs := resp.NewServer(resp.Config{Logger: log}, cmds)
	cmds.SetNetwork(rs)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- rs.Serve(ln) }()
	t.Cleanup(func() {
		sctx, scancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer scancel()
		rs.Shutdown(sctx)
		<-done
		cancel()
		w.Close()
	})
	return ln.Addr().String(), w
}

// TestMisconfWhileTheStoreFails: while the persistence store refuses
// writes, commands flagged Write get -MISCONF (inside MULTI too, which
// aborts the transaction), reads go on, a change whose write failed is not
// acknowledged with +OK (fsync always), and once the store accepts writes
// again so does the server.
func TestMisconfWhileTheStoreFails(t *testing.T) {
	disk := &brokenDisk{Memory: persistence.NewMemory()}
	addr, w := startWithStore(t, disk)
	c := resptest.MustDial(t, addr)
	if v := c.MustDo(t, "SET", "a", "1"); v.Str != "OK" {
		t.Fatalf("SET with a working disk: %v", v)
	}

	disk.full.Store(true)
	// The first change after the disk fills: written, refused by the
	// store, so its reply must not be +OK.
	c2 := resptest.MustDial(t, addr)
	if v, err := c2.Do("SET", "b", "2"); err == nil && v.Kind != '-' {
		t.Fatalf("SET whose change the store refused got %v, want an error or a closed connection", v)
	}
	if w.Failing() == nil {
		t.Fatal("Writer.Failing() is nil after a refused write")
	}

	writes := [][]string{
		{"SET", "c", "3"}, {"DEL", "a"}, {"CL.THROTTLE", "t", "10", "1", "60"}, {"FLUSHALL"},
		{"CL.SLIDINGLOG", "l", "100000", "3600"}, {"EXPIRE", "a", "100"},
	}
	for _, cmd := range writes {
		v := c.MustDo(t, cmd...)
		if v.Kind != '-' || !strings.HasPrefix(v.Str, "MISCONF ") || !strings.Contains(v.Str, "no space left on device") {
			t.Errorf("%q while the disk is full: %v, want -MISCONF naming the error", cmd, v)
		}
	}
	for _, cmd := range [][]string{{"GET", "a"}, {"EXISTS", "a"}, {"CL.PEEK", "t", "10", "1", "60"}, {"PING"}, {"DBSIZE"}} {
		if v := c.MustDo(t, cmd...); v.Kind == '-' {
			t.Errorf("%q (no Write flag) while the disk is full: %v, want it served", cmd, v)
		}
	}
	if v := c.MustDo(t, "GET", "a"); v.Str != "1" {
		t.Errorf("GET a while the disk is full: %v, want \"1\"", v)
	}
	// A transaction: the write is refused when queued, EXEC aborts.
	c.MustDo(t, "MULTI")
	if v := c.MustDo(t, "SET", "m", "1"); !strings.HasPrefix(v.Str, "MISCONF ") {
		t.Errorf("SET inside MULTI while the disk is full: %v, want -MISCONF", v)
	}
	if v := c.MustDo(t, "EXEC"); !strings.HasPrefix(v.Str, "EXECABORT") {
		t.Errorf("EXEC after a refused SET: %v, want -EXECABORT", v)
	}
	// A transaction queued before the disk filled: EXEC is refused too.
	disk.full.Store(false)
	waitCond(t, "the failure to clear", func() bool { return w.Failing() == nil })
	c.MustDo(t, "MULTI")
	c.MustDo(t, "SET", "m", "1")
	disk.full.Store(true)
	c3 := resptest.MustDial(t, addr)
	c3.Do("SET", "x", "1") // makes the Writer see the full disk
	waitCond(t, "the failure to be reported", func() bool { return w.Failing() != nil })
	if v := c.MustDo(t, "EXEC"); !strings.Contains(v.Str, "MISCONF ") {
		t.Errorf("EXEC of a transaction holding a write while the disk is full: %v, want an error naming MISCONF", v)
	}

	disk.full.Store(false)
	waitCond(t, "the failure to clear", func() bool { return w.Failing() == nil })
	if v := c.MustDo(t, "SET", "c", "3"); v.Str != "OK" {
		t.Fatalf("SET after the disk recovered: %v", v)
	}
	if v := c.MustDo(t, "GET", "c"); v.Str != "3" {
		t.Fatalf("GET c after recovery: %v", v)
	}
	got := map[string]string{}
	disk.Load(func(db int, key, value []byte) error {
		v, err := persistence.DecodeValue(value)
		if err == nil {
			b, _ := v.Obj.([]byte)
			got[string(key)] = string(b)
		}
		return nil
	})
	if got["a"] != "1" || got["c"] != "3" {
		t.Errorf("store after recovery holds %q, want a=1 and c=3 among them", got)
	}
}

// waitCond waits until cond holds, checking every millisecond, for 20 s
// at most.
func waitCond(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 20s", what)
		}
		<-tick.C
	}
}
