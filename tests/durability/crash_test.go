package durability

import (
	"context"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/cellserver/cellserver/internal/binproc"
)

const (
	crashWorkers  = 8
	keysPerWorker = 60 // 480 keys, 80 of each class
	crashRounds   = 3  // SIGKILL rounds per fsync mode, then one clean stop
	// everysecWindow is how old a state recovered with fsync everysec may
	// be: it must have been current at some moment of the last
	// everysecWindow before the kill.
	everysecWindow = 2 * time.Second
)

// rec is one state a key had, read back by its owner right after a write,
// with the time the reply arrived.
type rec struct {
	st  state
	ack time.Time
}

// keyHist is one key's exact history in a round: hist[0] is its state at
// the start of the round, then one entry per acknowledged write.
type keyHist struct {
	name     string
	class    class
	n        int64 // writes issued so far (all rounds)
	hist     []rec
	inflight *op // a write whose effect was not read back (no reply, or no read-back reply)
}

func (k *keyHist) last() rec { return k.hist[len(k.hist)-1] }

// roundStats is what one round checked.
type roundStats struct {
	writes   int // acknowledged writes (each read back)
	states   int // states recorded (including each key's initial one)
	inflight int // writes in flight at the kill
	atLast   int // keys recovered in their last acknowledged state
	applied  int // keys recovered in the state of their in-flight write
	older    int // keys recovered in an older state (everysec, no)
	maxLag   time.Duration
	present  int
}

// TestCrashRecovery: for each fsync mode, rounds of mixed load over 480
// keys from 8 goroutines (each owning its keys, reading every key back
// right after each write), SIGKILL at a random moment, restart on the same
// directory, and every key must hold a state it really had: with always
// the last acknowledged one (or the in-flight write's), with everysec one
// current within the last 2 s before the kill, with no any one. A final
// round stops with SIGTERM: then nothing may be lost. While the first
// instance runs, a second one on the same directory must refuse to start.
func TestCrashRecovery(t *testing.T) {
	binproc.Binary(t)
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	for mi, mode := range []string{"always", "everysec", "no"} {
		t.Run(mode, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, uint64(mi)))
			crashMode(t, mode, rng, nil)
		})
	}
}

// crashMode runs the rounds of TestCrashRecovery for one fsync mode; with
// sat, under saturation (see TestCrashUnderBackpressure); extra are more
// server flags.
func crashMode(t *testing.T, mode string, rng *rand.Rand, sat *saturation, extra ...string) {
	dir := filepath.Join(t.TempDir(), "data")
	args := append([]string{"--data-dir", dir, "--fsync", mode}, extra...)
	if sat != nil {
		args = append(args, sat.args...)
	}
	p := startServer(t, args...)

	// A second instance on the same directory must refuse it.
	code, out := runToExit(t, args...)
	if code == 0 || !strings.Contains(out, "in use") {
		t.Errorf("second instance on %s: exit %d, want non-zero with an \"in use\" error; output:\n%s", dir, code, out)
	} else {
		t.Logf("second instance: exit %d: %s", code, strings.TrimSpace(lastLine(out)))
	}

	var keys [crashWorkers][]*keyHist
	now := time.Now()
	for w := range keys {
		for i := range keysPerWorker {
			c := class(i % int(nClasses))
			keys[w] = append(keys[w], &keyHist{
				name: fmt.Sprintf("dur:%s:w%d:k%d", c, w, i), class: c,
				hist: []rec{{st: state{absent: true}, ack: now}},
			})
		}
	}
	for round := 1; round <= crashRounds+1; round++ {
		clean := round > crashRounds
		loadFor := time.Duration(300+rng.IntN(2200)) * time.Millisecond
		if clean {
			loadFor = 500 * time.Millisecond
		}
		tag := fmt.Sprintf("%s%d", mode, round)
		stopAt, rs := driveLoad(t, p, &keys, rng.Uint64(), tag, loadFor, clean, sat)
		if t.Failed() {
			return
		}
		how := "SIGKILL"
		if clean {
			how = "SIGTERM"
		}
		p = startServer(t, args...)
		loadedKeys, expired := p.loaded(t)
		window := mode
		if clean {
			window = "clean"
		}
		verify(t, p, &keys, window, stopAt, &rs)
		if sat != nil {
			loadedKeys -= sat.keysIn(t, p)
		}
		if expired != 0 || loadedKeys != rs.present {
			t.Errorf("restart logged keys=%d expired_dropped=%d, but %d of the test's keys are present", loadedKeys, expired, rs.present)
		}
		t.Logf("round %d (%s after %v): %d writes acknowledged and read back, %d states recorded over %d keys, %d in flight; "+
			"after restart (loaded %d keys): %d at the last acknowledged state, %d at the in-flight write's, %d older (max lag %v)",
			round, how, loadFor, rs.writes, rs.states, crashWorkers*keysPerWorker, rs.inflight,
			loadedKeys, rs.atLast, rs.applied, rs.older, rs.maxLag.Round(time.Millisecond))
		if t.Failed() {
			return
		}
	}
	p.stop(t)
}

func lastLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		return s[i+1:]
	}
	return s
}

// driveLoad runs the workers against p for d, then SIGKILLs p while they
// are writing (with clean: stops the workers, then SIGTERMs p). It returns
// the moment of the cut and the round's figures so far.
//
// With sat, flood clients run too, and the cut comes once sat.cutNow says
// the write path is saturated, instead of after d.
func driveLoad(t *testing.T, p *proc, keys *[crashWorkers][]*keyHist, seed uint64, tag string, d time.Duration, clean bool, sat *saturation) (time.Time, roundStats) {
	t.Helper()
	var rs roundStats
	for w := range keys {
		for _, k := range keys[w] {
			rs.states += len(k.hist)
		}
	}
	var stop, killed atomic.Bool
	var wg sync.WaitGroup
	var mu sync.Mutex
	var errs []string
	var writes atomic.Int64
	ctx := context.Background()
	for w := range keys {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rdb := client(p.addr, 1)
			defer rdb.Close()
			rng := rand.New(rand.NewPCG(seed, uint64(w)))
			fail := func(format string, a ...any) {
				mu.Lock()
				errs = append(errs, fmt.Sprintf(format, a...))
				mu.Unlock()
			}
			for !stop.Load() {
				k := keys[w][rng.IntN(len(keys[w]))]
				k.n++
				o := genOp(rng, k.name, k.class, k.n, tag)
				pipe := rdb.Pipeline()
				wc := pipe.Do(ctx, o.args...)
				rc := readCmds(ctx, pipe, k.name, k.class)
				sent := time.Now()
				_, _ = pipe.Exec(ctx)
				ack := time.Now()
				netErr := isNetErr(wc.Err())
				for _, c := range rc {
					netErr = netErr || isNetErr(c.Err())
				}
				if netErr {
					// The server is gone (killed): the write may or may not
					// have been applied.
					if !killed.Load() {
						fail("%s: %v / %v before the kill", o, wc.Err(), rc[0].Err())
					}
					k.inflight = &o
					return
				}
				if err := wc.Err(); err != nil && err != redis.Nil {
					fail("%s: error reply %v", o, err)
					return
				}
				st, err := parseState(k.class, rc, sent.UnixMilli(), ack.UnixMilli())
				if err != nil {
					fail("%s: read back: %v", o, err)
					return
				}
				// Self-check of the test's model of the commands.
				if prev := k.last().st; !sameState(prev, st) && !o.next(prev, st) {
					fail("%s: state %v after %v does not follow from the command", o, st, prev)
					return
				}
				k.hist = append(k.hist, rec{st: st, ack: ack})
				writes.Add(1)
			}
		}()
	}
	if sat != nil {
		for i := range sat.flooders {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := sat.flood(p, i, &stop); err != nil && !killed.Load() {
					mu.Lock()
					errs = append(errs, fmt.Sprintf("flood client %d: %v before the kill", i, err))
					mu.Unlock()
				}
			}()
		}
	}
	waitWorkers := func() {
		done := make(chan struct{})
		go func() { wg.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Fatal("load workers did not stop within 30s")
		}
	}
	if sat != nil && !clean {
		sat.waitSaturated(t, p, d)
	} else {
		<-time.After(d)
	}
	cut := time.Now()
	if clean {
		stop.Store(true)
		waitWorkers()
		p.stop(t)
	} else {
		// The workers are mid-load: they stop on the network error the
		// kill causes; killed only marks such errors as expected.
		killed.Store(true)
		p.kill(t)
		waitWorkers()
	}
	for _, e := range errs {
		t.Error(e)
	}
	rs.writes = int(writes.Load())
	for w := range keys {
		for _, k := range keys[w] {
			rs.states += len(k.hist) - 1
			if k.inflight != nil {
				rs.inflight++
			}
		}
	}
	return cut, rs
}

// verify reads every key from the restarted server p and checks its state
// against the key's history: window is the fsync mode, or "clean" after a
// SIGTERM. Each key's recovered state becomes the start of its next
// history.
func verify(t *testing.T, p *proc, keys *[crashWorkers][]*keyHist, window string, cut time.Time, rs *roundStats) {
	t.Helper()
	ctx := context.Background()
	rdb := client(p.addr, 1)
	defer rdb.Close()
	type read struct {
		k   *keyHist
		cmd []*redis.Cmd
	}
	var reads []read
	pipe := rdb.Pipeline()
	for w := range keys {
		for _, k := range keys[w] {
			reads = append(reads, read{k, readCmds(ctx, pipe, k.name, k.class)})
		}
	}
	sent := time.Now()
	_, _ = pipe.Exec(ctx)
	now := time.Now()
	nowMS := now.UnixMilli()
	bad := 0
	for _, r := range reads {
		k := r.k
		got, err := parseState(k.class, r.cmd, sent.UnixMilli(), nowMS)
		if err != nil {
			t.Errorf("key %s after restart: %v", k.name, err)
			bad++
			continue
		}
		if !got.absent {
			rs.present++
		}
		L := len(k.hist) - 1
		found := -1
		for i := L; i >= 0; i-- {
			allowed := false
			switch window {
			case "always", "clean":
				allowed = i == L
			case "everysec":
				allowed = i == L || !k.hist[i+1].ack.Before(cut.Add(-everysecWindow))
			case "no":
				allowed = true
			}
			if allowed && matches(k.hist[i].st, got, nowMS) {
				found = i
				break
			}
		}
		switch {
		case found == L:
			rs.atLast++
		case k.inflight != nil && k.inflight.next(k.hist[L].st, got):
			rs.applied++
		case found >= 0:
			rs.older++
			if lag := cut.Sub(k.hist[found+1].ack); lag > rs.maxLag {
				rs.maxLag = lag
			}
		default:
			bad++
			if bad <= 10 {
				var b strings.Builder
				for i := max(0, L-4); i <= L; i++ {
					fmt.Fprintf(&b, "\n\t\t[%d] %v (acknowledged %v before the cut)", i, k.hist[i].st, cut.Sub(k.hist[i].ack).Round(time.Microsecond))
				}
				infl := "none"
				if k.inflight != nil {
					infl = k.inflight.String()
				}
				t.Errorf("fsync %s: key %s recovered as %v, which is not allowed; in-flight write: %s; last states:%s",
					window, k.name, got, infl, b.String())
			}
		}
		k.hist = []rec{{st: got, ack: now}}
		k.inflight = nil
	}
	if bad > 10 {
		t.Errorf("fsync %s: %d keys in all recovered in a state not allowed", window, bad)
	}
	n, err := rdb.DBSize(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	if int(n) != rs.present {
		t.Errorf("DBSIZE %d after restart, %d of the test's keys present", n, rs.present)
	}
}
