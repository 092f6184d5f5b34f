package durability

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cellserver/cellserver/internal/binproc"
	"github.com/cellserver/cellserver/keyspace"
	"github.com/cellserver/cellserver/persistence"
)

const (
	churnRate = 100000 // distinct new keys per second
	// The load runs until churnKeys keys are written, churnMinSeconds at
	// least and churnMaxSeconds at most (CHURN_SECONDS overrides both).
	// Pebble reaches its steady state after about 900k such keys (two or
	// three 16 MiB memtables of WAL, 30-50 MB on disk, whatever the number
	// of keys): the middle third of the run is past it, and the keys
	// written take about three times that much as records.
	churnKeys       = 3000000
	churnMinSeconds = 15
	churnMaxSeconds = 45
	churnBatch      = 500 // commands per pipeline
	churnConns      = 4
)

// dirUsage returns the bytes allocated to the files under dir (du) and the
// sum of their sizes.
func dirUsage(dir string) (alloc, size int64) {
	filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			return nil
		}
		size += fi.Size()
		if st, ok := fi.Sys().(*syscall.Stat_t); ok {
			alloc += st.Blocks * 512
		}
		return nil
	})
	return alloc, size
}

type churnSample struct {
	at       time.Duration
	keys     int64 // distinct keys written so far
	dbsize   int64
	disk     int64 // INFO persistence disk_usage_bytes
	du       int64 // allocated bytes of the directory's files
	pending  int64
	sizeSum  int64
	capacity int64 // what the keys written so far take as records (key + encoded value)
}

// TestChurnDiskUsageLevelsOff: 100000 new keys a second, each living about
// 67 ms (CL.THROTTLE k 0 15 1), for 3M keys (30 s); the disk use of the
// data directory, sampled every second, must level off: the maximum over
// the last third at most 1.5 times the maximum over the middle third, and
// at most half of what the records of all the keys written take. After a
// clean restart, the store must not hold the expired keys.
//
// The change log takes up to about --checkpoint-bytes (twice that while a
// checkpoint runs) besides pebble: the default 64 MiB is as much as this
// 30-second run writes in all, so it runs with 8 MiB, the scale of the
// test, for "far below" to mean what it would over hours at the default.
func TestChurnDiskUsageLevelsOff(t *testing.T) {
	binproc.Binary(t)
	dir := filepath.Join(t.TempDir(), "data")
	p := startServer(t, "--data-dir", dir, "--fsync", "everysec", "--checkpoint-bytes", "8mb")
	ctx := context.Background()
	rdb := client(p.addr, churnConns+1)
	defer rdb.Close()

	// The record size of one key: 2-byte db prefix + key + value encoding.
	recSize := func(key string) int64 {
		return int64(2 + len(key) + len(persistence.EncodeValue(nil, keyspace.Value{Kind: keyspace.KindGCRA, N: 1, Exp: 1})))
	}
	var next atomic.Int64 // keys handed out
	var recBytes atomic.Int64
	var stop atomic.Bool
	var wg sync.WaitGroup
	errc := make(chan error, churnConns)
	start := time.Now()
	perConnBatchEvery := time.Second * churnBatch * churnConns / churnRate
	for c := range churnConns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			due := start.Add(time.Duration(c) * perConnBatchEvery / churnConns)
			for !stop.Load() {
				if d := time.Until(due); d > 0 {
					<-time.After(d)
				} else if d < -perConnBatchEvery {
					due = time.Now() // behind: no burst to catch up, the rate stays at most churnRate
				}
				due = due.Add(perConnBatchEvery)
				lo := next.Add(churnBatch) - churnBatch
				pipe := rdb.Pipeline()
				var bytes int64
				for i := lo; i < lo+churnBatch; i++ {
					key := "churn:" + strconv.FormatInt(i, 10)
					bytes += recSize(key)
					pipe.Do(ctx, "CL.THROTTLE", key, 0, 15, 1)
				}
				cmds, err := pipe.Exec(ctx)
				if err != nil {
					errc <- err
					return
				}
				for _, cmd := range cmds {
					if v, err := cmd.(interface{ Slice() ([]any, error) }).Slice(); err != nil || len(v) != 5 || v[0] != int64(0) {
						errc <- fmt.Errorf("%v: %v, %v", cmd.Args(), v, err)
						return
					}
				}
				recBytes.Add(bytes)
			}
		}()
	}

	var samples []churnSample
	tick := time.NewTicker(time.Second)
	minS, maxS := churnMinSeconds, churnMaxSeconds
	if v, err := strconv.Atoi(os.Getenv("CHURN_SECONDS")); err == nil && v >= 3 {
		minS, maxS = v, v
	}
	for len(samples) < maxS && (len(samples) < minS || next.Load() < churnKeys) {
		select {
		case err := <-errc:
			stop.Store(true)
			t.Fatalf("load: %v", err)
		case <-tick.C:
		}
		var s churnSample
		s.at = time.Since(start).Round(100 * time.Millisecond)
		s.keys = next.Load()
		s.capacity = recBytes.Load()
		var err error
		if s.dbsize, err = rdb.DBSize(ctx).Result(); err != nil {
			t.Fatal(err)
		}
		for field, dst := range map[string]*int64{"disk_usage_bytes": &s.disk, "pending_changes": &s.pending} {
			v, err := infoField(ctx, rdb, "persistence", field)
			if err != nil {
				t.Fatal(err)
			}
			if *dst, err = strconv.ParseInt(v, 10, 64); err != nil {
				t.Fatalf("%s: %v", field, err)
			}
		}
		s.du, s.sizeSum = dirUsage(dir)
		if os.Getenv("CHURN_LS") != "" {
			ents, _ := os.ReadDir(dir)
			var ls []string
			for _, e := range ents {
				fi, _ := e.Info()
				ls = append(ls, fmt.Sprintf("%s:%d", e.Name(), fi.Size()))
			}
			t.Log(ls)
		}
		samples = append(samples, s)
	}
	tick.Stop()
	stop.Store(true)
	wg.Wait()
	select {
	case err := <-errc:
		t.Fatalf("load: %v", err)
	default:
	}

	t.Logf("%6s %9s %8s %8s %12s %12s %12s %12s", "t", "keys", "dbsize", "pending", "disk_usage", "du", "file_sizes", "all_records")
	for _, s := range samples {
		t.Logf("%6v %9d %8d %8d %12d %12d %12d %12d", s.at, s.keys, s.dbsize, s.pending, s.disk, s.du, s.sizeSum, s.capacity)
	}
	last := samples[len(samples)-1]
	rate := float64(last.keys) / last.at.Seconds()
	t.Logf("load: %d keys in %v, %.0f keys/s (target %d)", last.keys, last.at, rate, churnRate)
	n := len(samples)
	maxOf := func(ss []churnSample, f func(churnSample) int64) int64 {
		var m int64
		for _, s := range ss {
			m = max(m, f(s))
		}
		return m
	}
	for _, m := range []struct {
		name string
		f    func(churnSample) int64
		far  bool
	}{
		{"disk_usage_bytes", func(s churnSample) int64 { return s.disk }, true},
		// du counts allocated blocks: pebble preallocates each WAL file to
		// its memtable size + 10% (17.6 MiB here) and keeps up to three
		// obsolete WALs for reuse, so about 75 MB are allocated from the
		// first seconds on, whatever the number of keys. It must level
		// off too; "far below" is checked on pebble's own figure.
		{"du", func(s churnSample) int64 { return s.du }, false},
	} {
		mid, end := maxOf(samples[n/3:2*n/3], m.f), maxOf(samples[2*n/3:], m.f)
		t.Logf("%s: max over the middle third %d, over the last third %d (%.2fx); all %d keys written take %d bytes as records (%.2fx)",
			m.name, mid, end, float64(end)/float64(mid), last.keys, last.capacity, float64(end)/float64(last.capacity))
		if float64(end) > 1.5*float64(mid) {
			t.Errorf("%s does not level off: max over the last third %d > 1.5 x max over the middle third %d", m.name, end, mid)
		}
		if m.far && last.keys < churnKeys {
			t.Logf("only %d keys written (the machine is busy): too few to compare with the steady state's size", last.keys)
		} else if m.far && float64(end) > 0.5*float64(last.capacity) {
			t.Errorf("%s at the end (max %d) is not far below what all %d keys written would take (%d bytes of records)",
				m.name, end, last.keys, last.capacity)
		}
	}
	// The in-memory sweep removes expired keys: about 7000 keys are live
	// at any time. The sweep's work per pass is bounded (at most 80 keys
	// per shard, 10 passes a second), so on a busy machine it can fall
	// behind by some seconds' worth of keys; only a sweep that does not
	// work at all is an error here.
	m := maxOf(samples[n/3:], func(s churnSample) int64 { return s.dbsize })
	t.Logf("DBSIZE: at most %d over the last two thirds (live keys at %d/s x 67 ms: about %d)", m, churnRate, churnRate*67/1000)
	if m > last.keys/2 {
		t.Errorf("DBSIZE reached %d of %d keys written: expired keys are not being removed", m, last.keys)
	}
	// Clean stop and restart: the store holds no more keys than memory did
	// at the stop (DBSIZE counts expired keys not yet removed, and only
	// removals happen after the load): the keys removed from memory during
	// the run were deleted from the store too.
	inMem, err := rdb.DBSize(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	p.stop(t)
	p = startServer(t, "--data-dir", dir, "--fsync", "everysec", "--checkpoint-bytes", "8mb")
	keys, expired := p.loaded(t)
	t.Logf("restart after SIGTERM: %d keys loaded, %d expired records dropped (of %d keys written; DBSIZE %d at the stop)", keys, expired, last.keys, inMem)
	if int64(keys+expired) > inMem {
		t.Errorf("restart found %d keys + %d expired records, but memory held %d keys at the stop: the store keeps keys removed from memory", keys, expired, inMem)
	}
	p.stop(t)
}
