package commands_test

import (
	"fmt"
	"math/rand"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cellserver/cellserver/internal/resptest"
	"github.com/cellserver/cellserver/internal/servertest"
	"github.com/cellserver/cellserver/keyspace"
	"github.com/cellserver/cellserver/server"
)

// maxmemory must hold when existing values grow, not only when keys are
// created: SET to a longer value, CL.SLIDINGLOG adding entries to a log,
// CL.ACQUIRE adding leases. Under allkeys-lru the memory is back under the
// cap after every command (other keys are evicted); under noeviction the
// growth is refused with Redis's OOM error once the cap is reached, and
// the memory stays within the cap plus what the last admitted command
// added.

const msgOOMText = "OOM command not allowed when used memory > 'maxmemory'."

// growthCase is one way of growing one existing value.
type growthCase struct {
	name string
	// grow runs the i-th growing command on key.
	grow func(t *testing.T, c *resptest.Conn, key string, i int) resptest.Value
	// step bounds what one admitted command can add (noeviction's excess
	// over the cap): a slice that doubles, at most the value itself.
	step func(used int64) int64
}

var growthCases = []growthCase{
	{"set", func(t *testing.T, c *resptest.Conn, key string, i int) resptest.Value {
		return c.MustDo(t, "SET", key, strings.Repeat("v", 64<<10))
	}, func(int64) int64 { return 64<<10 + 256 }},
	{"append", func(t *testing.T, c *resptest.Conn, key string, i int) resptest.Value {
		return c.MustDo(t, "APPEND", key, strings.Repeat("a", 1<<10))
	}, func(int64) int64 { return 1<<10 + 256 }},
	{"cl.slidinglog", func(t *testing.T, c *resptest.Conn, key string, i int) resptest.Value {
		return c.MustDo(t, "CL.SLIDINGLOG", key, "1000000000", "1h", "1")
	}, func(used int64) int64 { return used }},
	{"cl.acquire", func(t *testing.T, c *resptest.Conn, key string, i int) resptest.Value {
		return c.MustDo(t, "CL.ACQUIRE", key, "10000", "1h", fmt.Sprintf("token-%08d", i))
	}, func(used int64) int64 { return used }},
	{"cl.all", func(t *testing.T, c *resptest.Conn, key string, i int) resptest.Value {
		return c.MustDo(t, "CL.ALL", "CL.SLIDINGLOG", key, "1000000000", "1h", "1", "CL.ACQUIRE", key+":leases", "10000", "1h", fmt.Sprintf("token-%08d", i))
	}, func(used int64) int64 { return used }},
}

// startCapped starts a server with maxmemory limit and policy, and a clock
// that the test advances by 1ms per command (a log then gets a new entry
// per call).
func startCapped(t *testing.T, limit int64, policy string) (*keyspace.Keyspace, *resptest.Conn, *servertest.Clock) {
	t.Helper()
	clock := servertest.NewClock(goldenT0)
	srv, addr := servertest.Start(t, server.Config{MaxMemory: limit, MaxMemoryPolicy: policy, Clock: clock.Now})
	return srv.Commands().Keyspace(), resptest.MustDial(t, addr), clock
}

func TestMaxmemoryGrowthEvicts(t *testing.T) {
	const limit = 128 << 10
	for _, tc := range growthCases {
		t.Run(tc.name, func(t *testing.T) {
			ks, c, clock := startCapped(t, limit, "allkeys-lru")
			// Small keys to evict, then one value (SET: each small key in
			// turn) grown well past the cap.
			for i := 0; i < 1000; i++ {
				if v := c.MustDo(t, "CL.THROTTLE", fmt.Sprint("small:", i), "5", "1", "3600"); v.Kind != '*' {
					t.Fatalf("CL.THROTTLE: %v", v)
				}
			}
			n := 8000 // a log or lease set outgrows the cap after about 3000
			if tc.name == "set" {
				n = 2000
			}
			for i := 0; i < n; i++ {
				clock.Advance(time.Millisecond)
				key := "grown"
				if tc.name == "set" {
					key = fmt.Sprint("small:", i%1000)
				}
				if v := tc.grow(t, c, key, i); v.Kind == '-' {
					t.Fatalf("command %d: %v", i, v)
				}
				if m := ks.Memory(); m.Used > limit {
					t.Fatalf("command %d: used %d > maxmemory %d (evicted %d)", i, m.Used, limit, m.Evicted)
				}
			}
			if m := ks.Memory(); m.Evicted == 0 {
				t.Fatalf("nothing evicted: %+v", m)
			}
			t.Logf("%s: %d growing commands, memory %+v", tc.name, n, ks.Memory())
		})
	}
}

func TestMaxmemoryGrowthNoEviction(t *testing.T) {
	const limit = 128 << 10
	for _, tc := range growthCases {
		t.Run(tc.name, func(t *testing.T) {
			ks, c, clock := startCapped(t, limit, "noeviction")
			c.MustDo(t, "CL.THROTTLE", "gcra", "5", "1", "3600")
			refused, admitted := 0, 0
			for i := 0; i < 8000 && refused < 10; i++ {
				clock.Advance(time.Millisecond)
				key := "grown"
				if tc.name == "set" {
					key = fmt.Sprint("k:", i%8)
					if i < 8 { // create the keys small
						c.MustDo(t, "SET", key, "x")
						continue
					}
				}
				before := ks.Memory().Used
				v := tc.grow(t, c, key, i)
				switch {
				case v.Kind == '-' && v.Str == msgOOMText:
					refused++
					if before < limit {
						t.Fatalf("command %d refused below the cap: used %d", i, before)
					}
				case v.Kind == '-':
					t.Fatalf("command %d: %v", i, v)
				default:
					admitted++
				}
				if used := ks.Memory().Used; used > limit+tc.step(before) {
					t.Fatalf("command %d: used %d, cap %d, before %d", i, used, limit, before)
				}
			}
			if refused == 0 {
				t.Fatalf("%d growing commands admitted, none refused: memory %+v", admitted, ks.Memory())
			}
			// Refused commands change nothing; a fixed-size limiter still
			// runs at the cap. SET is denyoom, as in Redis: over the cap it
			// is refused even when it would shrink a value, and DEL (not
			// denyoom) frees room for it again.
			if v := c.MustDo(t, "CL.THROTTLE", "gcra", "5", "1", "3600"); v.Kind != '*' {
				t.Errorf("CL.THROTTLE on an existing key at the cap: %v", v)
			}
			if tc.name == "set" && ks.Memory().Used > limit {
				if v := c.MustDo(t, "SET", "k:0", "short"); v.Str != msgOOMText {
					t.Errorf("shrinking SET over the cap under noeviction: %v, want OOM (denyoom)", v)
				}
			}
			t.Logf("%s: %d admitted, %d refused, memory %+v", tc.name, admitted, refused, ks.Memory())
		})
	}
}

// TestMaxmemoryAccountingInvariant runs random commands that create, grow,
// shrink, expire and delete values of every kind, under a cap small enough
// to evict, and checks after every batch that the keyspace's memory figure
// equals the sum of its entries recomputed from what they hold now.
func TestMaxmemoryAccountingInvariant(t *testing.T) {
	for _, policy := range []string{"allkeys-lru", "noeviction"} {
		t.Run(policy, func(t *testing.T) {
			ks, c, clock := startCapped(t, 64<<10, policy)
			rng := rand.New(rand.NewSource(12))
			const batches, perBatch = 100, 100
			for b := 0; b < batches; b++ {
				for i := 0; i < perBatch; i++ {
					clock.Advance(time.Duration(rng.Intn(2000)) * time.Millisecond)
					key := "k" + strconv.Itoa(rng.Intn(40))
					var args []string
					switch rng.Intn(11) {
					case 0:
						args = []string{"SET", key, strings.Repeat("s", rng.Intn(3000))}
					case 1:
						args = []string{"CL.SLIDINGLOG", "log" + key, "1000", "10s", strconv.Itoa(rng.Intn(3))}
					case 2:
						args = []string{"CL.ACQUIRE", "lease" + key, "50", strconv.Itoa(1+rng.Intn(20)) + "s", "t" + strconv.Itoa(rng.Intn(60))}
					case 3:
						args = []string{"CL.RELEASE", "lease" + key, "t" + strconv.Itoa(rng.Intn(60))}
					case 4:
						args = []string{"DEL", key, "log" + key}
					case 5:
						args = []string{"PEXPIRE", "lease" + key, strconv.Itoa(rng.Intn(5000))}
					case 6:
						args = []string{"CL.THROTTLE", "gcra" + key, "5", "1", "10"}
					case 7:
						args = []string{"CL.FIXED", "fixed" + key, "5", "10s"}
					case 8:
						args = []string{"CL.SLIDING", "sliding" + key, "5", "10s"}
					case 9:
						args = []string{"CL.ALL", "CL.SLIDINGLOG", "log" + key, "1000", "10s", "1", "CL.ACQUIRE", "lease" + key, "50", "5s", "t" + strconv.Itoa(rng.Intn(60))}
					case 10:
						args = []string{"SET", "log" + key, "overwrites a log"}
					}
					if _, err := c.Do(args...); err != nil {
						t.Fatalf("%q: %v", args, err)
					}
				}
				entries, shards, total := ks.Audit()
				if entries != shards || shards != total {
					t.Fatalf("after %d commands: entries %d, shards %d, keyspace %d", (b+1)*perBatch, entries, shards, total)
				}
			}
			t.Logf("%s: %d random commands, %d audits equal; memory %+v", policy, batches*perBatch, batches, ks.Memory())
		})
	}
}

// infoInt returns the integer field name of INFO section.
func infoInt(t *testing.T, c *resptest.Conn, section, name string) int64 {
	t.Helper()
	secs, _ := parseInfo(t, c.MustDo(t, "INFO", section).Str)
	for _, sec := range secs {
		if v, ok := sec.values[name]; ok {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				t.Fatalf("INFO %s: %s:%s", section, name, v)
			}
			return n
		}
	}
	t.Fatalf("INFO %s has no %s", section, name)
	return 0
}

// TestMaxmemoryEvictedValuesFreed is issue 26's scenario scaled down: 300
// keys' strings grown to 128 KiB under a 2 MiB maxmemory leave a few keys,
// and the heap found live after a collection (MEMORY PURGE, then INFO's
// go_heap_live) grows by about maxmemory, not by one evicted value per
// keyspace shard (about 20 MiB here before the fix).
func TestMaxmemoryEvictedValuesFreed(t *testing.T) {
	const limit = 2 << 20
	ks, c, _ := startCapped(t, limit, "allkeys-lru")
	c.MustDo(t, "MEMORY", "PURGE")
	base := infoInt(t, c, "memory", "go_heap_live")
	for size := 1 << 10; size <= 128<<10; size *= 2 {
		val := strings.Repeat("v", size)
		cmds := make([][]string, 300)
		for i := range cmds {
			cmds[i] = []string{"SET", "key:" + strconv.Itoa(i), val}
		}
		pipeline(t, c, cmds)
	}
	c.MustDo(t, "MEMORY", "PURGE")
	live := infoInt(t, c, "memory", "go_heap_live")
	mem := ks.Memory()
	if mem.Used > limit || mem.Evicted == 0 {
		t.Fatalf("memory %+v: want evictions and at most %d bytes", mem, limit)
	}
	if grown := live - base; grown > 3*limit {
		t.Errorf("live heap after a collection grew by %d bytes (%d keys, %d bytes accounted): evicted values are kept", grown, ks.DB(0).Size(false), mem.Used)
	}
	t.Logf("live heap %d -> %d bytes; %d keys, %d bytes accounted", base, live, ks.DB(0).Size(false), mem.Used)
}
