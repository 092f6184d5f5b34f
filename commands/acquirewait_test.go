package commands_test

import (
	"context"
	"fmt"
	"net"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cellserver/cellserver/internal/servertest"
	"github.com/cellserver/cellserver/internal/testwait"
	"github.com/cellserver/cellserver/limiter"
	"github.com/cellserver/cellserver/persistence"
	"github.com/cellserver/cellserver/server"
	"github.com/redis/go-redis/v9"
)

// awServer starts a server on a manual clock and returns it with a
// client factory (each client one connection, generous read timeouts:
// waiters block).
func awServer(t *testing.T) (*servertest.Clock, func() *redis.Client) {
	t.Helper()
	clock := servertest.NewClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	_, addr := servertest.Start(t, server.Config{Clock: clock.Now})
	return clock, func() *redis.Client {
		rdb := redis.NewClient(&redis.Options{Addr: addr, Protocol: 2, PoolSize: 1, MaxRetries: -1, ReadTimeout: 60 * time.Second})
		t.Cleanup(func() { rdb.Close() })
		return rdb
	}
}

// leaseWaiters reads INFO clients' lease_waiters and lease_wait_queues.
func leaseWaiters(t *testing.T, rdb *redis.Client) (waiters, queues int) {
	t.Helper()
	s, err := rdb.Info(context.Background(), "clients").Result()
	if err != nil {
		t.Fatalf("INFO clients: %v", err)
	}
	for _, line := range strings.Split(s, "\r\n") {
		if v, ok := strings.CutPrefix(line, "lease_waiters:"); ok {
			waiters, _ = strconv.Atoi(v)
		}
		if v, ok := strings.CutPrefix(line, "lease_wait_queues:"); ok {
			queues, _ = strconv.Atoi(v)
		}
	}
	return waiters, queues
}

// eventually waits, up to a generous deadline, until cond holds.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testwait.Until(t, 20*time.Second, what, cond)
}

func waitersAre(t *testing.T, rdb *redis.Client, n int) func() bool {
	return func() bool { w, _ := leaseWaiters(t, rdb); return w == n }
}

type awReply struct {
	who string
	got []int64
	err error
}

// goAcquire runs CL.ACQUIRE args... on rdb in a goroutine; its reply
// arrives on out.
func goAcquire(rdb *redis.Client, who string, out chan<- awReply, args ...any) {
	go func() {
		v, err := rdb.Do(context.Background(), append([]any{"CL.ACQUIRE"}, args...)...).Int64Slice()
		out <- awReply{who, v, err}
	}()
}

func wantReply(t *testing.T, r awReply, who string, want []int64) {
	t.Helper()
	if r.err != nil || r.who != who || !slices.Equal(r.got, want) {
		t.Fatalf("reply %s %v %v, want %s %v", r.who, r.got, r.err, who, want)
	}
}

// recv waits, up to a generous deadline, for a reply on out.
func recv(t *testing.T, out <-chan awReply) awReply {
	t.Helper()
	select {
	case r := <-out:
		return r
	case <-time.After(20 * time.Second):
		t.Fatal("no reply within 20 s")
		return awReply{}
	}
}

func noReply(t *testing.T, out <-chan awReply) {
	t.Helper()
	select {
	case r := <-out:
		t.Fatalf("unexpected reply %s %v %v", r.who, r.got, r.err)
	default:
	}
}

// TestAcquireWaitServedOnRelease: a waiter blocks while the one lease is
// held, other clients are served meanwhile, and it gets the lease when
// another client releases it.
func TestAcquireWaitServedOnRelease(t *testing.T) {
	_, client := awServer(t)
	ctx := context.Background()
	a, b, c := client(), client(), client()
	if got, err := a.Do(ctx, "CL.ACQUIRE", "k", 1, "30s", "a").Int64Slice(); err != nil || !slices.Equal(got, []int64{0, 1, 0, -1, 30}) {
		t.Fatalf("a: %v %v", got, err)
	}
	out := make(chan awReply, 1)
	goAcquire(b, "b", out, "k", 1, "30s", "b", "WAIT", "10s")
	eventually(t, "b waits", waitersAre(t, c, 1))
	// Others are served while b waits, on the same key too.
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if got, err := c.Do(ctx, "CL.ACQUIRE", "k", 1, "30s", "c").Int64Slice(); err != nil || got[0] != 1 {
		t.Fatalf("c without WAIT: %v %v, want refused", got, err)
	}
	noReply(t, out)
	if n, err := a.Do(ctx, "CL.RELEASE", "k", "a").Int64(); err != nil || n != 1 {
		t.Fatalf("release: %v %v", n, err)
	}
	wantReply(t, recv(t, out), "b", []int64{0, 1, 0, -1, 30})
	info, err := c.Do(ctx, "CL.INFO", "k").Slice()
	if err != nil || fmt.Sprint(info) != "[kind concurrency leases 1 tokens [b] ttl_ms 30000]" {
		t.Fatalf("CL.INFO: %v %v", info, err)
	}
	if w, q := leaseWaiters(t, c); w != 0 || q != 0 {
		t.Fatalf("after: %d waiters, %d queues", w, q)
	}
}

// TestAcquireWaitFIFO: three waiters queued in order get the lease in that
// order, one per release.
func TestAcquireWaitFIFO(t *testing.T) {
	_, client := awServer(t)
	ctx := context.Background()
	a, obs := client(), client()
	a.Do(ctx, "CL.ACQUIRE", "k", 1, "30s", "a")
	out := make(chan awReply, 3)
	names := []string{"w1", "w2", "w3"}
	for i, who := range names {
		goAcquire(client(), who, out, "k", 1, "30s", who, "WAIT", "60s", "MS")
		eventually(t, who+" queued", waitersAre(t, obs, i+1))
	}
	holder := "a"
	for i, who := range names {
		if n, err := a.Do(ctx, "CL.RELEASE", "k", holder).Int64(); err != nil || n != 1 {
			t.Fatalf("release %s: %v %v", holder, n, err)
		}
		wantReply(t, recv(t, out), who, []int64{0, 1, 0, -1, 30000})
		if w, _ := leaseWaiters(t, obs); w != len(names)-1-i {
			t.Fatalf("after %s served: %d waiters", who, w)
		}
		noReply(t, out)
		holder = who
	}
}

// TestAcquireWaitQueueLimit: with QUEUE 2, a third waiter is refused at
// once, as CL.ACQUIRE without WAIT would be.
func TestAcquireWaitQueueLimit(t *testing.T) {
	_, client := awServer(t)
	ctx := context.Background()
	a, obs := client(), client()
	a.Do(ctx, "CL.ACQUIRE", "k", 1, "30s", "a")
	out := make(chan awReply, 2)
	goAcquire(client(), "w1", out, "k", 1, "30s", "w1", "WAIT", "60s", "QUEUE", 2)
	eventually(t, "w1 queued", waitersAre(t, obs, 1))
	goAcquire(client(), "w2", out, "k", 1, "30s", "w2", "WAIT", "60s", "QUEUE", 2)
	eventually(t, "w2 queued", waitersAre(t, obs, 2))
	got, err := client().Do(ctx, "CL.ACQUIRE", "k", 1, "30s", "w3", "WAIT", "60s", "QUEUE", 2).Int64Slice()
	if err != nil || !slices.Equal(got, []int64{1, 1, 0, 30, 30}) {
		t.Fatalf("w3 over QUEUE 2: %v %v, want refused at once", got, err)
	}
	// Another key's queue is its own.
	a.Do(ctx, "CL.ACQUIRE", "other", 1, "30s", "a")
	goAcquire(client(), "o1", out, "other", 1, "30s", "o1", "WAIT", "60s", "QUEUE", 2)
	eventually(t, "o1 queued", waitersAre(t, obs, 3))
	if _, q := leaseWaiters(t, obs); q != 2 {
		t.Fatalf("%d queues, want 2", q)
	}
}

// TestAcquireWaitTimeout: on the server's clock, a waiter whose timeout
// passes gets the refused reply of its key at that instant.
func TestAcquireWaitTimeout(t *testing.T) {
	clock, client := awServer(t)
	ctx := context.Background()
	a, obs := client(), client()
	a.Do(ctx, "CL.ACQUIRE", "k", 1, "30s", "a")
	out := make(chan awReply, 1)
	goAcquire(client(), "w", out, "k", 1, "30s", "w", "WAIT", "5s")
	eventually(t, "w queued", waitersAre(t, obs, 1))
	clock.Advance(4999 * time.Millisecond)
	// The clock is short of the timeout: w still waits.
	for range 5 {
		if w, _ := leaseWaiters(t, obs); w != 1 {
			t.Fatalf("before the timeout: %d waiters", w)
		}
	}
	noReply(t, out)
	clock.Advance(time.Millisecond)
	wantReply(t, recv(t, out), "w", []int64{1, 1, 0, 25, 25})
	if w, q := leaseWaiters(t, obs); w != 0 || q != 0 {
		t.Fatalf("after: %d waiters, %d queues", w, q)
	}
}

// TestAcquireWaitLeaseExpires: a lease that expires (no release) goes to
// the head waiter.
func TestAcquireWaitLeaseExpires(t *testing.T) {
	clock, client := awServer(t)
	ctx := context.Background()
	a, obs := client(), client()
	a.Do(ctx, "CL.ACQUIRE", "k", 1, "10s", "a")
	out := make(chan awReply, 1)
	goAcquire(client(), "w", out, "k", 1, "10s", "w", "WAIT", "60s")
	eventually(t, "w queued", waitersAre(t, obs, 1))
	clock.Advance(10 * time.Second)
	wantReply(t, recv(t, out), "w", []int64{0, 1, 0, -1, 10})
}

// TestAcquireWaitDisconnect: a waiter that hangs up leaves the queue, and
// the lease freed later is not given to it.
func TestAcquireWaitDisconnect(t *testing.T) {
	_, client := awServer(t)
	ctx := context.Background()
	a, obs := client(), client()
	a.Do(ctx, "CL.ACQUIRE", "k", 1, "30s", "a")
	addr := obs.Options().Addr
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := nc.Write([]byte("*7\r\n$10\r\nCL.ACQUIRE\r\n$1\r\nk\r\n$1\r\n1\r\n$3\r\n30s\r\n$5\r\nghost\r\n$4\r\nWAIT\r\n$3\r\n60s\r\n")); err != nil {
		t.Fatal(err)
	}
	eventually(t, "ghost queued", waitersAre(t, obs, 1))
	nc.Close()
	eventually(t, "ghost gone", func() bool { w, q := leaseWaiters(t, obs); return w == 0 && q == 0 })
	a.Do(ctx, "CL.RELEASE", "k", "a")
	if n, err := obs.Exists(ctx, "k").Result(); err != nil || n != 0 {
		t.Fatalf("k after release: exists %d %v, want the lease not given to the ghost", n, err)
	}
}

// TestAcquireWaitNoLeak: many waiters come and go (served, timed out,
// disconnected) on several keys; afterwards no queue or waiter is left.
func TestAcquireWaitNoLeak(t *testing.T) {
	clock, client := awServer(t)
	ctx := context.Background()
	obs := client()
	const keys, perKey = 4, 8
	var wg sync.WaitGroup
	served := make(chan awReply, keys*perKey)
	for k := range keys {
		key := "k" + strconv.Itoa(k)
		obs.Do(ctx, "CL.ACQUIRE", key, 1, "30s", "holder")
		for i := range perKey {
			rdb := client()
			wg.Add(1)
			go func() {
				defer wg.Done()
				who := fmt.Sprintf("%s-%d", key, i)
				v, err := rdb.Do(ctx, "CL.ACQUIRE", key, 1, "30s", who, "WAIT", strconv.Itoa(1+i%3)+"s").Int64Slice()
				served <- awReply{who, v, err}
			}()
		}
	}
	// Ghosts: raw connections that queue on k0 and hang up.
	const ghosts = 5
	var ncs []net.Conn
	for i := range ghosts {
		nc, err := net.Dial("tcp", obs.Options().Addr)
		if err != nil {
			t.Fatal(err)
		}
		tok := "ghost" + strconv.Itoa(i)
		fmt.Fprintf(nc, "*7\r\n$10\r\nCL.ACQUIRE\r\n$2\r\nk0\r\n$1\r\n1\r\n$3\r\n30s\r\n$%d\r\n%s\r\n$4\r\nWAIT\r\n$3\r\n60s\r\n", len(tok), tok)
		ncs = append(ncs, nc)
	}
	eventually(t, "all queued", waitersAre(t, obs, keys*perKey+ghosts))
	for _, nc := range ncs {
		nc.Close()
	}
	eventually(t, "ghosts gone", waitersAre(t, obs, keys*perKey))
	// Release one lease per key: the heads are served; then the clock runs
	// past every timeout.
	for k := range keys {
		obs.Do(ctx, "CL.RELEASE", "k"+strconv.Itoa(k), "holder")
	}
	clock.Advance(3 * time.Second)
	wg.Wait()
	close(served)
	admitted := 0
	for r := range served {
		if r.err != nil {
			t.Fatalf("%s: %v", r.who, r.err)
		}
		if r.got[0] == 0 {
			admitted++
		}
	}
	if admitted != keys {
		t.Fatalf("%d admitted, want %d (one lease per key)", admitted, keys)
	}
	eventually(t, "no queue left", func() bool { w, q := leaseWaiters(t, obs); return w == 0 && q == 0 })
}

// TestAcquireWaitConcurrent: 16 clients, limit 2, each 5 times takes a
// lease with WAIT, holds it and releases it, while the clock stands still
// (no lease expires): never more than 2 hold a lease (counted by the
// clients between the admitted reply and their CL.RELEASE), every call
// is admitted, and no waiter is left.
func TestAcquireWaitConcurrent(t *testing.T) {
	_, client := awServer(t)
	ctx := context.Background()
	const clients, rounds, limit = 16, 5, 2
	var mu sync.Mutex
	holding, most, admitted := 0, 0, 0
	errs := make(chan error, clients)
	var wg sync.WaitGroup
	for i := range clients {
		rdb := client()
		wg.Add(1)
		go func() {
			defer wg.Done()
			tok := "c" + strconv.Itoa(i)
			for range rounds {
				v, err := rdb.Do(ctx, "CL.ACQUIRE", "k", limit, "30s", tok, "WAIT", "60s", "QUEUE", clients).Int64Slice()
				if err != nil || v[0] != 0 {
					errs <- fmt.Errorf("%s: %v %v", tok, v, err)
					return
				}
				mu.Lock()
				holding++
				admitted++
				most = max(most, holding)
				mu.Unlock()
				runtime.Gosched()
				mu.Lock()
				holding--
				mu.Unlock()
				if n, err := rdb.Do(ctx, "CL.RELEASE", "k", tok).Int64(); err != nil || n != 1 {
					errs <- fmt.Errorf("%s release: %v %v", tok, n, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if most > limit || admitted != clients*rounds {
		t.Fatalf("at most %d held at once (limit %d), %d admitted of %d", most, limit, admitted, clients*rounds)
	}
	if w, q := leaseWaiters(t, client()); w != 0 || q != 0 {
		t.Fatalf("after: %d waiters, %d queues", w, q)
	}
	t.Logf("%d acquisitions, at most %d leases held at once", admitted, most)
}

// TestAcquireWaitUnblockedOnReplicaOf: a waiter whose node becomes a
// read-only replica is answered UNBLOCKED, as Redis answers its blocked
// clients, and leaves the queue.
func TestAcquireWaitUnblockedOnReplicaOf(t *testing.T) {
	_, client := awServer(t)
	ctx := context.Background()
	a, obs := client(), client()
	a.Do(ctx, "CL.ACQUIRE", "k", 1, "30s", "a")
	out := make(chan awReply, 1)
	goAcquire(client(), "w", out, "k", 1, "30s", "w", "WAIT", "60s")
	eventually(t, "w queued", waitersAre(t, obs, 1))
	ln, err := net.Listen("tcp", "127.0.0.1:0") // a primary that never answers
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	if err := obs.Do(ctx, "REPLICAOF", "127.0.0.1", port).Err(); err != nil {
		t.Fatal(err)
	}
	defer obs.Do(ctx, "REPLICAOF", "NO", "ONE")
	r := recv(t, out)
	if r.err == nil || !strings.HasPrefix(r.err.Error(), "UNBLOCKED force unblock") {
		t.Fatalf("w: %v %v, want UNBLOCKED", r.got, r.err)
	}
	if w, q := leaseWaiters(t, obs); w != 0 || q != 0 {
		t.Fatalf("after: %d waiters, %d queues", w, q)
	}
}

// TestAcquireWaitPersisted: the lease a waiter is given when another
// client releases reaches the persistence store as the key's value.
func TestAcquireWaitPersisted(t *testing.T) {
	store := persistence.NewMemory()
	addr, _ := startWithStore(t, store)
	ctx := context.Background()
	newClient := func() *redis.Client {
		rdb := redis.NewClient(&redis.Options{Addr: addr, Protocol: 2, PoolSize: 1, MaxRetries: -1, ReadTimeout: 60 * time.Second})
		t.Cleanup(func() { rdb.Close() })
		return rdb
	}
	a, obs := newClient(), newClient()
	a.Do(ctx, "CL.ACQUIRE", "k", 1, "1h", "a")
	out := make(chan awReply, 1)
	goAcquire(newClient(), "w", out, "k", 1, "1h", "w", "WAIT", "60s")
	eventually(t, "w queued", waitersAre(t, obs, 1))
	a.Do(ctx, "CL.RELEASE", "k", "a")
	wantReply(t, recv(t, out), "w", []int64{0, 1, 0, -1, 3600})
	var toks []string
	waitCond(t, "w's lease in the store", func() bool {
		store.Load(func(db int, key, value []byte) error {
			if string(key) == "k" {
				v, _ := persistence.DecodeValue(value)
				ls, ok := v.Obj.(*limiter.Leases)
				if !ok {
					ls = new(limiter.Leases)
					ls.Unpack(v.N, v.M)
				}
				toks = ls.Tokens(time.Now().UnixNano())
			}
			return nil
		})
		return slices.Equal(toks, []string{"w"})
	})
}
