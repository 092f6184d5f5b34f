package changelog

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cellserver/cellserver/internal/testwait"
	"github.com/cellserver/cellserver/keyspace"
	"github.com/cellserver/cellserver/persistence"
	"github.com/cellserver/cellserver/persistence/internal/storetest"
	"github.com/cellserver/cellserver/persistence/pebblestore"
)

// served is a keyspace writing through a Writer to a change log store, as
// a server runs it.
type served struct {
	s      *Store
	w      *persistence.Writer
	ks     *keyspace.Keyspace
	cancel context.CancelFunc
}

func serve(t *testing.T, dir string, o Options) *served {
	t.Helper()
	s := open(t, dir, persistence.OpenOptions{}, o)
	w := persistence.NewWriter(s, persistence.FsyncEverySec, nil)
	ks, err := keyspace.New(keyspace.Config{Databases: 3, Shards: 8, Journal: w, TrackChanges: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := persistence.Load(s, ks, 0); err != nil {
		t.Fatal(err)
	}
	if err := s.Attach(ks); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	go w.Run(ctx)
	return &served{s: s, w: w, ks: ks, cancel: cancel}
}

// written waits until every change so far is in the log.
func (sv *served) written(t *testing.T) {
	t.Helper()
	if err := sv.w.WaitDurable(sv.w.Seq()); err != nil {
		t.Fatal(err)
	}
}

func (sv *served) close(t *testing.T) {
	sv.w.Close()
	sv.cancel()
	if err := sv.s.Close(); err != nil {
		t.Fatal(err)
	}
}

// records is the keyspace's state as a store holds it.
func records(ks *keyspace.Keyspace) []storetest.Record {
	var recs []storetest.Record
	for d := 0; d < ks.NumDB(); d++ {
		db := ks.DB(d)
		for i := 0; i < db.NumShards(); i++ {
			sh := db.ShardAt(i)
			sh.Lock()
			sh.Range(0, func(key string, v *keyspace.Value) bool {
				recs = append(recs, storetest.Record{DB: d, Key: key, Value: string(persistence.EncodeValue(nil, *v))})
				return true
			})
			sh.Unlock()
		}
	}
	return recs
}

// change makes n random changes to ks: sets (most), deletes, and rarely
// FLUSHDB or FLUSHALL.
func change(rng *rand.Rand, ks *keyspace.Keyspace, n, keys int) {
	for range n {
		db := ks.DB(rng.IntN(ks.NumDB()))
		key := []byte(fmt.Sprintf("key:%d", rng.IntN(keys)))
		sh := db.Shard(key)
		switch r := rng.IntN(20000); {
		case r == 0:
			ks.FlushAll(false)
		case r < 5:
			db.Flush(false)
		case r < 3000:
			sh.Lock()
			sh.Delete(key, 0)
			sh.Unlock()
		default:
			sh.Lock()
			sh.Set(key, keyspace.Value{Kind: keyspace.KindGCRA, N: rng.Uint64() >> 1})
			sh.Unlock()
		}
	}
}

// checkCrash copies dir, sv's directory, as a crash would leave it now
// (every change so far written to the log) and checks that it reopens to
// exactly sv's keyspace: by the store alone for an even n (its Load
// replays the log into pebble), else as the server starts (the log
// replayed into a keyspace, persistence.Load and Replay, then
// checkpointed by Close, leaving no segment and pebble alone holding the
// state).
func checkCrash(t *testing.T, sv *served, dir string, n, round int) {
	t.Helper()
	sv.written(t)
	want := records(sv.ks)
	crashed := crashCopy(t, dir)
	if n%2 == 0 {
		r := open(t, crashed, persistence.OpenOptions{}, Options{})
		storetest.CheckRecords(t, r, want)
		r.Close()
		return
	}
	rs := serve(t, crashed, Options{CheckpointBytes: 1 << 40})
	if got := records(rs.ks); !sameRecords(got, want) {
		t.Fatalf("round %d: the keyspace after the replay differs: %s", round, recordsDiff(got, want))
	}
	rs.close(t)
	if segs := segFiles(t, crashed); len(segs) != 0 {
		t.Fatalf("round %d: segments after the replay and a clean close: %v", round, segs)
	}
	p, err := pebblestore.OpenStore(crashed, persistence.OpenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	storetest.CheckRecords(t, p, want)
	p.Close()
}

// TestCheckpointFromKeyspace: with a keyspace attached, checkpoints write
// the changed keys read from it. At random points the directory is copied
// as a crash would leave it (the log written, a checkpoint done or not):
// reopened, it holds exactly the keyspace's state. A clean close leaves no
// log, and pebble alone holds the state.
func TestCheckpointFromKeyspace(t *testing.T) {
	const rounds = 40
	dir := filepath.Join(t.TempDir(), "data")
	sv := serve(t, dir, Options{CheckpointBytes: 1 << 40})
	rng := rand.New(rand.NewPCG(11, 12))
	crashes := 0
	for round := range rounds {
		change(rng, sv.ks, 2000, 300)
		if rng.IntN(3) == 0 {
			if err := sv.s.Checkpoint(); err != nil {
				t.Fatal(err)
			}
			if st := sv.s.Stats(); st.LastKeys > 2*3*300 {
				t.Fatalf("round %d: the checkpoint wrote %d keys; at most 1800 (a removal and a value for each of 3 databases x 300 keys)", round, st.LastKeys)
			}
		}
		if rng.IntN(2) == 0 {
			checkCrash(t, sv, dir, crashes, round)
			crashes++
		}
	}
	want := records(sv.ks)
	sv.close(t)
	if segs := segFiles(t, dir); len(segs) != 0 {
		t.Fatalf("segments after a clean close: %v, want none", segs)
	}
	if err := os.RemoveAll(filepath.Join(dir, Subdir)); err != nil {
		t.Fatal(err)
	}
	p, err := pebblestore.OpenStore(dir, persistence.OpenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	storetest.CheckRecords(t, p, want)
	p.Close()
	t.Logf("%d rounds of 2000 random changes, %d crash copies checked", rounds, crashes)
}

// TestCheckpointCoalesces: a key changed many times between two
// checkpoints is written to pebble once.
func TestCheckpointCoalesces(t *testing.T) {
	sv := serve(t, filepath.Join(t.TempDir(), "data"), Options{CheckpointBytes: 1 << 40})
	defer sv.close(t)
	sh := sv.ks.DB(0).Shard([]byte("hot"))
	for i := range 5000 {
		sh.Lock()
		sh.Set([]byte("hot"), keyspace.Value{Kind: keyspace.KindGCRA, N: uint64(i)})
		sh.Unlock()
	}
	sv.written(t)
	if err := sv.s.Checkpoint(); err != nil {
		t.Fatal(err)
	}
	if st := sv.s.Stats(); st.LastKeys != 1 || st.Checkpoints != 1 {
		t.Fatalf("after 5000 changes of one key: %+v; want one checkpoint writing 1 key", st)
	}
}

// TestCheckpointBySize: the log passing CheckpointBytes starts a
// checkpoint by itself, and the log on disk stays near that size.
func TestCheckpointBySize(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	sv := serve(t, dir, Options{CheckpointBytes: 64 << 10})
	defer sv.close(t)
	rng := rand.New(rand.NewPCG(13, 14))
	for range 50 {
		change(rng, sv.ks, 1000, 100)
		sv.written(t)
	}
	testwait.Until(t, 20*time.Second, "a checkpoint started by the log's size", func() bool { return sv.s.Stats().Checkpoints > 0 })
}

// TestInfoCountsPendingKeys: INFO's checkpoint_pending_keys counts the
// keys changed since the last checkpoint, and a checkpoint clears it.
func TestInfoCountsPendingKeys(t *testing.T) {
	sv := serve(t, filepath.Join(t.TempDir(), "data"), Options{CheckpointBytes: 1 << 40})
	defer sv.close(t)
	for i := range 10 {
		key := []byte(fmt.Sprintf("k%d", i))
		sh := sv.ks.DB(0).Shard(key)
		sh.Lock()
		sh.Set(key, keyspace.Value{Kind: keyspace.KindGCRA, N: 1})
		sh.Unlock()
	}
	field := func() string {
		for _, l := range sv.s.Info() {
			if v, ok := strings.CutPrefix(l, "checkpoint_pending_keys:"); ok {
				return v
			}
		}
		return "(missing)"
	}
	if got := field(); got != "10" {
		t.Fatalf("checkpoint_pending_keys after 10 keys set: %s", got)
	}
	sv.written(t)
	if err := sv.s.Checkpoint(); err != nil {
		t.Fatal(err)
	}
	if got := field(); got != "0" {
		t.Fatalf("checkpoint_pending_keys after a checkpoint: %s", got)
	}
}

// TestExpiredAtLoadLeavePebble: the records the startup load finds expired
// are deleted from the store (logged before the keyspace is attached);
// they must reach pebble, not vanish with their log segment.
func TestExpiredAtLoadLeavePebble(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	s := open(t, dir, persistence.OpenOptions{}, Options{})
	old := persistence.EncodeValue(nil, keyspace.Value{Kind: keyspace.KindGCRA, N: 1, Exp: 1000})
	storetest.MustWrite(t, s, true, persistence.Op{Kind: persistence.OpPut, DB: 0, Key: []byte("old"), Value: old})
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = open(t, dir, persistence.OpenOptions{}, Options{})
	w := persistence.NewWriter(s, persistence.FsyncEverySec, nil)
	ks, err := keyspace.New(keyspace.Config{Shards: 2, Journal: w, TrackChanges: true})
	if err != nil {
		t.Fatal(err)
	}
	st, err := persistence.Load(s, ks, 2000) // "old" expired at 1000
	if err != nil || st.Expired != 1 {
		t.Fatalf("load: %+v, %v; want 1 expired record", st, err)
	}
	if err := s.Attach(ks); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	p, err := pebblestore.OpenStore(dir, persistence.OpenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	storetest.CheckRecords(t, p, nil)
}

// sameRecords reports whether a and b hold the same records, in any order.
func sameRecords(a, b []storetest.Record) bool {
	if len(a) != len(b) {
		return false
	}
	m := map[storetest.Record]int{}
	for _, r := range a {
		m[r]++
	}
	for _, r := range b {
		if m[r] == 0 {
			return false
		}
		m[r]--
	}
	return true
}

// TestReplayedFlushNotLoggedAgain: a FLUSHDB replayed from the log at
// startup must not be logged again: a crash right after the start would
// then replay it after the changes that followed it the first time.
func TestReplayedFlushNotLoggedAgain(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	sv := serve(t, dir, Options{CheckpointBytes: 1 << 40})
	set := func(sv *served, key string) {
		sh := sv.ks.DB(0).Shard([]byte(key))
		sh.Lock()
		sh.Set([]byte(key), keyspace.Value{Kind: keyspace.KindGCRA, N: 7})
		sh.Unlock()
	}
	set(sv, "before")
	sv.ks.DB(0).Flush(false)
	set(sv, "after")
	sv.written(t)
	want := records(sv.ks) // "after" only
	first := crashCopy(t, dir)
	rs := serve(t, first, Options{CheckpointBytes: 1 << 40})
	rs.written(t) // whatever the start queued is in the log
	// The start kicks a checkpoint, which deletes the replayed segment:
	// copying while it runs would see a file vanish, or half a pebble.
	// Holding the checkpoint lock copies the directory either before the
	// checkpoint or after it, and a crash at either point must keep want.
	rs.s.ckMu.Lock()
	second := crashCopy(t, first)
	rs.s.ckMu.Unlock()
	rs.close(t)
	r := open(t, second, persistence.OpenOptions{}, Options{})
	defer r.Close()
	storetest.CheckRecords(t, r, want)
	sv.close(t)
}
