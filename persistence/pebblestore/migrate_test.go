package pebblestore

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"github.com/cellserver/cellserver/persistence"
	"log/slog"
	"maps"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/cellserver/cellserver/keyslot"
	"github.com/cellserver/cellserver/keyspace"
	"github.com/cockroachdb/pebble"
	"github.com/cockroachdb/pebble/vfs"
)

// writeV1 writes a store of format 1, as cellserver wrote it before hash
// slots: the format record 0x00 = 1, then each record under the 2-byte
// big-endian database number and the key. Half the records go through a
// flush into tables, the rest stay in the WAL.
func writeV1(t testing.TB, fs vfs.FS, dir string, recs map[[2]string][]byte) {
	t.Helper()
	db, err := pebble.Open(dir, &pebble.Options{FS: fs, FormatMajorVersion: pebble.FormatVirtualSSTables, Logger: pebbleLogger{l: quiet, in: &instance{}}})
	if err != nil {
		t.Fatal(err)
	}
	b := db.NewBatch()
	if err := b.Set(metaKey, []byte{1}, nil); err != nil {
		t.Fatal(err)
	}
	i := 0
	for k, v := range recs {
		var d uint16
		fmt.Sscan(k[0], &d)
		key := binary.BigEndian.AppendUint16(nil, d)
		if err := b.Set(append(key, k[1]...), v, nil); err != nil {
			t.Fatal(err)
		}
		if i++; i == len(recs)/2 {
			if err := b.Commit(pebble.Sync); err != nil {
				t.Fatal(err)
			}
			b = db.NewBatch()
			if err := db.Flush(); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := b.Commit(pebble.Sync); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
}

func loadMap(t testing.TB, s persistence.Store) map[[2]string][]byte {
	t.Helper()
	got := map[[2]string][]byte{}
	err := s.Load(func(db int, key, value []byte) error {
		got[[2]string{fmt.Sprint(db), string(key)}] = bytes.Clone(value)
		return nil
	})
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	return got
}

// TestMigrateV1 opens directories written in format 1 with random records
// (databases 0, 1, 7 and MaxDB; empty keys, hash tags, keys whose first
// bytes look like a slot prefix of another key) and checks that every
// record survives the migration under its slot, once, and that the store
// then works as usual.
func TestMigrateV1(t *testing.T) {
	const cases = 25
	total := 0
	for c := range cases {
		r := rand.New(rand.NewPCG(uint64(c), 2))
		fs := vfs.NewMem()
		recs := map[[2]string][]byte{}
		for range r.IntN(300) {
			db := []int{0, 1, 7, persistence.MaxDB}[r.IntN(4)]
			var key []byte
			switch r.IntN(4) {
			case 0:
				key = fmt.Appendf(nil, "{u%d}:%d", r.IntN(5), r.IntN(1000))
			case 1:
				key = fmt.Appendf(nil, "k%d", r.IntN(1000))
			case 2:
				// Another key's format-2 name read as a format-1 key: the
				// in-place rewrite must not mix the two up.
				k := fmt.Appendf(nil, "k%d", r.IntN(1000))
				key = append(binary.BigEndian.AppendUint16(nil, keyslot.Of(k)), k...)
			default:
				key = []byte(strings.Repeat("x", r.IntN(3)))
			}
			recs[[2]string{fmt.Sprint(db), string(key)}] = persistence.EncodeValue(nil, keyspace.Value{Kind: keyspace.KindGCRA, N: r.Uint64()})
		}
		total += len(recs)
		writeV1(t, fs, "/d", recs)
		p := openT(t, "/d", Options{FS: fs, Logger: quiet})
		if got := loadMap(t, p); !maps.EqualFunc(got, recs, bytes.Equal) {
			t.Fatalf("case %d: after migration Load gives %d records, want %d", c, len(got), len(recs))
		}
		for k, v := range recs {
			var db int
			fmt.Sscan(k[0], &db)
			slot := keyslot.Of([]byte(k[1]))
			found := 0
			err := p.LoadSlot(db, slot, func(key, value []byte) error {
				if keyslot.Of(key) != slot {
					t.Fatalf("case %d: LoadSlot(%d, %d) gave key %q of slot %d", c, db, slot, key, keyslot.Of(key))
				}
				if string(key) == k[1] {
					found++
					if !bytes.Equal(value, v) {
						t.Fatalf("case %d: LoadSlot value of %q differs", c, key)
					}
				}
				return nil
			})
			if err != nil || found != 1 {
				t.Fatalf("case %d: LoadSlot(%d, %d) found %q %d times, err %v", c, db, slot, k[1], found, err)
			}
		}
		// The store works as usual afterwards, and is not migrated again.
		if err := p.Write([]persistence.Op{{Kind: persistence.OpPut, DB: 3, Key: []byte("new"), Value: []byte("v")}, {Kind: persistence.OpDeleteDB, DB: 7}}, true); err != nil {
			t.Fatal(err)
		}
		closeT(t, p)
		for k := range recs {
			if k[0] == "7" {
				delete(recs, k)
			}
		}
		recs[[2]string{"3", "new"}] = []byte("v")
		p = openT(t, "/d", Options{FS: fs, Logger: quiet})
		if got := loadMap(t, p); !maps.EqualFunc(got, recs, bytes.Equal) {
			t.Fatalf("case %d: after reopening Load gives %d records, want %d", c, len(got), len(recs))
		}
		closeT(t, p)
	}
	t.Logf("%d format-1 directories, %d records migrated", cases, total)
}

// TestMigrateV1Load starts on a format-1 directory the way the server
// does (OpenPebble, then Load into a keyspace) and logs the migration.
func TestMigrateV1Load(t *testing.T) {
	fs := vfs.NewMem()
	recs := map[[2]string][]byte{}
	exp := time.Now().Add(time.Hour).UnixMilli()
	for i := range 1000 {
		recs[[2]string{fmt.Sprint(i % 2), fmt.Sprintf("user:%d", i)}] = persistence.EncodeValue(nil, keyspace.Value{Kind: keyspace.KindGCRA, N: uint64(i), Exp: exp})
	}
	writeV1(t, fs, "/d", recs)
	var logged bytes.Buffer
	p := openT(t, "/d", Options{FS: fs, Logger: slog.New(slog.NewTextHandler(&logged, nil))})
	if !strings.Contains(logged.String(), "migrated the data directory to store format 2") || !strings.Contains(logged.String(), "records=1000") {
		t.Fatalf("log of the migration:\n%s", logged.String())
	}
	t.Logf("%s", logged.String())
	ks, err := keyspace.New(keyspace.Config{SlotIndex: true})
	if err != nil {
		t.Fatal(err)
	}
	st, err := persistence.Load(p, ks, time.Now().UnixMilli())
	if err != nil || st.Keys != 1000 {
		t.Fatalf("Load: %d keys, %v", st.Keys, err)
	}
	if n := ks.CountKeysInSlot(1, keyslot.Of([]byte("user:1"))); n != 1 {
		t.Fatalf("CountKeysInSlot of user:1 in db 1: %d", n)
	}
}

// TestLoadMisfiledSlot: a record under a slot that is not its key's is
// corruption, not a key to load.
func TestLoadMisfiledSlot(t *testing.T) {
	fs := vfs.NewMem()
	p := openT(t, "/d", Options{FS: fs, Logger: quiet})
	closeT(t, p)
	db, err := pebble.Open("/d", &pebble.Options{FS: fs, Logger: pebbleLogger{l: quiet, in: &instance{}}})
	if err != nil {
		t.Fatal(err)
	}
	k := recordKey(nil, 0, []byte("a"))
	k[3]++
	if err := db.Set(k, persistence.EncodeValue(nil, keyspace.Value{Kind: keyspace.KindGCRA}), pebble.Sync); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	p = openT(t, "/d", Options{FS: fs, Logger: quiet})
	err = p.Load(func(int, []byte, []byte) error { return nil })
	if !errors.Is(err, persistence.ErrCorrupt) {
		t.Fatalf("Load of a misfiled record: %v, want ErrCorrupt", err)
	}
	t.Logf("%v", err)
}

// BenchmarkMigrateV1 times OpenPebble on a format-1 directory of 1M
// records (the migration), on the real file system.
//
//	go test ./persistence -run '^$' -bench MigrateV1 -benchtime 1x
func BenchmarkMigrateV1(b *testing.B) {
	const keys = 1_000_000
	exp := time.Now().Add(time.Hour).UnixMilli()
	recs := make(map[[2]string][]byte, keys)
	for i := range keys {
		recs[[2]string{"0", fmt.Sprintf("load:key:%d", i)}] = persistence.EncodeValue(nil, keyspace.Value{Kind: keyspace.KindGCRA, N: uint64(i), Exp: exp})
	}
	for range b.N {
		b.StopTimer()
		dir := b.TempDir()
		writeV1(b, vfs.Default, dir, recs)
		b.StartTimer()
		start := time.Now()
		p, err := Open(dir, Options{Logger: quiet})
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(time.Since(start).Seconds(), "migrate-s")
		n := 0
		if err := p.Load(func(int, []byte, []byte) error { n++; return nil }); err != nil || n != keys {
			b.Fatalf("after migration: %d records, %v", n, err)
		}
		if err := p.Close(); err != nil {
			b.Fatal(err)
		}
	}
}

// TestLoadSlotProperty writes random batches (puts, deletes, FLUSHDB and
// FLUSHALL, databases 0, 1 and MaxDB, keys crowded into few slots) and
// checks that LoadSlot gives exactly the records of Load in that database
// and slot, in key order, for every slot that holds a record and a few
// that do not (among them each slot just before one that does).
func TestLoadSlotProperty(t *testing.T) {
	const cases = 20
	checked := 0
	for c := range cases {
		r := rand.New(rand.NewPCG(uint64(c), 4))
		p := openT(t, "/d", Options{FS: vfs.NewMem(), Logger: quiet})
		for range 30 {
			var ops []persistence.Op
			for range 1 + r.IntN(40) {
				db := []int{0, 1, persistence.MaxDB}[r.IntN(3)]
				key := fmt.Appendf(nil, "{t%d}:%d", r.IntN(5), r.IntN(50))
				if r.IntN(3) == 0 {
					key = fmt.Appendf(nil, "k%d", r.IntN(100))
				}
				switch x := r.IntN(100); {
				case x < 70:
					ops = append(ops, persistence.Op{Kind: persistence.OpPut, DB: db, Key: key, Value: fmt.Appendf(nil, "v%d", r.IntN(1000))})
				case x < 97:
					ops = append(ops, persistence.Op{Kind: persistence.OpDelete, DB: db, Key: key})
				case x < 99:
					ops = append(ops, persistence.Op{Kind: persistence.OpDeleteDB, DB: db})
				default:
					ops = append(ops, persistence.Op{Kind: persistence.OpDeleteAll})
				}
			}
			if err := p.Write(ops, false); err != nil {
				t.Fatal(err)
			}
		}
		type rec struct{ key, value string }
		want := map[[2]int][]rec{}
		if err := p.Load(func(db int, key, value []byte) error {
			k := [2]int{db, int(keyslot.Of(key))}
			want[k] = append(want[k], rec{string(key), string(value)})
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		probe := maps.Clone(want)
		for k := range want {
			// The slot just before one that holds records must not
			// reach into it.
			if k[1] > 0 {
				probe[[2]int{k[0], k[1] - 1}] = want[[2]int{k[0], k[1] - 1}]
			}
		}
		for _, s := range []int{0, 1, keyslot.Slots - 1} {
			probe[[2]int{persistence.MaxDB, s}] = want[[2]int{persistence.MaxDB, s}]
			probe[[2]int{0, s}] = want[[2]int{0, s}]
		}
		for k, w := range probe {
			var got []rec
			if err := p.LoadSlot(k[0], uint16(k[1]), func(key, value []byte) error {
				got = append(got, rec{string(key), string(value)})
				return nil
			}); err != nil {
				t.Fatal(err)
			}
			if fmt.Sprint(got) != fmt.Sprint(w) {
				t.Fatalf("case %d: LoadSlot(%d, %d) = %v, Load has %v", c, k[0], k[1], got, w)
			}
			checked++
		}
		closeT(t, p)
	}
	t.Logf("%d cases, %d (db, slot) ranges compared", cases, checked)
}
