package httplimit

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/cellserver/cellserver/client"
)

// t0 is a multiple of 10 s since the epoch, so 10 s windows start at t0.
var t0 = time.Unix(1_700_000_000, 0)

const s, ms = time.Second, time.Millisecond

func perIP(q int64, w time.Duration, a Algorithm) Limit {
	return Limit{Name: "per-ip", Quota: q, Window: w, Algorithm: a, Key: ClientIP()}
}

// The deny cache holds at most DenyCacheSize entries; a full cache evicts
// an expired entry before a live one.
func TestDenyCacheBound(t *testing.T) {
	c := newDenyCache(2)
	now := t0.UnixNano()
	refused := client.Result{Limit: 1, RetryAfter: 10 * s, ResetAfter: 10 * s}
	for i := range 5 {
		c.add(applied{0, strconv.Itoa(i)}, 1, now, refused)
		if n := c.len(); n > 2 {
			t.Fatalf("deny cache holds %d entries, cap 2", n)
		}
	}
	if n := c.len(); n != 2 {
		t.Errorf("deny cache holds %d, want 2", n)
	}
	// "a" expires at now+1s, "b" at now+10s; at now+2s "c" evicts "a".
	c = newDenyCache(2)
	c.add(applied{0, "a"}, 1, now, client.Result{Limit: 1, RetryAfter: s, ResetAfter: s})
	c.add(applied{0, "b"}, 1, now, refused)
	later := now + int64(2*s)
	c.add(applied{0, "c"}, 1, later, refused)
	for _, k := range []string{"b", "c"} {
		if _, _, ok := c.lookup([]applied{{0, k}}, 1, later); !ok {
			t.Errorf("%q evicted, want the expired \"a\" evicted", k)
		}
	}
	if n := c.len(); n != 2 {
		t.Errorf("deny cache holds %d, want 2", n)
	}
}

// The Local fallback's state holds at most LocalMaxKeys keys.
func TestLocalStateBound(t *testing.T) {
	l := newLocalState(3)
	lims := []limit{{Limit: perIP(5, 10*s, Fixed), local: 1}}
	for i := range 10 {
		l.decide(lims, []applied{{0, strconv.Itoa(i)}}, 1, t0.UnixNano())
		if n := l.size(); n > 3 {
			t.Fatalf("local state holds %d keys, cap 3", n)
		}
	}
	if n := l.size(); n != 3 {
		t.Errorf("local state holds %d keys, want 3", n)
	}
}

func TestNewValidates(t *testing.T) {
	c := client.New(redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}))
	_, err := New(c, Options{
		Limits: []Limit{
			{Name: "", Quota: 1, Window: s, Key: Global()},
			{Name: "a:b", Quota: 0, Window: 0, Key: Global()},
			{Name: "x", Quota: 3, Window: 700 * ms, Key: Global()},
			{Name: "x", Quota: 3, Window: s, Key: nil, Algorithm: 9},
			{Name: "é", Quota: 1, Window: s, Key: Global()},
			{Name: "fast", Quota: 2e9, Window: s, Key: Global()},
		},
		Deadline: -1, LocalShare: 2, OnError: 7, ProbeInterval: -1, LocalMaxKeys: -1,
	})
	if err == nil {
		t.Fatal("no error")
	}
	for _, w := range []string{"limit 0 (\"\"): empty name", "name contains ':'", "Quota 0", "Window 0s",
		"3 per 700ms", "duplicate name", "nil Key", "unknown Algorithm 9", "not printable ASCII", "under 1 ns per unit",
		"negative Deadline", "LocalShare 2", "unknown OnError 7", "negative ProbeInterval", "negative LocalMaxKeys"} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error lacks %q:\n%v", w, err)
		}
	}
	if _, err := New(nil, Options{}); err == nil || !strings.Contains(err.Error(), "nil client") || !strings.Contains(err.Error(), "no limits") {
		t.Errorf("New(nil): %v", err)
	}
	m, err := New(c, Options{Limits: []Limit{{Name: `a "b" \c`, Quota: 1, Window: 1500 * ms, Algorithm: Fixed, Key: Global()}}})
	if err != nil || m.policy != `"a \"b\" \\c";q=1;w=2` {
		t.Errorf("%v %q", err, m.policy)
	}
}

type wrapped struct{ *redis.Client }

// The call is made directly only when the go-redis client applies context
// deadlines to its sockets; otherwise through the guard goroutine (the
// deadline tests in tests/client/httplimit check the time in both cases).
func TestDirectCall(t *testing.T) {
	lims := []Limit{perIP(5, 10*s, GCRA)}
	for _, tc := range []struct {
		name string
		rdb  redis.UniversalClient
		want bool
	}{
		{"Client", redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}), false},
		{"Client+ContextTimeoutEnabled", redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", ContextTimeoutEnabled: true}), true},
		{"ClusterClient+ContextTimeoutEnabled", redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{"127.0.0.1:1"}, ContextTimeoutEnabled: true}), true},
		{"Ring", redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": "127.0.0.1:1"}}), false},
		{"FailoverClient+ContextTimeoutEnabled", redis.NewFailoverClient(&redis.FailoverOptions{MasterName: "m",
			SentinelAddrs: []string{"127.0.0.1:1"}, ContextTimeoutEnabled: true}), true},
		// A type of its own: its options are not known, so the guard runs.
		{"wrapped", wrapped{redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", ContextTimeoutEnabled: true})}, false},
	} {
		m, err := New(client.New(tc.rdb), Options{Limits: lims})
		if err != nil {
			t.Fatal(err)
		}
		if m.direct != tc.want {
			t.Errorf("%s: direct %v, want %v", tc.name, m.direct, tc.want)
		}
		tc.rdb.Close()
	}
}
