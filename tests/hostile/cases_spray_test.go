package hostile

import (
	"bufio"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cellserver/cellserver/internal/resptest"
)

const oomMsg = "OOM command not allowed when used memory > 'maxmemory'."

// usedSlack is how far keyspace_memory may pass maxmemory: 4 KiB, about
// one key (~100 bytes estimated) per connection writing at the same
// moment, with room to spare. The cap is checked per shard, under that
// shard's lock only: two connections creating keys in different shards
// can both see room for one more key (allkeys-lru), and noeviction, like
// Redis, refuses only once used memory is over the cap, so the key that
// crosses it is stored. The test reports the overshoot seen.
const usedSlack = 4 * kib

// sprayResult counts the replies of a key spray.
type sprayResult struct {
	ok, oom, other int64
	examples       []string
}

// spray creates keys with CL.THROTTLE spray:<w>:<i> 5 1 3600 (one unit a
// hour: every key lives an hour) for i in [0, perConn) on conns
// connections, in pipelines of 1000 commands with at most 16 pipelines in
// flight per connection, a reader goroutine per connection. done counts
// the replies read.
func spray(addr string, conns, perConn int, done *atomic.Int64) (sprayResult, error) {
	const batch = 1000
	var res sprayResult
	var mu sync.Mutex
	var wg sync.WaitGroup
	errc := make(chan error, 2*conns)
	for w := 0; w < conns; w++ {
		c, err := net.DialTimeout("tcp", addr, 10*time.Second)
		if err != nil {
			return res, err
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(10 * time.Minute))
		inflight := make(chan struct{}, 16)
		dead := make(chan struct{}) // closed by the reader when it gives up
		wg.Add(2)
		go func() { // writer
			defer wg.Done()
			buf := make([]byte, 0, batch*64)
			prefix := "spray:" + strconv.Itoa(w) + ":"
			for i := 0; i < perConn; i += batch {
				buf = buf[:0]
				for j := i; j < min(i+batch, perConn); j++ {
					key := prefix + strconv.Itoa(j)
					buf = append(buf, "*5\r\n$11\r\nCL.THROTTLE\r\n$"...)
					buf = strconv.AppendInt(buf, int64(len(key)), 10)
					buf = append(buf, "\r\n"...)
					buf = append(buf, key...)
					buf = append(buf, "\r\n$1\r\n5\r\n$1\r\n1\r\n$4\r\n3600\r\n"...)
				}
				select {
				case inflight <- struct{}{}:
				case <-dead:
					return
				}
				if _, err := c.Write(buf); err != nil {
					errc <- fmt.Errorf("spray writer %d: %v", w, err)
					c.Close() // the reader stops too
					return
				}
			}
		}()
		go func() { // reader
			defer wg.Done()
			r := bufio.NewReaderSize(c, 256<<10)
			var ok, oom, other int64
			var ex []string
			defer close(dead)
			defer func() {
				mu.Lock()
				res.ok += ok
				res.oom += oom
				res.other += other
				if len(res.examples) < 5 {
					res.examples = append(res.examples, ex...)
				}
				mu.Unlock()
			}()
			for i := 0; i < perConn; i++ {
				line, err := r.ReadSlice('\n')
				if err != nil {
					errc <- fmt.Errorf("spray reader %d after %d replies: %v", w, i, err)
					c.Close()
					return
				}
				switch {
				case string(line) == "*5\r\n":
					for k := 0; k < 5; k++ {
						if l, err := r.ReadSlice('\n'); err != nil || l[0] != ':' {
							errc <- fmt.Errorf("spray reader %d: bad tuple element %q, %v", w, l, err)
							c.Close()
							return
						}
					}
					ok++
				case line[0] == '-' && strings.TrimSpace(string(line[1:])) == oomMsg:
					oom++
				default:
					other++
					if len(ex) < 5 {
						ex = append(ex, strings.TrimSpace(string(line)))
					}
				}
				done.Add(1)
				if (i+1)%batch == 0 || i+1 == perConn {
					<-inflight
				}
			}
		}()
	}
	wg.Wait()
	close(errc)
	return res, <-errc
}

// sprayMonitored sprays total keys over conns connections (spray) while
// sampling the server's memory (monitor); it returns the replies, the
// samples and how long the spray took.
func sprayMonitored(t *testing.T, a *attack, conns, total int) (sprayResult, []memSample, time.Duration) {
	t.Helper()
	var done atomic.Int64
	stop := make(chan struct{})
	samples := monitor(a.p, &done, stop)
	start := time.Now()
	res, err := spray(a.addr, conns, total/conns, &done)
	took := time.Since(start)
	close(stop)
	s := <-samples
	if err != nil {
		t.Fatal(err)
	}
	return res, s, took
}

// memSample is one reading during a spray.
type memSample struct {
	done            int64 // replies so far
	rss, used, evic int64
}

// monitor samples the server's RSS and INFO memory/stats figures every
// 100 ms until stop is closed.
func monitor(p *proc, done *atomic.Int64, stop <-chan struct{}) <-chan []memSample {
	out := make(chan []memSample, 1)
	go func() {
		var s []memSample
		rc, err := resptest.Dial(p.addr)
		if err != nil {
			out <- nil
			return
		}
		defer rc.Close()
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for k := 0; k < 6000; k++ { // 10 minutes at most
			m, err1 := infoOn(rc, "memory")
			st, err2 := infoOn(rc, "stats")
			if err1 == nil && err2 == nil {
				s = append(s, memSample{done: done.Load(), rss: p.rss(), used: infoInt(m, "keyspace_memory"), evic: infoInt(st, "evicted_keys")})
			}
			select {
			case <-stop:
				out <- s
				return
			case <-tick.C:
			}
		}
		out <- s
	}()
	return out
}

// at returns the last sample taken with at most n replies done.
func at(s []memSample, n int64) memSample {
	var last memSample
	for _, x := range s {
		if x.done > n {
			break
		}
		last = x
	}
	return last
}

// Case 7a: a key spray of 2,000,000 distinct CL.THROTTLE keys under --maxmemory 32mb, allkeys-lru, from 4 connections in
// pipelines of 1000. Every command is served (no error); keyspace_memory
// stays at or under 32 MiB (+ usedSlack) in every sample; evicted_keys grows through
// the second half; the memory stays proportional to the cap: the live
// heap at the server's last garbage collection (INFO go_heap_live) is at
// most 2 x maxmemory + 16 MiB. (RSS itself is not compared over time: the
// Go heap grows to twice its live size before a collection, GOGC=100, and
// the keyspace allocates so little per new key that RSS takes millions of
// keys to reach that ceiling; the RSS bound below caps it.) The keep key
// may be evicted (it is the least recently used): that is expected and
// noted.
//
// RSS bound: base + 128 MiB (32 MiB of estimated state, the real table
// overhead above the estimate, and GC headroom).
func caseSprayLRU(t *testing.T) {
	const conns = 4
	const total = 2000000
	const maxmem = 32 * mib
	a := begin(t, fmt.Sprintf("7a. spray of %d keys, --maxmemory 32mb allkeys-lru", total), false,
		"--maxmemory", "32mb", "--maxmemory-policy", "allkeys-lru")
	res, s, took := sprayMonitored(t, a, conns, total)
	if res.ok != int64(total) || res.other != 0 {
		t.Errorf("spray replies: %d tuples of %d, %d OOM, %d others (e.g. %v)", res.ok, total, res.oom, res.other, res.examples)
	}
	m, _ := info(a.addr, "memory")
	st, _ := info(a.addr, "stats")
	used, evicted := infoInt(m, "keyspace_memory"), infoInt(st, "evicted_keys")
	live := infoInt(m, "go_heap_live")
	s = append(s, memSample{done: int64(total), rss: a.p.rss(), used: used, evic: evicted})
	var maxUsed int64
	for _, x := range s {
		maxUsed = max(maxUsed, x.used)
	}
	if maxUsed > maxmem+usedSlack {
		t.Errorf("keyspace_memory reached %d, over maxmemory %d + %d", maxUsed, maxmem, usedSlack)
	}
	half := at(s, int64(total/2))
	if evicted == 0 || evicted <= half.evic {
		t.Errorf("evicted_keys %d at the end, %d at half way: not growing", evicted, half.evic)
	}
	if live <= 0 || live > 2*maxmem+16*mib {
		t.Errorf("live heap %s at the last collection: not proportional to maxmemory %s", mb(live), mb(maxmem))
	}
	q := func(f float64) string { return mb(at(s, int64(f*float64(total))).rss) }
	a.end(a.base+128*mib, "base + 128 MiB", true,
		fmt.Sprintf("%d keys in %v (%.0f/s); RSS at 25/50/75/100%%: %s / %s / %s / %s; keyspace_memory max %d B (cap %d, %+d B); live heap at the last GC %s; evicted_keys %d (%d at half way)",
			total, took.Round(time.Millisecond), float64(total)/took.Seconds(), q(0.25), q(0.5), q(0.75), mb(s[len(s)-1].rss),
			maxUsed, maxmem, maxUsed-maxmem, mb(live), evicted, half.evic))
}

// Case 7b: the same spray, 1,000,000 keys, under
// --maxmemory 32mb noeviction. Once the estimate reaches the cap, new keys
// get exactly Redis's OOM error; keys created before still answer
// (CL.THROTTLE on the first 100 sprayed keys returns a tuple), the keep key
// reads the same, keyspace_memory stays within the cap, oom_refusals
// counts the refusals. The probe's keys expire within 100 ms of its last
// call, and a probe key that expired cannot be created again while memory
// is full: those OOM replies count as answers and are shown.
//
// RSS bound: base + 128 MiB.
func caseSprayNoEviction(t *testing.T) {
	const conns = 4
	const total = 1000000
	const maxmem = 32 * mib
	a := begin(t, fmt.Sprintf("7b. spray of %d keys, --maxmemory 32mb noeviction", total), true,
		"--maxmemory", "32mb", "--maxmemory-policy", "noeviction")
	res, s, took := sprayMonitored(t, a, conns, total)
	if res.oom == 0 || res.ok == 0 || res.other != 0 {
		t.Errorf("spray replies: %d tuples, %d OOM, %d others (e.g. %v); want tuples then OOM errors only", res.ok, res.oom, res.other, res.examples)
	}
	rc := resptest.MustDial(t, a.addr)
	for i := 0; i < 100; i++ {
		v, err := rc.Do("CL.THROTTLE", "spray:0:"+strconv.Itoa(i), "5", "1", "3600")
		if len(v.Ints()) != 5 || err != nil {
			t.Fatalf("existing key spray:0:%d under noeviction: %v, %v", i, v, err)
		}
	}
	// A new key at the cap gets the OOM error. The probe's keys keep
	// expiring, and each one removed frees room for about one key, so a
	// few new keys may still fit: try up to 100 (at most 16 probe keys).
	fitted := 0
	for i := 0; ; i++ {
		v, err := rc.Do("CL.THROTTLE", "brand-new-key:"+strconv.Itoa(i), "5", "1", "3600")
		if err == nil && v.Kind == '-' && v.Str == oomMsg {
			break
		}
		if err != nil || len(v.Ints()) != 5 || i == 99 {
			t.Errorf("new key %d at the cap (after %d fitted): %v, %v; want %q", i, fitted, v, err, oomMsg)
			break
		}
		fitted++
	}
	m, _ := infoOn(rc, "memory")
	st, _ := infoOn(rc, "stats")
	rc.Close()
	used, refusals := infoInt(m, "keyspace_memory"), infoInt(st, "oom_refusals")
	maxUsed := used
	for _, x := range s {
		maxUsed = max(maxUsed, x.used)
	}
	if maxUsed > maxmem+usedSlack {
		t.Errorf("keyspace_memory reached %d, over maxmemory %d + %d", maxUsed, maxmem, usedSlack)
	}
	if refusals < res.oom+1 {
		t.Errorf("oom_refusals %d, fewer than the %d OOM replies seen", refusals, res.oom+1)
	}
	a.end(a.base+128*mib, "base + 128 MiB", false,
		fmt.Sprintf("%d keys in %v: %d created, %d refused with OOM; keyspace_memory max %d B (cap %d, %+d B); oom_refusals %d; first 100 keys and keep still answer",
			total, took.Round(time.Millisecond), res.ok, res.oom, maxUsed, maxmem, maxUsed-maxmem, refusals))
}
