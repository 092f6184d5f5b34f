package pebblestore

import (
	"errors"
	"fmt"
	"github.com/cellserver/cellserver/persistence"
	"io"
	"log/slog"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/vfs"
)

// walStore writes n keys in n batches (n WAL records) into a fresh store on
// a memory file system, closes it, and returns the file system and the
// path of its newest WAL with that WAL's bytes.
func walStore(t *testing.T, n int) (vfs.FS, string, []byte) {
	t.Helper()
	mem := vfs.NewMem()
	p := openT(t, "/data", Options{FS: mem})
	for i := range n {
		mustWrite(t, p, false, put(0, fmt.Sprintf("k%05d", i), strings.Repeat("v", 100)))
	}
	closeT(t, p)
	names, err := mem.List("/data")
	if err != nil {
		t.Fatal(err)
	}
	var wal string
	for _, name := range names {
		if strings.HasSuffix(name, ".log") && name > wal {
			wal = name
		}
	}
	wal = "/data/" + wal
	f, err := mem.Open(wal)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	data, err := io.ReadAll(f)
	if err != nil {
		t.Fatal(err)
	}
	return mem, wal, data
}

func writeFile(t *testing.T, fs vfs.FS, name string, data []byte) {
	t.Helper()
	f, err := fs.Create(name)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(data); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestWALDamage: 8 bytes flipped in the middle of the newest WAL make
// OpenPebble fail with ErrCorrupt, naming the file and the offset; with
// LoadDamagedWAL it opens with the keys before the damage, logs a warning
// with what is dropped and reports it in WALDamage. A torn tail (the last
// record cut, zeros after) opens without complaint.
func TestWALDamage(t *testing.T) {
	const n = 2000 // about 230 KB of WAL: 7 blocks
	t.Run("middle", func(t *testing.T) {
		mem, wal, data := walStore(t, n)
		mid := len(data) / 2
		for i := mid; i < mid+8; i++ {
			data[i] ^= 0xff
		}
		writeFile(t, mem, wal, data)
		_, err := Open("/data", Options{FS: mem, Logger: quiet})
		if !errors.Is(err, persistence.ErrCorrupt) || !strings.Contains(err.Error(), wal) || !strings.Contains(err.Error(), "offset") {
			t.Fatalf("OpenPebble with a WAL damaged in the middle: %v; want ErrCorrupt naming %s and the offset", err, wal)
		}
		t.Logf("refused: %v", err)
		var logs strings.Builder
		p, err := Open("/data", Options{FS: mem, LoadDamagedWAL: true, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
		if err != nil {
			t.Fatalf("OpenPebble with LoadDamagedWAL: %v", err)
		}
		d := p.WALDamage()
		got := len(loadAll(t, p))
		closeT(t, p)
		t.Logf("loaded %d of %d keys; %v", got, n, d)
		if !d.Damaged() || d.File != wal || d.Offset > int64(mid) || d.Offset < int64(mid)-32<<10 {
			t.Errorf("WALDamage %+v: want %s, damage at most 32 KiB before %d", d, wal, mid)
		}
		// The keys after the damage are dropped: the records counted
		// after it plus the few in the damaged block.
		if lost := int64(n - got); d.DroppedRecords == 0 || d.DroppedChanges > lost || lost-d.DroppedChanges > 400 {
			t.Errorf("loaded %d of %d keys (%d lost), WALDamage counts %d changes", got, n, lost, d.DroppedChanges)
		}
		if !strings.Contains(logs.String(), "level=WARN") || !strings.Contains(logs.String(), fmt.Sprintf("dropped_changes=%d", d.DroppedChanges)) {
			t.Errorf("no warning with the count dropped:\n%s", logs.String())
		}
		// Pebble flushed what it read and started a new WAL: the next open
		// is clean.
		q := openT(t, "/data", Options{FS: mem})
		if q.WALDamage().Damaged() || len(loadAll(t, q)) != got {
			t.Errorf("reopen: %v, %d keys; want no damage and %d keys", q.WALDamage(), len(loadAll(t, q)), got)
		}
		closeT(t, q)
	})
	t.Run("torn-tail", func(t *testing.T) {
		mem, wal, data := walStore(t, n)
		// Cut the last record in the middle, zeros after, as a crash in
		// the middle of a write leaves it (pebble preallocates the WAL).
		end := len(data)
		for end > 0 && data[end-1] == 0 {
			end--
		}
		torn := append(data[:end-50:end-50], make([]byte, 4096)...)
		writeFile(t, mem, wal, torn)
		var logs strings.Builder
		p, err := Open("/data", Options{FS: mem, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
		if err != nil {
			t.Fatalf("OpenPebble with a torn WAL tail: %v", err)
		}
		defer closeT(t, p)
		if d := p.WALDamage(); d.Damaged() {
			t.Errorf("torn tail taken for damage: %v", d)
		}
		if got := len(loadAll(t, p)); got != n-1 {
			t.Errorf("torn tail: loaded %d keys, want %d (all but the torn record)", got, n-1)
		}
		if strings.Contains(logs.String(), "level=WARN") {
			t.Errorf("warning for a torn tail:\n%s", logs.String())
		}
	})
}

// TestScanWALRandomDamage damages a WAL at random places and checks that
// scanWAL never takes a cut (a torn tail) for damage, and finds damage
// (an intact record after the point where the reader stops).
func TestScanWALRandomDamage(t *testing.T) {
	_, wal, data := walStore(t, 1000)
	num := walNum(t, wal)
	if d := scanWAL(data, num); d.DroppedRecords != 0 {
		t.Fatalf("intact WAL: %v", d)
	}
	end := len(data)
	for end > 0 && data[end-1] == 0 {
		end--
	}
	cases, found := 0, 0
	for off := 0; off < end-64; off += 997 {
		cut := append(append([]byte(nil), data[:off]...), make([]byte, 1000)...)
		if d := scanWAL(cut, num); d.DroppedRecords != 0 {
			t.Fatalf("cut at %d taken for damage: %+v", off, d)
		}
		bad := append([]byte(nil), data...)
		for i := off; i < off+8; i++ {
			bad[i] ^= 0x5a
		}
		// Damage that hits only the last record, or zeros, loses nothing
		// more than a torn tail would; elsewhere intact records follow.
		d := scanWAL(bad, num)
		if d.DroppedRecords > 0 {
			found++
		} else if off < end-2*32<<10 {
			// Before the last two blocks, whole records follow.
			t.Errorf("damage at %d not found", off)
		}
		cases += 2
	}
	t.Logf("%d cuts (none taken for damage) and damages (%d found) checked in a WAL of %d bytes", cases, found, end)
	if found == 0 {
		t.Error("no damage found")
	}
}

func walNum(t *testing.T, path string) uint32 {
	t.Helper()
	var n uint32
	base := path[strings.LastIndex(path, "/")+1:]
	if _, err := fmt.Sscanf(base, "%d.log", &n); err != nil {
		t.Fatal(err)
	}
	return n
}
