package durability

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cellserver/cellserver/internal/binproc"
	"github.com/cellserver/cellserver/internal/testwait"
	"github.com/cellserver/cellserver/keyspace"
	"github.com/cellserver/cellserver/persistence"
	"github.com/cellserver/cellserver/persistence/pebblestore"
	"github.com/redis/go-redis/v9"
)

const (
	corruptBigKeys   = 300 // SET big:<i> of 100 KiB: 30 MiB, past a memtable, so tables exist
	corruptSmallKeys = 2000
)

// pristineDir builds, once per test, a data directory holding tables
// (.sst) and a WAL with records, and returns it and the number of keys it
// holds. A clean stop ends with a checkpoint and flushes pebble's memtable
// to a table, leaving its WAL empty; pebble's WAL holds records when the
// process died after checkpoints and before a flush, so the second session
// is killed once its last checkpoint is done (the change log is empty
// then: everything is in pebble).
func pristineDir(t *testing.T) (string, int) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "pristine")
	p := startServer(t, "--data-dir", dir, "--fsync", "everysec")
	ctx := context.Background()
	rdb := client(p.addr, 1)
	defer rdb.Close()
	big := strings.Repeat("x", 100<<10)
	pipe := rdb.Pipeline()
	for i := range corruptBigKeys {
		pipe.Set(ctx, fmt.Sprintf("big:%d", i), big, 0)
		if i%50 == 49 {
			if _, err := pipe.Exec(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	p.stop(t)
	// A second session writes the small keys: about 90 KB, well within
	// a memtable, so they are in the newest WAL only. A tiny
	// --checkpoint-bytes makes each batch of 100 its own checkpoint, so
	// its own WAL record.
	p = startServer(t, "--data-dir", dir, "--fsync", "everysec", "--checkpoint-bytes", "1kb")
	rdb2 := client(p.addr, 1)
	defer rdb2.Close()
	pipe = rdb2.Pipeline()
	for i := range corruptSmallKeys {
		pipe.Do(ctx, "CL.THROTTLE", fmt.Sprintf("small:%d", i), 15, 1, 3600)
		if i%100 == 99 { // many WAL records, not one big batch
			before := infoInt(t, rdb2, "checkpoints")
			if _, err := pipe.Exec(ctx); err != nil {
				t.Fatal(err)
			}
			waitWritten(t, rdb2)
			waitCheckpoint(t, rdb2, before)
		}
	}
	p.kill(t)
	return dir, corruptBigKeys + corruptSmallKeys
}

// isCurrentManifest reports whether dir's manifest marker names name.
func isCurrentManifest(t *testing.T, dir, name string) bool {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), "marker.manifest.") && strings.HasSuffix(e.Name(), "."+name) {
			return true
		}
	}
	return false
}

// waitWritten waits until the server's write-behind queue is empty (its
// changes handed to pebble), so that the next changes form another batch.
func waitWritten(t *testing.T, rdb *redis.Client) {
	t.Helper()
	testwait.For(t, 10*time.Second, "an empty write-behind queue", func() (bool, string) {
		v, err := infoField(context.Background(), rdb, "persistence", "pending_changes")
		if err != nil {
			t.Fatal(err)
		}
		return v == "0", "pending_changes:" + v
	})
}

// infoInt reads an integer field of INFO persistence.
func infoInt(t *testing.T, rdb *redis.Client, field string) int64 {
	t.Helper()
	v, err := infoField(context.Background(), rdb, "persistence", field)
	if err != nil {
		t.Fatal(err)
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		t.Fatalf("INFO persistence %s: %q: %v", field, v, err)
	}
	return n
}

// waitCheckpoint waits until INFO persistence counts more checkpoints
// than before.
func waitCheckpoint(t *testing.T, rdb *redis.Client, before int64) {
	t.Helper()
	testwait.For(t, 10*time.Second, "a checkpoint of the batch", func() (bool, string) {
		n := infoInt(t, rdb, "checkpoints")
		return n > before, fmt.Sprintf("checkpoints:%d, %d before", n, before)
	})
}

func copyDir(t *testing.T, src, dst string) {
	t.Helper()
	if err := os.MkdirAll(dst, 0o755); err != nil {
		t.Fatal(err)
	}
	ents, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if e.IsDir() {
			continue
		}
		in, err := os.Open(filepath.Join(src, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		out, err := os.Create(filepath.Join(dst, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.Copy(out, in); err != nil {
			t.Fatal(err)
		}
		in.Close()
		if err := out.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

// pick returns the files of dir whose names satisfy ok, largest first.
func pick(t *testing.T, dir string, ok func(name string) bool) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	type f struct {
		name string
		size int64
	}
	var fs []f
	for _, e := range ents {
		if fi, err := e.Info(); err == nil && !e.IsDir() && ok(e.Name()) {
			fs = append(fs, f{e.Name(), fi.Size()})
		}
	}
	sort.Slice(fs, func(i, j int) bool { return fs[i].size > fs[j].size })
	var names []string
	for _, x := range fs {
		names = append(names, x.name)
	}
	return names
}

// garble overwrites n bytes of file at off (from the end if off < 0) with
// random bytes; n < 0 means the whole file.
func garble(t *testing.T, file string, off int64, n int) {
	t.Helper()
	fi, err := os.Stat(file)
	if err != nil {
		t.Fatal(err)
	}
	size := fi.Size()
	if n < 0 {
		off, n = 0, int(size)
	}
	if off < 0 {
		off += size
	}
	if off < 0 || off+int64(n) > size {
		t.Fatalf("garble %s: %d bytes at %d outside its %d bytes", file, n, off, size)
	}
	b := make([]byte, n)
	r := rand.New(rand.NewPCG(uint64(size), uint64(off)))
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	f, err := os.OpenFile(file, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(b, off); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestCorruptDataDir: damage in the data directory makes the restart fail
// with a clear error and a non-zero exit; it never starts with an empty or
// partial keyspace.
func TestCorruptDataDir(t *testing.T) {
	binproc.Binary(t)
	pristine, nkeys := pristineDir(t)
	var files []string
	for _, n := range pick(t, pristine, func(string) bool { return true }) {
		fi, _ := os.Stat(filepath.Join(pristine, n))
		files = append(files, fmt.Sprintf("%s (%d)", n, fi.Size()))
	}
	t.Logf("pristine directory: %d keys; files %s", nkeys, strings.Join(files, ", "))
	if len(pick(t, pristine, func(n string) bool { return strings.HasSuffix(n, ".sst") })) == 0 {
		t.Fatal("the pristine directory has no table file")
	}
	// The pristine copy itself loads every key.
	{
		dir := filepath.Join(t.TempDir(), "intact")
		copyDir(t, pristine, dir)
		p := startServer(t, "--data-dir", dir)
		if keys, _ := p.loaded(t); keys != nkeys {
			rdb := client(p.addr, 1)
			var missing []string
			for i := range corruptBigKeys {
				if n, _ := rdb.Exists(context.Background(), fmt.Sprintf("big:%d", i)).Result(); n == 0 {
					missing = append(missing, fmt.Sprintf("big:%d", i))
				}
			}
			for i := range corruptSmallKeys {
				if n, _ := rdb.Exists(context.Background(), fmt.Sprintf("small:%d", i)).Result(); n == 0 {
					missing = append(missing, fmt.Sprintf("small:%d", i))
				}
			}
			rdb.Close()
			t.Fatalf("intact copy of the pristine directory: loaded %d keys, want %d; missing %v\n%s", keys, nkeys, missing, p.Logs)
		}
		p.stop(t)
	}

	// A directory whose every record is in pebble's WAL: a first session
	// of a few thousand keys, each batch its own checkpoint, killed after
	// the last one (see pristineDir).
	walOnly := filepath.Join(t.TempDir(), "walonly")
	{
		p := startServer(t, "--data-dir", walOnly, "--checkpoint-bytes", "1kb")
		rdb := client(p.addr, 1)
		pipe := rdb.Pipeline()
		for i := range corruptSmallKeys {
			pipe.Do(context.Background(), "CL.THROTTLE", fmt.Sprintf("small:%d", i), 15, 1, 3600)
			if i%100 == 99 { // many WAL records
				before := infoInt(t, rdb, "checkpoints")
				if _, err := pipe.Exec(context.Background()); err != nil {
					t.Fatal(err)
				}
				waitWritten(t, rdb)
				waitCheckpoint(t, rdb, before)
			}
		}
		rdb.Close()
		p.kill(t)
	}

	isSST := func(n string) bool { return strings.HasSuffix(n, ".sst") }
	isWAL := func(n string) bool { return strings.HasSuffix(n, ".log") }
	// The manifest in use is the one the marker names; older ones may
	// still be around.
	isManifest := func(n string) bool { return strings.HasPrefix(n, "MANIFEST-") && isCurrentManifest(t, pristine, n) }
	isOptions := func(n string) bool { return strings.HasPrefix(n, "OPTIONS-") }
	cases := []struct {
		name string
		src  string // the directory copied; pristine if empty
		// damage damages dir (a copy of pristine)
		damage func(t *testing.T, dir string)
		// want are substrings the error must contain (any of them)
		want []string
	}{
		{"manifest-garbage", "", func(t *testing.T, dir string) {
			garble(t, filepath.Join(dir, pick(t, dir, isManifest)[0]), 0, -1)
		}, []string{"corrupt"}},
		{"manifest-empty", "", func(t *testing.T, dir string) {
			if err := os.Truncate(filepath.Join(dir, pick(t, dir, isManifest)[0]), 0); err != nil {
				t.Fatal(err)
			}
		}, []string{"corrupt"}},
		{"manifest-missing", "", func(t *testing.T, dir string) {
			if err := os.Remove(filepath.Join(dir, pick(t, dir, isManifest)[0])); err != nil {
				t.Fatal(err)
			}
		}, []string{"corrupt"}},
		{"table-middle-garbage", "", func(t *testing.T, dir string) {
			f := filepath.Join(dir, pick(t, dir, isSST)[0])
			fi, _ := os.Stat(f)
			garble(t, f, fi.Size()/2, 4096)
		}, []string{"corrupt", "checksum"}},
		{"table-footer-garbage", "", func(t *testing.T, dir string) {
			garble(t, filepath.Join(dir, pick(t, dir, isSST)[0]), -64, 64)
		}, []string{"corrupt", "table"}},
		{"table-missing", "", func(t *testing.T, dir string) {
			if err := os.Remove(filepath.Join(dir, pick(t, dir, isSST)[0])); err != nil {
				t.Fatal(err)
			}
		}, []string{"no such file", "missing", "corrupt"}},
		{"options-garbage", "", func(t *testing.T, dir string) {
			garble(t, filepath.Join(dir, pick(t, dir, isOptions)[0]), 0, -1)
		}, []string{"OPTIONS", "option", "corrupt"}},
		{"wal-middle-garbage", "", func(t *testing.T, dir string) {
			// The newest WAL holds the records not yet in a table: the
			// small keys, written last (about 90 KB). Older WAL files
			// are obsolete, kept by pebble for reuse.
			wals := pick(t, dir, isWAL)
			if len(wals) == 0 {
				t.Fatal("no WAL file")
			}
			sort.Strings(wals)
			f := filepath.Join(dir, wals[len(wals)-1])
			garble(t, f, 32<<10, 4096)
		}, []string{"corrupt", "WAL", "log"}},
		{name: "wal-only-dir-first-block-garbage", src: walOnly, damage: func(t *testing.T, dir string) {
			wals := pick(t, dir, isWAL)
			sort.Strings(wals)
			garble(t, filepath.Join(dir, wals[len(wals)-1]), 0, 512)
		}, want: []string{"corrupt", "WAL", "log"}},
		{"record-bad-value", "", func(t *testing.T, dir string) {
			writeRecord(t, dir, 0, "small:7", []byte{1, 99, 0, 0})
		}, []string{`"small:7"`, "corrupt"}},
		{"record-unknown-value-format", "", func(t *testing.T, dir string) {
			v := persistence.EncodeValue(nil, keyspace.Value{Kind: keyspace.KindGCRA, N: 1})
			v[0] = 200
			writeRecord(t, dir, 0, "small:8", v)
		}, []string{"format"}},
		{"record-database-out-of-range", "", func(t *testing.T, dir string) {
			writeRecord(t, dir, 40, "x", persistence.EncodeValue(nil, keyspace.Value{Kind: keyspace.KindGCRA, N: 1}))
		}, []string{"database 40", "--databases"}},
	}
	// Pebble v1.1.5 reads an invalid chunk in the newest WAL as the end
	// of the log, as after a torn write at a crash; cellserver checks the
	// WAL before pebble opens it and refuses damage that intact records
	// follow (the wal- cases).
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "data")
			src, keys := pristine, nkeys
			if c.src != "" {
				src, keys = c.src, corruptSmallKeys
			}
			copyDir(t, src, dir)
			c.damage(t, dir)
			code, out := runToExit(t, "--data-dir", dir)
			if code == 0 || strings.Contains(out, "cellserver started") {
				m := loadedRE.FindStringSubmatch(out)
				loaded := "?"
				if m != nil {
					loaded = m[1]
				}
				why := ""
				if strings.HasPrefix(c.name, "wal-") {
					// Pebble v1 ends the replay of the newest WAL at the first
					// invalid chunk, as it would at a torn write, even when
					// valid records follow: they are dropped without an error.
					why = " (the WAL records after the damaged one were dropped silently: pebble treats an invalid chunk in the newest WAL as its end)"
				}
				t.Fatalf("damaged directory accepted: exit %d, loaded %s of %d keys%s; log:\n%s", code, loaded, keys, why, out)
			}
			msg := lastLine(out)
			for _, line := range strings.Split(out, "\n") {
				if strings.Contains(line, "cannot start") {
					msg = line
				}
			}
			ok := false
			for _, w := range c.want {
				ok = ok || strings.Contains(strings.ToLower(msg), strings.ToLower(w))
			}
			if !ok || !strings.Contains(msg, "cannot start") {
				t.Errorf("exit %d; the error does not say what is wrong (want one of %q):\n%s", code, c.want, out)
			}
			t.Logf("exit %d: %s", code, msg)
		})
	}
}

// writeRecord stores one raw record in dir with the pebble store,
// bypassing the server.
func writeRecord(t *testing.T, dir string, db int, key string, value []byte) {
	t.Helper()
	st, err := pebblestore.Open(dir, pebblestore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Write([]persistence.Op{{Kind: persistence.OpPut, DB: db, Key: []byte(key), Value: value}}, true); err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestUnreadableDataDir: a data directory the server cannot read makes it
// exit non-zero with the path in the error.
func TestUnreadableDataDir(t *testing.T) {
	binproc.Binary(t)
	if os.Geteuid() == 0 {
		t.Skip("root reads every directory")
	}
	dir := filepath.Join(t.TempDir(), "data")
	p := startServer(t, "--data-dir", dir)
	p.stop(t)
	if err := os.Chmod(dir, 0); err != nil {
		t.Fatal(err)
	}
	defer os.Chmod(dir, 0o755)
	code, out := runToExit(t, "--data-dir", dir)
	if code == 0 || !strings.Contains(out, "permission denied") || !strings.Contains(out, dir) {
		t.Fatalf("unreadable directory: exit %d, want non-zero with %q and the path:\n%s", code, "permission denied", out)
	}
	t.Logf("exit %d: %s", code, lastLine(out))
}

// TestLoadDamagedWAL: with --load-damaged-wal yes, a directory whose newest
// WAL is damaged in the middle starts with the keys before the damage; the
// log has a WARN with what was dropped, and INFO persistence counts it.
// The next start is clean.
func TestLoadDamagedWAL(t *testing.T) {
	binproc.Binary(t)
	pristine, nkeys := pristineDir(t)
	dir := filepath.Join(t.TempDir(), "data")
	copyDir(t, pristine, dir)
	wals := pick(t, dir, func(n string) bool { return strings.HasSuffix(n, ".log") })
	sort.Strings(wals)
	wal := filepath.Join(dir, wals[len(wals)-1])
	garble(t, wal, 32<<10, 8)
	code, out := runToExit(t, "--data-dir", dir)
	if code <= 0 || !strings.Contains(out, wal) || !strings.Contains(out, "--load-damaged-wal yes") {
		t.Fatalf("damaged WAL without the option: exit %d, want an error naming %s and the option:\n%s", code, wal, out)
	}
	t.Logf("without the option: exit %d: %s", code, lastLine(out))

	p := startServer(t, "--data-dir", dir, "--load-damaged-wal", "yes")
	keys, _ := p.loaded(t)
	warn := ""
	for _, line := range strings.Split(p.Logs.String(), "\n") {
		if strings.Contains(line, "level=WARN") && strings.Contains(line, "damaged WAL") {
			warn = line
		}
	}
	m := regexp.MustCompile(`dropped_changes=(\d+)`).FindStringSubmatch(warn)
	if m == nil {
		t.Fatalf("no WARN line with dropped_changes:\n%s", p.Logs)
	}
	rdb := client(p.addr, 1)
	ctx := context.Background()
	info := map[string]string{}
	for _, f := range []string{"loaded_damaged_wal", "damaged_wal_dropped_changes", "damaged_wal_dropped_records", "damaged_wal_dropped_bytes"} {
		v, err := infoField(ctx, rdb, "persistence", f)
		if err != nil {
			t.Fatal(err)
		}
		info[f] = v
	}
	rdb.Close()
	t.Logf("loaded %d of %d keys; %s; INFO %v", keys, nkeys, warn, info)
	dropped, _ := strconv.Atoi(m[1])
	if keys >= nkeys || dropped == 0 || keys+dropped > nkeys || info["loaded_damaged_wal"] != "1" || info["damaged_wal_dropped_changes"] != m[1] {
		t.Errorf("loaded %d of %d keys, %d changes said dropped; INFO %v", keys, nkeys, dropped, info)
	}
	p.stop(t)

	p = startServer(t, "--data-dir", dir)
	if k, _ := p.loaded(t); k != keys {
		t.Errorf("next start: %d keys, want %d", k, keys)
	}
	p.stop(t)
}

// TestLoadDamagedChangeLog: the changes since the last checkpoint are in
// the change log. A segment damaged in the middle (intact records after
// the damage) is refused, naming the file and --load-damaged-wal; with
// the option the server starts with the changes before the damage, says
// what it dropped in a WARN line and INFO persistence, and the next start
// is clean.
func TestLoadDamagedChangeLog(t *testing.T) {
	binproc.Binary(t)
	const nkeys = 3000
	dir := filepath.Join(t.TempDir(), "data")
	p := startServer(t, "--data-dir", dir, "--fsync", "always")
	rdb := client(p.addr, 1)
	ctx := context.Background()
	pipe := rdb.Pipeline()
	for i := range nkeys {
		pipe.Do(ctx, "CL.THROTTLE", fmt.Sprintf("k:%d", i), 15, 1, 3600)
		if i%100 == 99 {
			if _, err := pipe.Exec(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	rdb.Close()
	p.kill(t) // no final checkpoint: every change is in the log only
	logDir := filepath.Join(dir, "changelog")
	segs := pick(t, logDir, func(n string) bool { return strings.HasSuffix(n, ".clog") })
	if len(segs) != 1 {
		t.Fatalf("change log segments after the kill: %v, want one", segs)
	}
	seg := filepath.Join(logDir, segs[0])
	fi, err := os.Stat(seg)
	if err != nil {
		t.Fatal(err)
	}
	garble(t, seg, fi.Size()/2, 8)
	code, out := runToExit(t, "--data-dir", dir)
	if code <= 0 || !strings.Contains(out, seg) || !strings.Contains(out, "--load-damaged-wal yes") {
		t.Fatalf("damaged change log without the option: exit %d, want an error naming %s and the option:\n%s", code, seg, out)
	}
	t.Logf("without the option: exit %d: %s", code, lastLine(out))

	p = startServer(t, "--data-dir", dir, "--load-damaged-wal", "yes")
	keys, _ := p.loaded(t)
	warn := ""
	for _, line := range strings.Split(p.Logs.String(), "\n") {
		if strings.Contains(line, "level=WARN") && strings.Contains(line, "damaged change log") {
			warn = line
		}
	}
	rdb = client(p.addr, 1)
	info := map[string]string{}
	for _, f := range []string{"loaded_damaged_wal", "damaged_wal_dropped_changes", "damaged_wal_dropped_records"} {
		v, err := infoField(ctx, rdb, "persistence", f)
		if err != nil {
			t.Fatal(err)
		}
		info[f] = v
	}
	rdb.Close()
	dropped, _ := strconv.Atoi(info["damaged_wal_dropped_changes"])
	t.Logf("loaded %d of %d keys; %s; INFO %v", keys, nkeys, warn, info)
	if warn == "" || keys == 0 || keys >= nkeys || dropped == 0 || keys+dropped > nkeys || info["loaded_damaged_wal"] != "1" {
		t.Errorf("loaded %d of %d keys, %d changes said dropped, INFO %v, WARN %q", keys, nkeys, dropped, info, warn)
	}
	p.stop(t)

	p = startServer(t, "--data-dir", dir)
	if k, _ := p.loaded(t); k != keys {
		t.Errorf("next start: %d keys, want %d", k, keys)
	}
	p.stop(t)
}
