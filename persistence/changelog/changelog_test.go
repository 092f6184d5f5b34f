package changelog

import (
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/cellserver/cellserver/persistence"
	"github.com/cellserver/cellserver/persistence/internal/storetest"
	"github.com/cellserver/cellserver/persistence/pebblestore"
)

// noCheckpoint keeps every change in the log until Checkpoint or Close.
var noCheckpoint = Options{CheckpointInterval: time.Hour}

func open(t *testing.T, dir string, opts persistence.OpenOptions, o Options) *Store {
	t.Helper()
	s, err := Open(dir, pebblestore.OpenStore, opts, o)
	if err != nil {
		t.Fatalf("open %s: %v", dir, err)
	}
	return s
}

// TestStoreConformance runs the Store suite over the change log (with a
// checkpoint every 10 ms, so that both paths are exercised).
func TestStoreConformance(t *testing.T) {
	storetest.Run(t, storetest.Opener(func(t *testing.T) func() (persistence.Store, error) {
		dir := t.TempDir()
		return func() (persistence.Store, error) {
			return Open(dir, pebblestore.OpenStore, persistence.OpenOptions{}, Options{CheckpointInterval: 10 * time.Millisecond})
		}
	}))
}

// randomOps returns n random changes over a few databases and keys,
// with the occasional FLUSHDB and FLUSHALL.
func randomOps(rng *rand.Rand, n, round int) []persistence.Op {
	var ops []persistence.Op
	for i := range n {
		db := rng.IntN(3)
		key := fmt.Sprintf("k:%d", rng.IntN(200))
		switch r := rng.IntN(1000); {
		case r == 0:
			ops = append(ops, storetest.DelAll())
		case r < 4:
			ops = append(ops, storetest.DelDB(db))
		case r < 200:
			ops = append(ops, storetest.Del(db, key))
		default:
			ops = append(ops, storetest.Put(db, key, fmt.Sprintf("v%d.%d", round, i)))
		}
	}
	return ops
}

// crashCopy copies dir as a crash would leave it: the files as they are
// on disk now, with the store still open. Pebble deletes obsolete files
// (an old OPTIONS or WAL) in the background after it opens: when a file
// vanishes between the listing and the copy, the copy starts over.
// Callers keep checkpoints from running during the copy.
func crashCopy(t *testing.T, dir string) string {
	t.Helper()
	dst := filepath.Join(t.TempDir(), "crashed")
	for attempt := 0; ; attempt++ {
		err := copyTree(dir, dst)
		if err == nil {
			return dst
		}
		if !errors.Is(err, os.ErrNotExist) || attempt == 20 {
			t.Fatal(err)
		}
		if err := os.RemoveAll(dst); err != nil {
			t.Fatal(err)
		}
	}
}

func copyTree(dir, dst string) error {
	return filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		to := filepath.Join(dst, rel)
		if fi.IsDir() {
			return os.MkdirAll(to, 0o755)
		}
		in, err := os.Open(p)
		if err != nil {
			return err
		}
		defer in.Close()
		out, err := os.Create(to)
		if err != nil {
			return err
		}
		defer out.Close()
		_, err = io.Copy(out, in)
		return err
	})
}

func segFiles(t *testing.T, dir string) []uint64 {
	t.Helper()
	segs, err := segments(filepath.Join(dir, Subdir))
	if err != nil {
		t.Fatal(err)
	}
	return segs
}

// TestReplayAfterCrash: changes written (and synced) to the log, some
// checkpointed into pebble and some not, are all found after a crash;
// the replay deletes the segments and leaves one empty current segment.
func TestReplayAfterCrash(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	s := open(t, dir, persistence.OpenOptions{}, noCheckpoint)
	defer s.Close()
	rng := rand.New(rand.NewPCG(3, 4))
	m := storetest.Model{}
	for round := range 6 {
		ops := randomOps(rng, 500, round)
		storetest.MustWrite(t, s, round%2 == 0, ops...)
		m.Apply(ops)
		if round == 2 {
			if err := s.Checkpoint(); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := s.Sync(); err != nil {
		t.Fatal(err)
	}
	crashed := crashCopy(t, dir)
	if n := len(segFiles(t, crashed)); n != 1 {
		t.Fatalf("%d segments before the replay, want 1 (the checkpoint deleted the older one)", n)
	}
	r := open(t, crashed, persistence.OpenOptions{}, noCheckpoint)
	storetest.CheckRecords(t, r, m.Records())
	if segs := segFiles(t, crashed); len(segs) != 1 {
		t.Errorf("segments after the replay: %v, want only the new current one", segs)
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if segs := segFiles(t, crashed); len(segs) != 0 {
		t.Errorf("segments after a clean Close: %v, want none", segs)
	}
	// And the state survives a clean reopen without any log.
	r = open(t, crashed, persistence.OpenOptions{}, noCheckpoint)
	storetest.CheckRecords(t, r, m.Records())
	r.Close()
}

// TestCheckpointDeletesSegments: a checkpoint moves the logged changes to
// pebble and deletes their segment; pebble alone (opened without the log)
// then holds them.
func TestCheckpointDeletesSegments(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	s := open(t, dir, persistence.OpenOptions{}, noCheckpoint)
	rng := rand.New(rand.NewPCG(5, 6))
	m := storetest.Model{}
	ops := randomOps(rng, 2000, 0)
	storetest.MustWrite(t, s, false, ops...)
	m.Apply(ops)
	before := segFiles(t, dir)
	if err := s.Checkpoint(); err != nil {
		t.Fatal(err)
	}
	after := segFiles(t, dir)
	if len(before) != 1 || len(after) != 1 || after[0] != before[0]+1 {
		t.Errorf("segments before the checkpoint %v, after %v: want one, then only its successor", before, after)
	}
	if st := s.Stats(); st.Checkpoints != 1 || st.SegmentBytes != 0 {
		t.Errorf("stats after the checkpoint: %+v", st)
	}
	// A checkpoint with nothing new does not rotate.
	if err := s.Checkpoint(); err != nil {
		t.Fatal(err)
	}
	if again := segFiles(t, dir); len(again) != 1 || again[0] != after[0] {
		t.Errorf("segments after an empty checkpoint: %v, want %v", again, after)
	}
	// Pebble alone holds the checkpointed state: copy the directory
	// without the log and open it with pebblestore.
	crashed := crashCopy(t, dir)
	if err := os.RemoveAll(filepath.Join(crashed, Subdir)); err != nil {
		t.Fatal(err)
	}
	p, err := pebblestore.OpenStore(crashed, persistence.OpenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	storetest.CheckRecords(t, p, m.Records())
	p.Close()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
}

// lastSegment returns the path of dir's newest segment.
func lastSegment(t *testing.T, dir string) string {
	segs := segFiles(t, dir)
	if len(segs) == 0 {
		t.Fatal("no segment")
	}
	return segName(filepath.Join(dir, Subdir), segs[len(segs)-1])
}

// TestTornTail: a record cut short at the end of the newest segment (a
// crash in the middle of a write) is the end of the log; everything
// before it is loaded.
func TestTornTail(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	s := open(t, dir, persistence.OpenOptions{}, noCheckpoint)
	defer s.Close()
	m := storetest.Model{}
	ops := randomOps(rand.New(rand.NewPCG(7, 8)), 300, 0)
	storetest.MustWrite(t, s, true, ops...)
	m.Apply(ops)
	for cut := 1; cut < 20; cut += 3 {
		crashed := crashCopy(t, dir)
		rec := appendRecord(nil, storetest.Put(0, "torn", "never acknowledged"))
		f, err := os.OpenFile(lastSegment(t, crashed), os.O_APPEND|os.O_WRONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.Write(rec[:min(cut, len(rec)-1)]); err != nil {
			t.Fatal(err)
		}
		f.Close()
		r := open(t, crashed, persistence.OpenOptions{}, noCheckpoint)
		storetest.CheckRecords(t, r, m.Records())
		r.Close()
	}
}

// TestDamageRefused: a damaged record followed by intact ones is refused
// with ErrCorrupt; with LoadDamagedWAL the records before the damage are
// loaded and the rest dropped.
func TestDamageRefused(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	s := open(t, dir, persistence.OpenOptions{}, noCheckpoint)
	defer s.Close()
	var first, second []persistence.Op
	for i := range 50 {
		first = append(first, storetest.Put(0, fmt.Sprintf("a%d", i), "before"))
		second = append(second, storetest.Put(0, fmt.Sprintf("b%d", i), "after"))
	}
	storetest.MustWrite(t, s, true, first...)
	seg := lastSegment(t, dir)
	fi, err := os.Stat(seg)
	if err != nil {
		t.Fatal(err)
	}
	damageAt := fi.Size() + 5 // inside the first record of the second batch
	storetest.MustWrite(t, s, true, second...)
	crashed := crashCopy(t, dir)
	cseg := lastSegment(t, crashed)
	data, err := os.ReadFile(cseg)
	if err != nil {
		t.Fatal(err)
	}
	data[damageAt] ^= 0xff
	if err := os.WriteFile(cseg, data, 0o644); err != nil {
		t.Fatal(err)
	}
	// The log is read when the store is loaded (or at its first
	// checkpoint): that is where the damage is refused.
	r, err := Open(crashed, pebblestore.OpenStore, persistence.OpenOptions{}, noCheckpoint)
	if err == nil {
		err = r.Load(func(int, []byte, []byte) error { return nil })
		r.Close()
	}
	if !errors.Is(err, persistence.ErrCorrupt) {
		t.Fatalf("load with a damaged change log: %v, want ErrCorrupt", err)
	}
	t.Logf("refused: %v", err)
	r = open(t, crashed, persistence.OpenOptions{LoadDamagedWAL: true}, noCheckpoint)
	m := storetest.Model{}
	m.Apply(first)
	storetest.CheckRecords(t, r, m.Records())
	r.Close()
}

// TestParseRoundTrip: every kind of op reads back as written.
func TestParseRoundTrip(t *testing.T) {
	ops := []persistence.Op{
		storetest.Put(7, "key", "value"), storetest.Del(65535, "x"), storetest.Put(0, "", "empty key"),
		storetest.DelDB(3), storetest.DelAll(),
	}
	data := append([]byte(nil), segMagic...)
	for _, op := range ops {
		data = appendRecord(data, op)
	}
	var got []persistence.Op
	end, err := Parse("t", data, func(op persistence.Op) error { got = append(got, op); return nil })
	if err != nil || end != int64(len(data)) || len(got) != len(ops) {
		t.Fatalf("Parse: end %d of %d, err %v, %d ops", end, len(data), err, len(got))
	}
	for i := range ops {
		if got[i].Kind != ops[i].Kind || got[i].DB != ops[i].DB || string(got[i].Key) != string(ops[i].Key) || string(got[i].Value) != string(ops[i].Value) {
			t.Errorf("op %d: got %+v, want %+v", i, got[i], ops[i])
		}
	}
}

// TestLastOKAndSkipFinalCheckpoint: a successful checkpoint sets LastOK
// (LASTSAVE); SkipFinalCheckpoint makes Close keep the synced log instead
// of a last checkpoint (SHUTDOWN NOSAVE), and the next open replays it.
func TestLastOKAndSkipFinalCheckpoint(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	s := open(t, dir, persistence.OpenOptions{}, noCheckpoint)
	if !s.CheckpointStats().LastOK.IsZero() {
		t.Fatal("LastOK set before any checkpoint")
	}
	m := storetest.Model{}
	ops := randomOps(rand.New(rand.NewPCG(7, 8)), 200, 0)
	storetest.MustWrite(t, s, true, ops...)
	m.Apply(ops)
	before := time.Now()
	if err := s.Checkpoint(); err != nil {
		t.Fatal(err)
	}
	if ok := s.CheckpointStats().LastOK; ok.Before(before) {
		t.Fatalf("LastOK %v after a checkpoint that began at %v", ok, before)
	}
	more := randomOps(rand.New(rand.NewPCG(9, 10)), 200, 0)
	storetest.MustWrite(t, s, true, more...)
	m.Apply(more)
	s.SkipFinalCheckpoint()
	ck := s.Stats().Checkpoints
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if got := s.Stats().Checkpoints; got != ck {
		t.Fatalf("Close after SkipFinalCheckpoint ran a checkpoint (%d, was %d)", got, ck)
	}
	if segs := segFiles(t, dir); len(segs) == 0 {
		t.Fatal("no segment kept after SkipFinalCheckpoint")
	}
	s2 := open(t, dir, persistence.OpenOptions{}, noCheckpoint)
	defer s2.Close()
	storetest.CheckRecords(t, s2, m.Records())
}
