package changelog

import (
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"testing"

	"github.com/cellserver/cellserver/keyspace"
	"github.com/cellserver/cellserver/persistence"
	"github.com/cellserver/cellserver/persistence/internal/storetest"
	"github.com/cellserver/cellserver/stream"
)

// changeStreams makes n random changes to a few stream keys of ks, in
// place as the stream commands make them (Append, Trim, Delete, then
// Changed), with now and then a stream made anew, an expiry set (a delta
// of no operation), a key deleted, or a RENAME's pair of changes.
func changeStreams(rng *rand.Rand, ks *keyspace.Keyspace, n, keys int, ms *uint64) {
	for range n {
		db := ks.DB(rng.IntN(ks.NumDB()))
		key := []byte(fmt.Sprintf("stream:%d", rng.IntN(keys)))
		sh := db.Shard(key)
		sh.Lock()
		v := sh.Lookup(key, 0)
		switch r := rng.IntN(1000); {
		case r < 5:
			sh.Delete(key, 0)
		case v == nil || v.Kind != keyspace.KindStream || r < 15:
			st := stream.New()
			*ms++
			st.Append(stream.ID{Ms: *ms}, [][]byte{[]byte("f"), []byte("first")})
			sh.Set(key, keyspace.Value{Kind: keyspace.KindStream, Obj: st})
		case r < 25:
			v.Exp = int64(1e15 + rng.IntN(1000))
			sh.Changed(key, v)
		case r < 60:
			st := v.Obj.(*stream.Stream)
			st.Trim(stream.TrimArgs{MaxLen: int64(rng.IntN(50)), Approx: rng.IntN(2) == 0})
			sh.Changed(key, v)
		case r < 120:
			st := v.Obj.(*stream.Stream)
			if id, ok := st.FirstID(); ok {
				st.Delete(id)
			}
			sh.Changed(key, v)
		default:
			st := v.Obj.(*stream.Stream)
			*ms++
			val := make([]byte, rng.IntN(40))
			for i := range val {
				val[i] = byte('a' + rng.IntN(26))
			}
			st.Append(stream.ID{Ms: *ms, Seq: uint64(rng.IntN(3))}, [][]byte{[]byte("f"), val, []byte("n"), []byte(fmt.Sprint(rng.IntN(1000)))})
			sh.Changed(key, v)
		}
		sh.Unlock()
	}
}

// TestStreamDeltas: streams changed in place are logged as deltas, and a
// crash at any point, with or without a checkpoint since, reopens to
// exactly the keyspace's streams, both ways the log is replayed: into
// the store alone (its first checkpoint) and into a keyspace (the
// server's start), where a checkpoint that already holds some of the
// log's deltas must not apply them twice.
func TestStreamDeltas(t *testing.T) {
	const rounds = 100
	dir := filepath.Join(t.TempDir(), "data")
	sv := serve(t, dir, Options{CheckpointBytes: 1 << 40})
	rng := rand.New(rand.NewPCG(31, 32))
	var ms uint64
	crashes := 0
	for round := range rounds {
		changeStreams(rng, sv.ks, 500, 6, &ms)
		change(rng, sv.ks, 100, 50)
		if rng.IntN(3) == 0 {
			if err := sv.s.Checkpoint(); err != nil {
				t.Fatal(err)
			}
			// Changes after the checkpoint's collection, before the copy:
			// the kept log starts before the state the store holds.
			changeStreams(rng, sv.ks, 50, 6, &ms)
		}
		if rng.IntN(2) == 0 {
			checkCrash(t, sv, dir, crashes, round)
			crashes++
		}
	}
	sv.close(t)
	t.Logf("%d rounds of 550 stream and 100 other changes, %d crash copies checked", rounds, crashes)
}

// TestStreamDeltaIsSmall: appending to a long stream logs the entry, not
// the stream.
func TestStreamDeltaIsSmall(t *testing.T) {
	sv := serve(t, filepath.Join(t.TempDir(), "data"), Options{CheckpointBytes: 1 << 40})
	defer sv.close(t)
	key := []byte("audit")
	sh := sv.ks.DB(0).Shard(key)
	st := stream.New()
	sh.Lock()
	for i := range 10000 {
		st.Append(stream.ID{Ms: uint64(i + 1)}, [][]byte{[]byte("key"), []byte("user:42"), []byte("decision"), []byte("limited")})
	}
	sh.Set(key, keyspace.Value{Kind: keyspace.KindStream, Obj: st})
	sh.Unlock()
	sv.written(t)
	before := sv.s.Stats().SegmentBytes
	for i := range 100 {
		sh.Lock()
		v := sh.Lookup(key, 0)
		v.Obj.(*stream.Stream).Append(stream.ID{Ms: uint64(20000 + i)}, [][]byte{[]byte("key"), []byte("user:42"), []byte("decision"), []byte("limited")})
		sh.Changed(key, v)
		sh.Unlock()
	}
	sv.written(t)
	per := (sv.s.Stats().SegmentBytes - before) / 100
	if per > 200 {
		t.Fatalf("one append to a 10000-entry stream logged %d bytes; want a delta (< 200)", per)
	}
	t.Logf("one append to a 10000-entry stream logs %d bytes", per)
}

// recordsDiff describes how got differs from want (the first few).
func recordsDiff(got, want []storetest.Record) string {
	key := func(r storetest.Record) string { return fmt.Sprintf("db %d key %q", r.DB, r.Key) }
	w := map[string]string{}
	for _, r := range want {
		w[key(r)] = r.Value
	}
	var out []string
	for _, r := range got {
		k := key(r)
		switch v, ok := w[k]; {
		case !ok:
			out = append(out, k+": not wanted")
		case v != r.Value:
			out = append(out, fmt.Sprintf("%s: value of %d bytes, want %d: %x vs %x", k, len(r.Value), len(v), r.Value[:min(len(r.Value), 40)], v[:min(len(v), 40)]))
		}
		delete(w, k)
	}
	for k := range w {
		out = append(out, k+": missing")
	}
	return fmt.Sprintf("%d records, want %d; %v", len(got), len(want), out[:min(len(out), 5)])
}

// TestStreamExpiredInCheckpointPersistedInLog: a stream the checkpoint
// holds with an expiry that has passed by the restart, made persistent
// (PERSIST, a delta of no operation) and appended to afterwards, is
// loaded with the log's changes, not dropped as expired; one still
// expired after the log is dropped and counted.
func TestStreamExpiredInCheckpointPersistedInLog(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	sv := serve(t, dir, Options{CheckpointBytes: 1 << 40})
	sh := sv.ks.DB(0).Shard([]byte("kept"))
	put := func(key string, exp int64) {
		st := stream.New()
		st.Append(stream.ID{Ms: 1}, [][]byte{[]byte("f"), []byte("v")})
		s := sv.ks.DB(0).Shard([]byte(key))
		s.Lock()
		s.Set([]byte(key), keyspace.Value{Kind: keyspace.KindStream, Obj: st, Exp: exp})
		s.Unlock()
	}
	put("kept", 1000)
	put("gone", 1000)
	sv.written(t)
	if err := sv.s.Checkpoint(); err != nil {
		t.Fatal(err)
	}
	sh.Lock()
	v := sh.Lookup([]byte("kept"), 0)
	v.Exp = 0 // PERSIST
	sh.Changed([]byte("kept"), v)
	v = sh.Lookup([]byte("kept"), 0)
	v.Obj.(*stream.Stream).Append(stream.ID{Ms: 2}, [][]byte{[]byte("f"), []byte("w")})
	sh.Changed([]byte("kept"), v)
	sh.Unlock()
	sv.written(t)
	crashed := crashCopy(t, dir)
	sv.close(t)

	s := open(t, crashed, persistence.OpenOptions{}, Options{})
	defer s.Close()
	ks, err := keyspace.New(keyspace.Config{Databases: 3, Shards: 8, TrackChanges: true})
	if err != nil {
		t.Fatal(err)
	}
	st, err := persistence.Load(s, ks, 5000) // both streams' expiry (1000) has passed
	if err != nil {
		t.Fatal(err)
	}
	kept := ks.DB(0).Shard([]byte("kept"))
	kept.Lock()
	got := kept.Lookup([]byte("kept"), 5000)
	var n uint64
	if got != nil {
		n = got.Obj.(*stream.Stream).Len()
	}
	kept.Unlock()
	if got == nil || got.Exp != 0 || n != 2 {
		t.Fatalf("the persisted stream after the load: %+v (%d entries); want no expiry and 2 entries", got, n)
	}
	if st.Expired != 1 || st.Keys != 1 {
		t.Fatalf("load: %+v; want 1 key and 1 expired (the stream still expired)", st)
	}
}
