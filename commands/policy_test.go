package commands_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cellserver/cellserver/internal/servertest"
	"github.com/cellserver/cellserver/server"
	"github.com/redis/go-redis/v9"
)

// policyServer starts a server (manual clock) on the policy file src,
// which write replaces.
func policyServer(t *testing.T, src string) (rdb *redis.Client, write func(string)) {
	rdb, write, _ = policyServerClock(t, src)
	return rdb, write
}

func policyServerClock(t *testing.T, src string) (rdb *redis.Client, write func(string), clk *servertest.Clock) {
	t.Helper()
	file := filepath.Join(t.TempDir(), "policies.yaml")
	write = func(s string) {
		t.Helper()
		// Written whole, then renamed: a reload reads one version.
		tmp := file + ".tmp"
		if err := os.WriteFile(tmp, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, file); err != nil {
			t.Fatal(err)
		}
	}
	write(src)
	clk = servertest.NewClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	_, addr := servertest.Start(t, server.Config{Clock: clk.Now, Policies: file})
	rdb = redis.NewClient(&redis.Options{Addr: addr, PoolSize: 16, Protocol: 2})
	t.Cleanup(func() { rdb.Close() })
	return rdb, write, clk
}

// The two definitions the reload test alternates between. p is a single
// limit whose limit changes; h is a hierarchy whose member key and limit
// change together; keep is the same in both.
func reloadDef(limit int, prefix string) string {
	return fmt.Sprintf(`policies:
  - {name: p, algorithm: fixed, limit: %d, period: 1h}
  - {name: m, algorithm: fixed, limit: %d, period: 1h}
  - name: h
    all:
      - {policy: m, key: "%s:${key}"}
      - {policy: keep, key: "keep:${key}"}
  - {name: keep, algorithm: sliding_log, limit: 100000000, period: 1h}
`, limit, limit, prefix)
}

// TestPolicyReloadAtomic: clients call CL.APPLY on a single-limit policy
// and on a hierarchy while another client reloads between two
// definitions. Every reply matches exactly one definition; each call was
// decided with one Set (a hierarchy's member key and limit come from the
// same one: the calls that charged A:k are exactly the replies with A's
// limit); the state of the policy the reloads do not change is kept.
func TestPolicyReloadAtomic(t *testing.T) {
	const limA, limB = 1000000, 2000000
	rdb, write := policyServer(t, reloadDef(limA, "A"))
	ctx := context.Background()
	const workers, calls = 4, 300
	stop := make(chan struct{})
	var reloads int
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // the reloader
		defer wg.Done()
		adm := redis.NewClient(&redis.Options{Addr: rdb.Options().Addr, Protocol: 2})
		defer adm.Close()
		for i := 1; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			if i%2 == 1 {
				write(reloadDef(limB, "B"))
			} else {
				write(reloadDef(limA, "A"))
			}
			if err := adm.Do(ctx, "CL.POLICY", "RELOAD").Err(); err != nil {
				t.Errorf("reload: %v", err)
				return
			}
			reloads++
		}
	}()
	type reply struct{ limit, remaining int64 }
	pReplies := make([][]reply, workers)
	hReplies := make([][]reply, workers)
	var cw sync.WaitGroup
	for w := range workers {
		cw.Add(1)
		go func() {
			defer cw.Done()
			for range calls {
				for _, c := range []struct {
					pol string
					out *[]reply
				}{{"p", &pReplies[w]}, {"h", &hReplies[w]}} {
					v, err := rdb.Do(ctx, "CL.APPLY", "k", c.pol).Int64Slice()
					if err != nil || len(v) != 5 {
						t.Errorf("CL.APPLY k %s: %v, %v", c.pol, v, err)
						return
					}
					*c.out = append(*c.out, reply{v[1], v[2]})
				}
			}
		}()
	}
	cw.Wait()
	close(stop)
	wg.Wait()

	// p: the replies' counts (limit - remaining) are 1..N, each once: every
	// call incremented the one key, and each reply's remaining was
	// computed with the limit it shows.
	seen := map[int64]bool{}
	byLimit := map[int64]int{}
	for _, rs := range pReplies {
		for _, r := range rs {
			if r.limit != limA && r.limit != limB {
				t.Fatalf("p: limit %d is neither definition's", r.limit)
			}
			n := r.limit - r.remaining
			if n < 1 || n > workers*calls || seen[n] {
				t.Fatalf("p: count %d (limit %d, remaining %d) out of 1..%d or repeated", n, r.limit, r.remaining, workers*calls)
			}
			seen[n] = true
			byLimit[r.limit]++
		}
	}
	// h: the replies name the member with the least remaining, m (limit
	// 1e6 or 2e6 against keep's 1e8 minus its count). Check the keys:
	// A:k was charged by exactly the calls decided with A, B:k by B's.
	hA, hB := 0, 0
	for _, rs := range hReplies {
		for _, r := range rs {
			switch r.limit {
			case limA:
				hA++
			case limB:
				hB++
			default:
				t.Fatalf("h: limit %d is neither definition's", r.limit)
			}
		}
	}
	count := func(key string) int {
		t.Helper()
		m, err := rdb.Do(ctx, "CL.INFO", key).Result()
		if err == redis.Nil {
			return 0
		}
		if err != nil {
			t.Fatal(err)
		}
		fields := m.([]any)
		for i := 0; i+1 < len(fields); i += 2 {
			if fields[i] == "count" || fields[i] == "units" {
				return int(fields[i+1].(int64))
			}
		}
		t.Fatalf("CL.INFO %s: %v", key, m)
		return 0
	}
	// keep, unchanged by every reload, kept its state: one unit per call.
	if a, b, kept := count("A:k"), count("B:k"), count("keep:k"); a != hA || b != hB || kept != workers*calls {
		t.Fatalf("h: A:k %d (want %d replies with A's limit), B:k %d (want %d), keep:k %d (want %d)", a, hA, b, hB, kept, workers*calls)
	}
	if reloads < 2 || byLimit[limA] == 0 || byLimit[limB] == 0 {
		t.Fatalf("the traffic did not see both definitions: %d reloads, replies by limit %v", reloads, byLimit)
	}
	t.Logf("%d reloads; p: %d replies (%v by limit); h: %d with A, %d with B", reloads, len(seen), byLimit, hA, hB)
}

// TestPolicyHierarchyAllOrNothing: a hierarchy's refused member charges
// none of the others, a shadow member never blocks, and an invalid
// reload leaves the policies in force.
func TestPolicyHierarchyAllOrNothing(t *testing.T) {
	rdb, write := policyServer(t, `policies:
  - {name: user, algorithm: fixed, limit: 2, period: 1h}
  - {name: ip, algorithm: gcra, burst: 0, count: 1, period: 1h}
  - {name: cand, algorithm: fixed, limit: 1, period: 1h, shadow: true}
  - name: req
    all:
      - {policy: user, key: "user:${key}"}
      - {policy: ip, key: "ip:${key}"}
      - {policy: cand, key: "cand:${key}"}
`)
	ctx := context.Background()
	do := func(args ...any) []int64 {
		t.Helper()
		v, err := rdb.Do(ctx, args...).Int64Slice()
		if err != nil {
			t.Fatalf("%v: %v", args, err)
		}
		return v
	}
	if v := do("CL.APPLY", "u", "req"); v[0] != 0 {
		t.Fatalf("first call limited: %v", v)
	}
	// ip (1 per hour, no burst) refuses the second call: user is not charged.
	if v := do("CL.APPLY", "u", "req"); v[0] != 1 || v[1] != 1 {
		t.Fatalf("second call: %v, want ip's refusal [1 1 ...]", v)
	}
	if v := do("CL.FIXED", "user:u", "2", "1h", "0"); v[2] != 1 {
		t.Fatalf("user:u after a refused call: remaining %d, want 1 (charged once)", v[2])
	}
	// cand (shadow, limit 1) refused the second call too, but never blocks:
	// with ip out of the way (another key), the call is admitted.
	if v := do("CL.APPLY", "w", "req"); v[0] != 0 {
		t.Fatalf("w: %v", v)
	}
	do("CL.FIXED", "cand:x", "1", "1h") // cand full for x
	if v := do("CL.APPLY", "x", "req"); v[0] != 0 {
		t.Fatalf("x with its shadow member full: %v, want admitted", v)
	}
	if v := do("CL.FIXED", "user:x", "2", "1h", "0"); v[2] != 1 {
		t.Fatalf("user:x: remaining %d, want 1", v[2])
	}
	info, err := rdb.Info(ctx, "policies").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range []string{"policy_req:allowed=3,limited=1,", "policy_cand:allowed=2,limited=0,shadow_limited=2"} {
		if !strings.Contains(info, l) {
			t.Errorf("INFO policies lacks %q:\n%s", l, info)
		}
	}
	write("policies:\n  - {name: req, algorithm: fixed}\n  - {name: x, all: [{policy: nope}]}\n")
	err = rdb.Do(ctx, "CL.POLICY", "RELOAD").Err()
	if err == nil || !strings.Contains(err.Error(), "3 problems") || !strings.Contains(err.Error(), `unknown member policy "nope"`) {
		t.Fatalf("invalid reload: %v", err)
	}
	if names, err := rdb.Do(ctx, "CL.POLICY", "LIST").StringSlice(); err != nil || strings.Join(names, ",") != "cand,ip,req,user" {
		t.Fatalf("after a refused reload: %v, %v", names, err)
	}
	// INFO says the reload was refused; the set in force is the one loaded
	// at start (the clock has not moved).
	info, err = rdb.Info(ctx, "policies").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range []string{"policies_loaded:4\r\n", "policies_last_load_time:1767225600\r\n", "policies_last_reload_status:err\r\n"} {
		if !strings.Contains(info, l) {
			t.Errorf("INFO policies after a refused reload lacks %q:\n%s", l, info)
		}
	}
}

// TestPolicyParamChangeAsCommand: after a reload changes a policy's
// parameters, CL.APPLY on a key with state answers exactly what the
// direct command answers, with the new arguments, on a key with the same
// history: the stored state is kept and read with the new parameters.
func TestPolicyParamChangeAsCommand(t *testing.T) {
	type def struct {
		yaml   string
		direct []string // the direct command's arguments after the key
	}
	cases := []struct {
		name string
		a, b def
	}{
		{"gcra", def{"algorithm: gcra, burst: 5, count: 1, period: 10", []string{"CL.THROTTLE", "5", "1", "10"}},
			def{"algorithm: gcra, burst: 1, count: 2, period: 10", []string{"CL.THROTTLE", "1", "2", "10"}}},
		{"fixed", def{"algorithm: fixed, limit: 5, period: 10s", []string{"CL.FIXED", "5", "10s"}},
			def{"algorithm: fixed, limit: 4, period: 20s", []string{"CL.FIXED", "4", "20s"}}},
		{"fixed-fresh-window", def{"algorithm: fixed, limit: 5, period: 10s", []string{"CL.FIXED", "5", "10s"}},
			def{"algorithm: fixed, limit: 4, period: 7s", []string{"CL.FIXED", "4", "7s"}}},
		{"sliding", def{"algorithm: sliding, limit: 5, period: 10s", []string{"CL.SLIDING", "5", "10s"}},
			def{"algorithm: sliding, limit: 2, period: 20s", []string{"CL.SLIDING", "2", "20s"}}},
		{"sliding_log", def{"algorithm: sliding_log, limit: 5, period: 10s", []string{"CL.SLIDINGLOG", "5", "10s"}},
			def{"algorithm: sliding_log, limit: 3, period: 20s", []string{"CL.SLIDINGLOG", "3", "20s"}}},
		{"concurrency", def{"algorithm: concurrency, limit: 3, lease: 30s", []string{"CL.ACQUIRE", "3", "30s"}},
			def{"algorithm: concurrency, limit: 2, lease: 10s", []string{"CL.ACQUIRE", "2", "10s"}}},
	}
	file := func(pick func(a, b def) def) string {
		var b strings.Builder
		b.WriteString("policies:\n")
		for _, c := range cases {
			fmt.Fprintf(&b, "  - {name: %s, %s}\n", c.name, pick(c.a, c.b).yaml)
		}
		return b.String()
	}
	rdb, write, clk := policyServerClock(t, file(func(a, b def) def { return a }))
	ctx := context.Background()
	call := func(args ...string) string {
		t.Helper()
		a := make([]any, len(args))
		for i, s := range args {
			a[i] = s
		}
		v, err := rdb.Do(ctx, a...).Result()
		return fmt.Sprint(v, err)
	}
	step := func(pick func(a, b def) def, calls int) (checked int) {
		for i := range calls {
			for _, c := range cases {
				d := pick(c.a, c.b)
				pk, dk := "p:"+c.name, "d:"+c.name
				var extra []string
				if c.name == "concurrency" {
					extra = []string{fmt.Sprintf("tok%d", i)}
				}
				have := call(append([]string{"CL.APPLY", pk, c.name}, extra...)...)
				want := call(append(append([]string{d.direct[0], dk}, d.direct[1:]...), extra...)...)
				if have != want {
					t.Errorf("%s call %d: CL.APPLY %s, direct %s", c.name, i, have, want)
				}
				checked++
			}
			clk.Advance(1500 * time.Millisecond)
		}
		return checked
	}
	n := step(func(a, b def) def { return a }, 4)
	write(file(func(a, b def) def { return b }))
	if err := rdb.Do(ctx, "CL.POLICY", "RELOAD").Err(); err != nil {
		t.Fatal(err)
	}
	n += step(func(a, b def) def { return b }, 4)
	t.Logf("%d CL.APPLY replies equal to the direct command's, before and after the reload", n)
}

// TestPolicyReloadUnreadable: a policy file that cannot be read any more
// is refused as an invalid one is: the error says why (without the Go
// package's prefix), the policies in force stay, INFO says the reload
// failed; a good file again clears it.
func TestPolicyReloadUnreadable(t *testing.T) {
	file := filepath.Join(t.TempDir(), "policies.yaml")
	good := "policies:\n  - {name: a, algorithm: fixed, limit: 1, period: 1h}\n"
	if err := os.WriteFile(file, []byte(good), 0o644); err != nil {
		t.Fatal(err)
	}
	_, addr := servertest.Start(t, server.Config{Policies: file})
	rdb := redis.NewClient(&redis.Options{Addr: addr, Protocol: 2})
	t.Cleanup(func() { rdb.Close() })
	ctx := context.Background()
	status := func() string {
		t.Helper()
		info, err := rdb.Info(ctx, "policies").Result()
		if err != nil {
			t.Fatal(err)
		}
		i := strings.Index(info, "policies_last_reload_status:")
		if i < 0 {
			t.Fatalf("INFO policies has no reload status:\n%s", info)
		}
		return strings.TrimSpace(strings.SplitN(info[i:], "\n", 2)[0])
	}
	if err := os.Remove(file); err != nil {
		t.Fatal(err)
	}
	err := rdb.Do(ctx, "CL.POLICY", "RELOAD").Err()
	if err == nil || !strings.HasPrefix(err.Error(), "ERR policy reload: open ") || !strings.Contains(err.Error(), "no such file") {
		t.Fatalf("reload of a removed file: %v, want ERR policy reload: open ...: no such file ...", err)
	}
	if s := status(); s != "policies_last_reload_status:err" {
		t.Errorf("after a refused reload: %q", s)
	}
	if v, err := rdb.Do(ctx, "CL.APPLY", "k", "a").Int64Slice(); err != nil || v[1] != 1 {
		t.Fatalf("the policies in force after a refused reload: %v %v", v, err)
	}
	if err := os.WriteFile(file, []byte(good), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := rdb.Do(ctx, "CL.POLICY", "RELOAD").Err(); err != nil {
		t.Fatal(err)
	}
	if s := status(); s != "policies_last_reload_status:ok" {
		t.Errorf("after a good reload: %q", s)
	}
}
