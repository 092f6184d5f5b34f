package pebblestore

import (
	"bufio"
	"errors"
	"fmt"
	"github.com/cellserver/cellserver/persistence"
	"io"
	"io/fs"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/cockroachdb/pebble"
	"github.com/cockroachdb/pebble/vfs"
	"github.com/cockroachdb/pebble/vfs/errorfs"
)

// quiet discards what pebble logs where a test provokes errors on purpose.
var quiet = slog.New(slog.DiscardHandler)

func openT(t testing.TB, dir string, opts Options) *Store {
	t.Helper()
	p, err := Open(dir, opts)
	if err != nil {
		t.Fatalf("OpenPebble(%s): %v", dir, err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

func closeT(t testing.TB, s persistence.Store) {
	t.Helper()
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
}

func TestOpenLockedSameProcess(t *testing.T) {
	parent := t.TempDir()
	dir := filepath.Join(parent, "data")
	p := openT(t, dir, Options{})
	mustWrite(t, p, true, put(0, "k", "v"))

	link := filepath.Join(t.TempDir(), "link")
	if err := os.Symlink(dir, link); err != nil {
		t.Fatal(err)
	}
	t.Chdir(parent)
	// Pebble's own check compares LOCK paths as strings, and fcntl locks
	// do not exclude their own process: the symlink and the relative path
	// would get a second lock from pebble alone.
	for _, name := range []string{dir, dir + "/", dir + "/.", "data", "./data", link} {
		q, err := Open(name, Options{})
		if !errors.Is(err, persistence.ErrLocked) {
			if q != nil {
				q.Close()
			}
			t.Fatalf("second open of %q: %v, want ErrLocked", name, err)
		}
		if !strings.Contains(err.Error(), dir) {
			t.Errorf("error %q does not name %s", err, dir)
		}
	}
	// Pebble's own error, as OpenPebble maps it when its registry misses.
	if _, err := pebble.LockDirectory(dir, vfs.Default); !errors.Is(lockError(dir, err), persistence.ErrLocked) {
		t.Fatalf("pebble.LockDirectory on a locked dir: %v, mapped to %v", err, lockError(dir, err))
	}

	closeT(t, p)
	q := openT(t, link, Options{})
	checkRecords(t, q, []record{{DB: 0, Key: "k", Value: "v"}})
	closeT(t, q)
}

func TestOpenLockedMemFS(t *testing.T) {
	mem := vfs.NewMem()
	p := openT(t, "/data", Options{FS: mem})
	if _, err := Open("/data", Options{FS: mem}); !errors.Is(err, persistence.ErrLocked) {
		t.Fatalf("second open: %v, want ErrLocked", err)
	}
	closeT(t, p)
	closeT(t, openT(t, "/data", Options{FS: mem}))
}

const helperDirEnv = "CELLSERVER_PERSISTENCE_LOCK_HELPER_DIR"

// TestLockHelperProcess is not a test: TestOpenLockedOtherProcess runs the
// test binary with it to hold a directory open in another process until its
// standard input closes.
func TestLockHelperProcess(t *testing.T) {
	dir := os.Getenv(helperDirEnv)
	if dir == "" {
		t.Skip("helper process for TestOpenLockedOtherProcess")
	}
	p, err := Open(dir, Options{})
	if err != nil {
		fmt.Println("error:", err)
		os.Exit(1)
	}
	fmt.Println("locked")
	io.Copy(io.Discard, os.Stdin)
	p.Close()
	os.Exit(0)
}

func TestOpenLockedOtherProcess(t *testing.T) {
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^TestLockHelperProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), helperDirEnv+"="+dir)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Wait()
	defer stdin.Close()
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil || line != "locked\n" {
		t.Fatalf("helper said %q, %v", line, err)
	}

	_, err = Open(dir, Options{})
	if !errors.Is(err, persistence.ErrLocked) {
		t.Fatalf("open while another process holds %s: %v, want ErrLocked", dir, err)
	}
	t.Logf("open while another process holds it: %v", err)

	stdin.Close()
	if err := cmd.Wait(); err != nil {
		t.Fatalf("helper: %v", err)
	}
	closeT(t, openT(t, dir, Options{}))
}

func TestOpenNotADirectory(t *testing.T) {
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{file, filepath.Join(file, "sub")} {
		p, err := Open(dir, Options{})
		if err == nil {
			p.Close()
			t.Fatalf("OpenPebble(%s) on a regular file: no error", dir)
		}
		if !errors.Is(err, syscall.ENOTDIR) || !strings.Contains(err.Error(), file) {
			t.Errorf("OpenPebble(%s): %v, want ENOTDIR naming the path", dir, err)
		}
		if errors.Is(err, persistence.ErrLocked) || errors.Is(err, persistence.ErrCorrupt) || errors.Is(err, persistence.ErrFormat) {
			t.Errorf("OpenPebble(%s): %v is one of the sentinels", dir, err)
		}
	}
	mem := vfs.NewMem()
	f, err := mem.Create("/file")
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	if _, err := Open("/file", Options{FS: mem}); err == nil {
		t.Fatal("OpenPebble on a MemFS file: no error")
	}
	if _, err := Open("", Options{}); err == nil {
		t.Fatal("OpenPebble(\"\"): no error")
	}
}

func TestOpenPermissionDenied(t *testing.T) {
	if os.Geteuid() == 0 {
		t.Skip("root bypasses file permissions")
	}
	parent := t.TempDir()
	noAccess := filepath.Join(parent, "noaccess")
	if err := os.Mkdir(noAccess, 0o000); err != nil {
		t.Fatal(err)
	}
	readOnly := filepath.Join(parent, "readonly")
	if err := os.Mkdir(readOnly, 0o555); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Chmod(noAccess, 0o755); os.Chmod(readOnly, 0o755) })
	for _, dir := range []string{noAccess, readOnly, filepath.Join(readOnly, "sub"), filepath.Join(noAccess, "sub")} {
		p, err := Open(dir, Options{})
		if err == nil {
			p.Close()
			t.Fatalf("OpenPebble(%s): no error", dir)
		}
		t.Logf("%s: %v", filepath.Base(dir), err)
		if !errors.Is(err, fs.ErrPermission) || !strings.Contains(err.Error(), parent) {
			t.Errorf("OpenPebble(%s): %v, want a permission error naming the path", dir, err)
		}
		if errors.Is(err, persistence.ErrLocked) || errors.Is(err, persistence.ErrCorrupt) {
			t.Errorf("OpenPebble(%s): %v is ErrLocked or ErrCorrupt", dir, err)
		}
	}

	// An existing store in a directory that became read-only, and one
	// whose MANIFEST cannot be read.
	roStore, _ := populated(t)
	unreadable, _ := populated(t)
	manifest := glob1(t, unreadable, "MANIFEST-*")
	for _, f := range []struct {
		path string
		mode os.FileMode
	}{{roStore, 0o555}, {manifest, 0o000}} {
		if err := os.Chmod(f.path, f.mode); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.Chmod(f.path, 0o755) })
	}
	for _, dir := range []string{roStore, unreadable} {
		p, err := Open(dir, Options{Logger: quiet})
		if err == nil {
			p.Close()
			t.Fatalf("OpenPebble(%s): no error", dir)
		}
		t.Logf("%v", err)
		if !errors.Is(err, fs.ErrPermission) || errors.Is(err, persistence.ErrCorrupt) || errors.Is(err, persistence.ErrLocked) {
			t.Errorf("OpenPebble(%s): %v, want a permission error, not ErrCorrupt or ErrLocked", dir, err)
		}
	}
}

// populated returns a real directory holding a closed store with records,
// some in tables and some only in the WAL.
func populated(t *testing.T) (string, []record) {
	t.Helper()
	dir := t.TempDir()
	return dir, populate(t, dir, Options{})
}

func populate(t *testing.T, dir string, opts Options) []record {
	t.Helper()
	p := openT(t, dir, opts)
	m := model{}
	var ops []persistence.Op
	for i := range 500 {
		ops = append(ops, put(i%3, fmt.Sprintf("k%04d", i), strings.Repeat("v", i)))
	}
	mustWrite(t, p, true, ops...)
	m.Apply(ops)
	if err := p.db.Flush(); err != nil {
		t.Fatal(err)
	}
	ops = []persistence.Op{put(1, "wal-only", "x"), del(0, "k0000")}
	mustWrite(t, p, true, ops...)
	m.Apply(ops)
	closeT(t, p)
	return m.Records()
}

func globAll(t *testing.T, dir, pattern string) []string {
	t.Helper()
	ms, err := filepath.Glob(filepath.Join(dir, pattern))
	if err != nil {
		t.Fatal(err)
	}
	return ms
}

func glob1(t *testing.T, dir, pattern string) string {
	t.Helper()
	ms, err := filepath.Glob(filepath.Join(dir, pattern))
	if err != nil || len(ms) != 1 {
		t.Fatalf("glob %s in %s: %v %v", pattern, dir, ms, err)
	}
	return ms[0]
}

func TestOpenCorrupt(t *testing.T) {
	for _, tc := range []struct {
		name   string
		damage func(t *testing.T, dir string)
	}{
		{"GarbageManifest", func(t *testing.T, dir string) {
			m := glob1(t, dir, "MANIFEST-*")
			if err := os.WriteFile(m, []byte("this is not a pebble manifest, not at all"), 0o644); err != nil {
				t.Fatal(err)
			}
		}},
		{"EmptyManifest", func(t *testing.T, dir string) {
			if err := os.Truncate(glob1(t, dir, "MANIFEST-*"), 0); err != nil {
				t.Fatal(err)
			}
		}},
		{"ManifestMissing", func(t *testing.T, dir string) {
			if err := os.Remove(glob1(t, dir, "MANIFEST-*")); err != nil {
				t.Fatal(err)
			}
		}},
		{"MarkerMissing", func(t *testing.T, dir string) {
			if err := os.Remove(glob1(t, dir, "marker.manifest.*")); err != nil {
				t.Fatal(err)
			}
		}},
		{"MarkerMissingTablesOnly", func(t *testing.T, dir string) {
			// With every record in tables and an empty WAL, pebble alone
			// would start an empty store here.
			p := openT(t, dir, Options{})
			if err := p.Compact(); err != nil {
				t.Fatal(err)
			}
			closeT(t, p)
			for _, log := range globAll(t, dir, "*.log") {
				if err := os.Remove(log); err != nil {
					t.Fatal(err)
				}
			}
			if err := os.Remove(glob1(t, dir, "marker.manifest.*")); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir, _ := populated(t)
			tc.damage(t, dir)
			p, err := Open(dir, Options{})
			if err == nil {
				recs := loadAll(t, p)
				p.Close()
				t.Fatalf("open of a damaged store: no error, %d records", len(recs))
			}
			t.Logf("%v", err)
			if !errors.Is(err, persistence.ErrCorrupt) {
				t.Fatalf("open of a damaged store: %v, want ErrCorrupt", err)
			}
		})
	}

	t.Run("FlippedManifestBytes", func(t *testing.T) {
		// Pebble reads a MANIFEST as a log whose damaged tail is a torn
		// write, and stops there: a flipped byte gives either ErrCorrupt
		// or, if pebble can still rebuild the state, every record. Never
		// fewer records without an error.
		// On MemFS, copied fresh for each byte: a disk costs seconds here.
		tmpl := vfs.NewMem()
		want := populate(t, "/data", Options{FS: tmpl})
		manifest := func(fs vfs.FS) string {
			names, err := fs.List("/data")
			if err != nil {
				t.Fatal(err)
			}
			for _, n := range names {
				if strings.HasPrefix(n, "MANIFEST-") {
					return "/data/" + n
				}
			}
			t.Fatal("no MANIFEST")
			return ""
		}
		size := len(readMem(t, tmpl, manifest(tmpl)))
		corrupt := 0
		for i := range size {
			mem := vfs.NewMem()
			if _, err := vfs.Clone(tmpl, mem, "/data", "/data"); err != nil {
				t.Fatal(err)
			}
			m := manifest(mem)
			b := readMem(t, mem, m)
			b[i] ^= 0x55
			f, err := mem.Create(m)
			if err == nil {
				_, err = f.Write(b)
				err = errors.Join(err, f.Close())
			}
			if err != nil {
				t.Fatal(err)
			}
			p, err := Open("/data", Options{FS: mem})
			if err != nil {
				if !errors.Is(err, persistence.ErrCorrupt) {
					t.Fatalf("byte %d flipped: %v, want ErrCorrupt", i, err)
				}
				corrupt++
				continue
			}
			checkRecords(t, p, want)
			closeT(t, p)
		}
		t.Logf("flipped each of the %d bytes of the manifest: %d ErrCorrupt, %d opened whole", size, corrupt, size-corrupt)
	})

	t.Run("GarbageCURRENT", func(t *testing.T) {
		// With format-version markers pebble reads marker.manifest.* and
		// only writes CURRENT for old readers: damage there is harmless.
		dir, want := populated(t)
		if err := os.WriteFile(filepath.Join(dir, "CURRENT"), []byte("garbage\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		p := openT(t, dir, Options{})
		checkRecords(t, p, want)
	})

	t.Run("CorruptTable", func(t *testing.T) {
		dir, _ := populated(t)
		sst := glob1(t, dir, "*.sst")
		b, err := os.ReadFile(sst)
		if err != nil {
			t.Fatal(err)
		}
		for i := 100; i < len(b)/2; i += 7 {
			b[i] ^= 0xA5
		}
		if err := os.WriteFile(sst, b, 0o644); err != nil {
			t.Fatal(err)
		}
		// Pebble does not read tables when it opens; Load finds it. (A
		// compaction pebble starts may find it first, and log it.)
		p, err := Open(dir, Options{Logger: quiet})
		if err != nil {
			if !errors.Is(err, persistence.ErrCorrupt) {
				t.Fatalf("open: %v, want nil or ErrCorrupt", err)
			}
			return
		}
		defer p.Close()
		err = p.Load(func(int, []byte, []byte) error { return nil })
		t.Logf("Load: %v", err)
		if !errors.Is(err, persistence.ErrCorrupt) {
			t.Fatalf("Load of a corrupt table: %v, want ErrCorrupt", err)
		}
	})
}

func TestOpenFormat(t *testing.T) {
	mem := vfs.NewMem()
	rawSet := func(t *testing.T, dir string, kv ...[]byte) {
		t.Helper()
		db, err := pebble.Open(dir, &pebble.Options{FS: mem, FormatMajorVersion: pebble.FormatVirtualSSTables, Logger: pebbleLogger{l: quiet, in: &instance{}}})
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i < len(kv); i += 2 {
			if err := db.Set(kv[i], kv[i+1], pebble.Sync); err != nil {
				t.Fatal(err)
			}
		}
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}
	}

	t.Run("FreshGetsFormat", func(t *testing.T) {
		closeT(t, openT(t, "/fresh", Options{FS: mem}))
		db, err := pebble.Open("/fresh", &pebble.Options{FS: mem, Logger: pebbleLogger{l: quiet, in: &instance{}}})
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		v, closer, err := db.Get(metaKey)
		if err != nil {
			t.Fatalf("format record: %v", err)
		}
		defer closer.Close()
		if string(v) != string([]byte{StoreFormat}) {
			t.Fatalf("format record %x", v)
		}
		closeT(t, openT(t, "/fresh2", Options{FS: mem}))
		closeT(t, openT(t, "/fresh2", Options{FS: mem})) // and reopens
	})
	t.Run("OtherVersion", func(t *testing.T) {
		rawSet(t, "/v2", metaKey, []byte{StoreFormat + 1}, recordKey(nil, 0, []byte("k")), []byte("v"))
		_, err := Open("/v2", Options{FS: mem})
		if !errors.Is(err, persistence.ErrFormat) {
			t.Fatalf("open of format %d: %v, want ErrFormat", StoreFormat+1, err)
		}
		t.Logf("%v", err)
	})
	t.Run("NoFormatRecord", func(t *testing.T) {
		rawSet(t, "/foreign", []byte("some other program's key"), []byte("v"))
		if _, err := Open("/foreign", Options{FS: mem}); !errors.Is(err, persistence.ErrFormat) {
			t.Fatalf("open of a pebble store without a format record: %v, want ErrFormat", err)
		}
	})
	t.Run("BadFormatRecord", func(t *testing.T) {
		rawSet(t, "/bad", metaKey, []byte{StoreFormat, 0})
		if _, err := Open("/bad", Options{FS: mem}); !errors.Is(err, persistence.ErrCorrupt) {
			t.Fatalf("open with a 2-byte format record: %v, want ErrCorrupt", err)
		}
	})
	t.Run("StrayKeyInRecordSpace", func(t *testing.T) {
		rawSet(t, "/stray", metaKey, []byte{StoreFormat}, []byte{0x05}, []byte("v"))
		p := openT(t, "/stray", Options{FS: mem})
		if err := p.Load(func(int, []byte, []byte) error { return nil }); !errors.Is(err, persistence.ErrCorrupt) {
			t.Fatalf("Load of a 1-byte key: %v, want ErrCorrupt", err)
		}
	})
}

// TestPebbleCrash simulates a machine crash on a strict MemFS, which drops
// everything not synced: Sync writes and Sync survive it, NoSync writes
// alone do not.
func TestPebbleCrash(t *testing.T) {
	mem := vfs.NewStrictMem()
	p, err := Open("/data", Options{FS: mem})
	if err != nil {
		t.Fatal(err)
	}
	mustWrite(t, p, true, put(0, "synced-write", "1"))
	mustWrite(t, p, false, put(0, "then-sync", "2"), put(0, "synced-write", "3"))
	if err := p.Sync(); err != nil {
		t.Fatal(err)
	}
	mustWrite(t, p, false, put(0, "lost", "4"), put(0, "synced-write", "5"))
	mustWrite(t, p, false, delDB(0))

	mem.SetIgnoreSyncs(true) // what Close syncs now is lost too
	closeT(t, p)
	mem.ResetToSyncedState()
	mem.SetIgnoreSyncs(false)

	p = openT(t, "/data", Options{FS: mem})
	checkRecords(t, p, []record{{DB: 0, Key: "synced-write", Value: "3"}, {DB: 0, Key: "then-sync", Value: "2"}})
}

// faultFS counts and can fail the syncs of WAL files.
type faultFS struct {
	vfs.FS
	walSyncs atomic.Int64
	failWAL  atomic.Bool
}

func (f *faultFS) wrap(name string, file vfs.File, err error) (vfs.File, error) {
	if err != nil || !strings.HasSuffix(name, ".log") {
		return file, err
	}
	return &faultFile{File: file, fs: f}, nil
}

func (f *faultFS) Create(name string) (vfs.File, error) {
	file, err := f.FS.Create(name)
	return f.wrap(name, file, err)
}

func (f *faultFS) ReuseForWrite(oldname, newname string) (vfs.File, error) {
	file, err := f.FS.ReuseForWrite(oldname, newname)
	return f.wrap(newname, file, err)
}

type faultFile struct {
	vfs.File
	fs *faultFS
}

var errInjected = errors.New("injected I/O error")

func (f *faultFile) Sync() error     { return f.sync(f.File.Sync) }
func (f *faultFile) SyncData() error { return f.sync(f.File.SyncData) }
func (f *faultFile) sync(do func() error) error {
	if f.fs.failWAL.Load() {
		return errInjected
	}
	f.fs.walSyncs.Add(1)
	return do()
}

func (f *faultFile) Write(b []byte) (int, error) {
	if f.fs.failWAL.Load() {
		return 0, errInjected
	}
	return f.File.Write(b)
}

// TestPebbleSyncChoice checks that Write(ops, false) does not fsync the WAL
// and that Write(ops, true) and Sync do.
func TestPebbleSyncChoice(t *testing.T) {
	ffs := &faultFS{FS: vfs.NewMem()}
	p := openT(t, "/data", Options{FS: ffs})
	step := func(name string, f func() error, wantSync bool) {
		t.Helper()
		before := ffs.walSyncs.Load()
		if err := f(); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if synced := ffs.walSyncs.Load() > before; synced != wantSync {
			t.Errorf("%s: WAL synced %v, want %v", name, synced, wantSync)
		}
	}
	for i := range 5 {
		step("Write(nosync)", func() error { return p.Write([]persistence.Op{put(0, fmt.Sprint(i), "v")}, false) }, false)
	}
	step("Write(sync)", func() error { return p.Write([]persistence.Op{put(0, "s", "v")}, true) }, true)
	step("Write(nosync)", func() error { return p.Write([]persistence.Op{put(0, "n", "v")}, false) }, false)
	step("Sync", p.Sync, true)
	step("Write(nil, sync)", func() error { return p.Write(nil, true) }, true)
}

// TestPebbleWriteFailure checks that a WAL that cannot be written makes
// Write and Sync return errors, not stop the process (pebble calls
// Logger.Fatalf for a failed commit), that they keep failing while it
// cannot, and that they succeed again, every change kept, once it can.
func TestPebbleWriteFailure(t *testing.T) {
	mem := vfs.NewMem()
	ffs := &faultFS{FS: mem}
	p, err := Open("/data", Options{FS: ffs, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	mustWrite(t, p, true, put(0, "before", "1"))
	ffs.failWAL.Store(true)
	err = p.Write([]persistence.Op{put(0, "during", "1")}, true)
	if err == nil {
		t.Fatal("Write on a failing WAL: no error")
	}
	t.Logf("Write: %v", err)
	// A Write without sync may be buffered; the Sync must fail.
	_ = p.Write([]persistence.Op{put(0, "after", "1")}, false)
	if err2 := p.Sync(); err2 == nil {
		t.Fatal("Sync after a failure: no error")
	}
	ffs.failWAL.Store(false)
	mustWrite(t, p, true, put(0, "during", "1"), put(0, "after", "1"))
	if n, _ := p.Reopened(); n == 0 {
		t.Error("the store was not reopened after the failure")
	}
	closeT(t, p)
	q := openT(t, "/data", Options{FS: mem})
	defer closeT(t, q)
	checkRecords(t, q, []record{{DB: 0, Key: "after", Value: "1"}, {DB: 0, Key: "before", Value: "1"}, {DB: 0, Key: "during", Value: "1"}})
}

// diskFull is an errorfs injector: while full is set, file writes,
// preallocations and syncs fail with ENOSPC, as on a full file system.
type diskFull struct {
	full atomic.Bool
	hits atomic.Int64
}

func (d *diskFull) MaybeError(op errorfs.Op, path string) error {
	if !d.full.Load() {
		return nil
	}
	switch op {
	case errorfs.OpFileWrite, errorfs.OpFileWriteAt, errorfs.OpFilePreallocate, errorfs.OpFileSync:
		d.hits.Add(1)
		return &fs.PathError{Op: "write", Path: path, Err: syscall.ENOSPC}
	}
	return nil
}

// TestPebbleDiskFull fills the disk (ENOSPC on every file write) in the
// middle of a stream of writes, as the Writer makes them (fsync always:
// synced Writes; everysec: Writes, then a Sync every few; no: Writes only,
// so that the memtable fills and pebble switches to a new WAL, where
// pebble v1.1.5 panics with the error; a batch whose Write failed stays
// queued and is written again), and frees it later: no panic, errors
// while full, success at once when space is back, and every change whose
// Write returned nil there, in the store and after a reopen.
func TestPebbleDiskFull(t *testing.T) {
	for _, syncEvery := range []int{0, 1, 10, -1} { // 0: every Write synced; -1: no Sync
		t.Run(fmt.Sprintf("syncEvery=%d", syncEvery), func(t *testing.T) {
			mem := vfs.NewMem()
			disk := &diskFull{}
			p, err := Open("/data", Options{FS: errorfs.Wrap(mem, disk), Logger: quiet})
			if err != nil {
				t.Fatal(err)
			}
			want := model{}
			var queue [][]persistence.Op
			writes := 0
			// flush writes the queue, a batch at a time, syncing when sync
			// is set or after syncEvery Writes. A batch whose Write failed
			// stays queued; one whose Write returned nil is stored, synced
			// or not: the store keeps it across a replacement.
			flush := func(sync bool) error {
				for len(queue) > 0 {
					if err := p.Write(queue[0], syncEvery == 0); err != nil {
						return err
					}
					want.Apply(queue[0])
					queue = queue[1:]
					if writes++; syncEvery > 0 && writes%syncEvery == 0 {
						if err := p.Sync(); err != nil {
							return err
						}
					}
				}
				if sync {
					return p.Sync()
				}
				return nil
			}
			value := strings.Repeat("v", 4000)
			if syncEvery < 0 {
				value = strings.Repeat("v", 100<<10) // 20 MB while full: past a 16 MiB memtable
			}
			var failed int
			var enospc error
			const n = 600 // 2.4 MB, past the 1 MiB the WAL preallocates
			for i := range n {
				switch i {
				case n / 3:
					disk.full.Store(true)
				case 2 * n / 3:
					disk.full.Store(false)
				}
				queue = append(queue, []persistence.Op{put(i%3, fmt.Sprintf("k%04d", i), value), del(0, fmt.Sprintf("k%04d", i-30))})
				err := flush(false)
				switch {
				case err == nil:
				case i < n/3 || i >= 2*n/3:
					t.Fatalf("write %d with space: %v", i, err)
				default:
					failed++
					// Each failed reopening names the first failure, not
					// the previous reopening's error: the text stays short.
					if len(err.Error()) > 1000 {
						t.Fatalf("write %d: error text of %d bytes after %d failures: %.300s...", i, len(err.Error()), failed, err)
					}
					if enospc == nil && strings.Contains(err.Error(), "no space left on device") {
						enospc = err
					}
				}
			}
			if err := flush(true); err != nil {
				t.Fatal(err)
			}
			if failed == 0 || enospc == nil {
				t.Fatalf("disk full for %d writes (%d injected errors): %d failed, ENOSPC error %v", n/3, disk.hits.Load(), failed, enospc)
			}
			reopened, abandoned := p.Reopened()
			t.Logf("%d of %d writes failed while full (%d injected errors); reopened %d times (%d left open); e.g. %v",
				failed, n/3, disk.hits.Load(), reopened, abandoned, enospc)
			checkRecords(t, p, want.Records())
			closeT(t, p)
			q := openT(t, "/data", Options{FS: mem})
			defer closeT(t, q)
			checkRecords(t, q, want.Records())
		})
	}
}

// TestPebbleGuard checks that whatever a pebble call panics with (a
// string, an error, pebble's Fatalf) becomes an error, and that the next
// Write replaces the database that panicked and stores its changes.
func TestPebbleGuard(t *testing.T) {
	for _, v := range []any{"pebble: a string", syscall.ENOSPC, &fs.PathError{Op: "write", Path: "x.log", Err: syscall.ENOSPC}, pebbleFatal{"fatal"}} {
		t.Run(fmt.Sprintf("%T", v), func(t *testing.T) {
			mem := vfs.NewMem()
			p := openT(t, "/data", Options{FS: mem, Logger: quiet})
			mustWrite(t, p, false, put(0, "a", "1")) // not synced: the tail
			p.mu.RLock()
			err := p.guard(p.in, "write", func() error { panic(v) })
			p.mu.RUnlock()
			if err == nil || !strings.Contains(err.Error(), "panicked") {
				t.Fatalf("guard: %v, want a panicked error", err)
			}
			if e, ok := v.(error); ok && !errors.Is(err, e) {
				t.Errorf("guard: %v does not wrap %v", err, e)
			}
			mustWrite(t, p, false, put(0, "b", "2"))
			if r, a := p.Reopened(); r != 1 || a != 1 {
				t.Errorf("Reopened: %d, %d; want 1, 1", r, a)
			}
			closeT(t, p)
			q := openT(t, "/data", Options{FS: mem})
			defer closeT(t, q)
			checkRecords(t, q, []record{{DB: 0, Key: "a", Value: "1"}, {DB: 0, Key: "b", Value: "2"}})
		})
	}
}

// TestPebbleCompactReclaims checks DiskUsage and that Compact gives back the
// space of deleted records, db MaxDB's included.
func TestPebbleCompactReclaims(t *testing.T) {
	p := openT(t, t.TempDir(), Options{})
	empty := p.DiskUsage()
	if empty <= 0 {
		t.Fatalf("DiskUsage of an empty store: %d", empty)
	}
	rng := rand.NewChaCha8([32]byte{5, 6})
	var ops []persistence.Op
	for i := range 256 {
		v := make([]byte, 64<<10) // random: snappy cannot shrink it
		rng.Read(v)
		db := []int{0, 7, persistence.MaxDB}[i%3]
		ops = append(ops, persistence.Op{Kind: persistence.OpPut, DB: db, Key: []byte(fmt.Sprintf("k%03d", i)), Value: v})
		if len(ops) == 32 {
			mustWrite(t, p, false, ops...)
			ops = ops[:0]
		}
	}
	written := p.DiskUsage()
	if written < 16<<20 {
		t.Fatalf("DiskUsage %d after writing 16 MiB", written)
	}
	// DiskUsage counts the WAL and the files pebble deletes in the
	// background, so what Compact gives back shows in the live tables.
	tables := func() int64 {
		var n int64
		for _, l := range p.db.Metrics().Levels {
			n += l.Size
		}
		return n
	}
	if err := p.Compact(); err != nil {
		t.Fatal(err)
	}
	full := tables()
	mustWrite(t, p, false, delDB(7), delDB(persistence.MaxDB))
	if err := p.Compact(); err != nil {
		t.Fatal(err)
	}
	third := tables()
	mustWrite(t, p, false, delAll())
	if err := p.Compact(); err != nil {
		t.Fatal(err)
	}
	gone := tables()
	t.Logf("DiskUsage: empty %d, 16 MiB written %d, all deleted and compacted %d", empty, written, p.DiskUsage())
	t.Logf("tables: all %d, a third %d, none %d", full, third, gone)
	if full < 16<<20 {
		t.Errorf("tables hold %d bytes of 16 MiB", full)
	}
	if third > full/2 || third < full/5 {
		t.Errorf("tables with a third of the data: %d of %d", third, full)
	}
	if gone > 4<<10 {
		t.Errorf("tables after deleting everything and compacting: %d bytes", gone)
	}
	checkRecords(t, p, nil)
}

func benchmarkWrite(b *testing.B, sync bool, batch int) {
	p := openT(b, b.TempDir(), Options{})
	ops := make([]persistence.Op, batch)
	value := make([]byte, 64)
	for i := range ops {
		ops[i] = persistence.Op{Kind: persistence.OpPut, DB: i % 4, Value: value}
	}
	b.SetBytes(int64(batch * (len(value) + 16)))
	b.ResetTimer()
	n := 0
	for b.Loop() {
		for i := range ops {
			ops[i].Key = fmt.Appendf(ops[i].Key[:0], "key:%d", n%100000)
			n++
		}
		if err := p.Write(ops, sync); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(n), "ns/op(put)")
}

// BenchmarkWrite writes batches of 256 puts with NoSync on a real directory.
func BenchmarkWrite(b *testing.B) { benchmarkWrite(b, false, 256) }

// BenchmarkWriteSync writes batches of 256 puts with Sync on a real
// directory: one fsync per batch.
func BenchmarkWriteSync(b *testing.B) { benchmarkWrite(b, true, 256) }

// BenchmarkSync is the cost of Store.Sync after one small NoSync write.
func BenchmarkSync(b *testing.B) {
	p := openT(b, b.TempDir(), Options{})
	ops := []persistence.Op{put(0, "k", "v")}
	for b.Loop() {
		if err := p.Write(ops, false); err != nil {
			b.Fatal(err)
		}
		if err := p.Sync(); err != nil {
			b.Fatal(err)
		}
	}
}

func readMem(t *testing.T, fs vfs.FS, name string) []byte {
	t.Helper()
	f, err := fs.Open(name)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b, err := io.ReadAll(f)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func readFile(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
