// Package httpfault stops and restarts cellserver under steady HTTP
// traffic through the httplimit middleware, once per OnError mode, and
// reports what every request got and how long it waited.
package httpfault

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/cellserver/cellserver/cellservertest"
	"github.com/cellserver/cellserver/client"
	"github.com/cellserver/cellserver/client/httplimit"
)

const (
	clients  = 8                     // client IPs, each one request per round
	quota    = 5                     // per IP per window
	window   = 10 * time.Second      // GCRA: burst 5, one more every 2 s
	deadline = 50 * time.Millisecond // Options.Deadline
	share    = 0.4                   // Local: 2 per 10 s in this process
	// margin is the scheduling allowance above the deadline for one
	// request's wait on a loaded 2-core machine under -race: the bound the
	// test asserts. The waits are reported.
	margin = 450 * time.Millisecond
	rounds = 20 // rounds per phase, one injected second apart
)

// phase is what the requests of one phase got.
type phase struct {
	name    string
	codes   map[int]int
	sources map[string]int
	perIP   [clients]int // admitted (200) per client
	maxWait time.Duration
	waits   []time.Duration
}

func (p *phase) String() string {
	sort.Slice(p.waits, func(i, j int) bool { return p.waits[i] < p.waits[j] })
	med := p.waits[len(p.waits)/2]
	return fmt.Sprintf("%-9s codes %v sources %v admitted per IP %v wait median %v max %v",
		p.name, p.codes, p.sources, p.perIP, med.Round(time.Microsecond), p.maxWait.Round(time.Microsecond))
}

// quiet drops go-redis's log lines (a refused dial per probe).
type quiet struct{}

func (quiet) Printf(context.Context, string, ...any) {}

func TestMain(m *testing.M) {
	redis.SetLogger(quiet{})
	os.Exit(m.Run())
}

// TestStopRestart: three phases of 20 rounds, one injected second apart,
// each round one request from each of 8 client IPs at once: cellserver up,
// cellserver stopped, cellserver restarted (empty: no data directory).
func TestStopRestart(t *testing.T) {
	for _, mode := range []httplimit.FailMode{httplimit.Open, httplimit.Closed, httplimit.Local} {
		t.Run(mode.String(), func(t *testing.T) { scenario(t, mode) })
	}
}

func scenario(t *testing.T, mode httplimit.FailMode) {
	s := cellservertest.Run(t)
	// PoolSize: once as many dials as the pool's size have failed,
	// go-redis v9.23 answers every new dial with the last dial error until
	// its own background dial, once a second of real time, succeeds. With
	// a pool of 16, that kept the breaker flapping for 1.04-1.07 s of real
	// time after the restart (38-54 recoveries; see the README). A pool
	// larger than the probes of the outage shows the middleware's own
	// recovery, exactly.
	rdb := redis.NewClient(&redis.Options{Addr: s.Addr(), ContextTimeoutEnabled: true,
		MaxRetries: -1, DialTimeout: time.Second, PoolSize: 1000})
	t.Cleanup(func() { rdb.Close() })
	var mu sync.Mutex
	var cur *phase
	mw, err := httplimit.New(client.New(rdb), httplimit.Options{
		Limits:     []httplimit.Limit{{Name: "per-ip", Quota: quota, Window: window, Key: httplimit.ClientIP()}},
		Deadline:   deadline,
		OnError:    mode,
		LocalShare: share,
		Clock:      s.Now,
		OnDecision: func(r *http.Request, d httplimit.Decision) {
			mu.Lock()
			cur.sources[d.Source.String()]++
			mu.Unlock()
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	h := mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))

	var p *phase
	run1 := func(n int) {
		for range n {
			var wg sync.WaitGroup
			for ip := range clients {
				wg.Add(1)
				go func() {
					defer wg.Done()
					req := httptest.NewRequest("GET", "/", nil)
					req.RemoteAddr = fmt.Sprintf("192.0.2.%d:4321", ip+1)
					rec := httptest.NewRecorder()
					began := time.Now()
					h.ServeHTTP(rec, req)
					wait := time.Since(began)
					mu.Lock()
					defer mu.Unlock()
					p.codes[rec.Code]++
					p.waits = append(p.waits, wait)
					p.maxWait = max(p.maxWait, wait)
					if rec.Code == http.StatusOK {
						p.perIP[ip]++
					}
					if rec.Code == http.StatusServiceUnavailable && rec.Header().Get("Retry-After") == "" {
						t.Errorf("%s: 503 without Retry-After", p.name)
					}
				}()
			}
			wg.Wait()
			s.Advance(time.Second)
		}
	}
	begin := func(name string) {
		mu.Lock()
		p = &phase{name: name, codes: map[int]int{}, sources: map[string]int{}}
		cur = p
		mu.Unlock()
	}
	end := func() *phase {
		t.Logf("%s: %v", mode, p)
		if p.maxWait > deadline+margin {
			t.Errorf("%s %s: a request waited %v, more than the deadline %v plus %v", mode, p.name, p.maxWait, deadline, margin)
		}
		return p
	}
	run := func(name string) *phase {
		begin(name)
		run1(rounds)
		return end()
	}
	// GCRA, burst 5, one unit every 2 s, one request a second from t=0:
	// t=0..8 are admitted (the TAT reaches now+10 s at t=8), then every
	// other second: t=10, 12, 14, 16, 18. 14 of 20.
	const upWant = 14
	up := run("up")
	for ip, n := range up.perIP {
		if n != upWant {
			t.Errorf("up: client %d admitted %d, want %d", ip, n, upWant)
		}
	}
	if up.sources["server"]+up.sources["denycache"] != rounds*clients {
		t.Errorf("up: sources %v, want every decision from cellserver or the deny cache", up.sources)
	}

	if err := s.Stop(); err != nil {
		t.Fatal(err)
	}
	down := run("down")
	total := rounds * clients
	switch mode {
	case httplimit.Open:
		if down.codes[http.StatusOK] != total {
			t.Errorf("open: codes %v, want all %d admitted", down.codes, total)
		}
	case httplimit.Closed:
		if down.codes[http.StatusServiceUnavailable] != total {
			t.Errorf("closed: codes %v, want all %d answered 503", down.codes, total)
		}
	case httplimit.Local:
		// Local quota ceil-or-floor(0.4 x 5) = 2: burst 2, one unit every
		// 5 s; one request a second from a fresh state: t=0, 1, then t=5,
		// 10, 15. 5 of 20, against 14 with cellserver up.
		const localWant = 5
		for ip, n := range down.perIP {
			if n != localWant {
				t.Errorf("local: client %d admitted %d while cellserver was down, want %d", ip, n, localWant)
			}
		}
	}
	st := mw.Stats()
	t.Logf("%s: after the outage: %+v", mode, st)

	if err := s.Restart(); err != nil {
		t.Fatal(err)
	}
	// The next probe (one per injected second) finds cellserver; the
	// requests of the same round decided while it ran fall back. No sleep:
	// the probe's dial succeeds at once (deadline: 15 s of real time).
	restarted := time.Now()
	recovering := 0
	begin("recovering")
	for mw.Stats().Recoveries == 0 {
		if time.Since(restarted) > 15*time.Second {
			t.Fatalf("restarted: no recovery after %d rounds in %v; stats %+v", recovering, time.Since(restarted), mw.Stats())
		}
		run1(1)
		recovering++
	}
	end()
	t.Logf("%s: recovered %v (real time) after the restart, in round %d", mode, time.Since(restarted).Round(time.Millisecond), recovering)
	back := run("restarted")
	// From now on cellserver decides, from the restarted server's empty
	// state: every decision comes from it (or the deny cache it filled).
	if back.sources["server"]+back.sources["denycache"] != rounds*clients {
		t.Errorf("restarted: sources %v, want every decision from cellserver or the deny cache", back.sources)
	}
	for ip, n := range back.perIP {
		if n != upWant {
			t.Errorf("restarted: client %d admitted %d, want %d (the restarted server starts empty)", ip, n, upWant)
		}
	}
	if n := mw.Stats().Recoveries; n != 1 {
		t.Errorf("restarted: %d recoveries, want 1 (the breaker opened again)", n)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, found, err := client.New(rdb).Info(ctx, "rl:per-ip:192.0.2.1"); err != nil || !found {
		t.Errorf("restarted: no state for client 1 on cellserver (%v)", err)
	}
}
