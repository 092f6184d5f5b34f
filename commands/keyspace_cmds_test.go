package commands_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cellserver/cellserver/internal/resptest"
	"github.com/cellserver/cellserver/internal/servertest"
	"github.com/cellserver/cellserver/server"
)

// The key commands' behaviour that golden files cannot show: RANDOMKEY's
// distribution, OBJECT FREQ and eviction under allkeys-lfu, COPY's
// denyoom, and redis-cli --hotkeys. The replies themselves are in
// testdata/keyspace.txt, checked against Redis 7.0.15.

// RANDOMKEY draws every key about as often (each within 30% of the mean
// over 8000 draws: about ten standard deviations), never an expired one,
// and nil once every key has expired.
func TestRandomKeyUniform(t *testing.T) {
	clk := servertest.NewClock(goldenT0)
	_, addr := servertest.Start(t, server.Config{Clock: clk.Now})
	c := resptest.MustDial(t, addr)
	const keys, draws = 8, 8000
	for i := range keys {
		c.MustDo(t, "SET", fmt.Sprintf("k%d", i), "v")
		c.MustDo(t, "SET", fmt.Sprintf("gone%d", i), "v", "PX", "10")
	}
	clk.Advance(time.Second)
	seen := map[string]int{}
	for range draws {
		seen[c.MustDo(t, "RANDOMKEY").Str]++
	}
	for k, n := range seen {
		if !strings.HasPrefix(k, "k") {
			t.Errorf("RANDOMKEY returned %q (%d times): expired", k, n)
		}
	}
	want := draws / keys
	for i := range keys {
		if n := seen[fmt.Sprintf("k%d", i)]; n < want*7/10 || n > want*13/10 {
			t.Errorf("k%d drawn %d times of %d, want about %d", i, n, draws, want)
		}
	}
	for i := range keys {
		c.MustDo(t, "PEXPIRE", fmt.Sprintf("k%d", i), "10")
	}
	clk.Advance(time.Second)
	if v := c.MustDo(t, "RANDOMKEY"); !v.Null {
		t.Errorf("RANDOMKEY with only expired keys = %v, want nil", v)
	}
}

// Under allkeys-lfu OBJECT FREQ is Redis's counter: 5 for a new key, more
// after accesses (OBJECT itself is not one), one less per idle minute;
// IDLETIME is then refused with Redis's text.
func TestObjectFreqLFU(t *testing.T) {
	clk := servertest.NewClock(goldenT0)
	_, addr := servertest.Start(t, server.Config{Clock: clk.Now, MaxMemoryPolicy: "allkeys-lfu"})
	c := resptest.MustDial(t, addr)
	c.MustDo(t, "SET", "hot", "1")
	c.MustDo(t, "SET", "cold", "1")
	freq := func(k string) int64 {
		t.Helper()
		v := c.MustDo(t, "OBJECT", "FREQ", k)
		n, err := strconv.ParseInt(v.Str, 10, 64)
		if v.Kind != ':' || err != nil {
			t.Fatalf("OBJECT FREQ %s = %v", k, v)
		}
		return n
	}
	if f := freq("cold"); f != 5 {
		t.Errorf("FREQ of a new key = %d, want 5 (LFU_INIT_VAL)", f)
	}
	for range 2000 {
		c.MustDo(t, "GET", "hot")
	}
	hot := freq("hot")
	if hot < 8 {
		t.Errorf("FREQ after 2000 reads = %d, want at least 8", hot)
	}
	if f := freq("cold"); f != 5 {
		t.Errorf("FREQ of an unread key = %d after OBJECT FREQ calls, want 5", f)
	}
	c.MustDo(t, "TOUCH", "cold")
	if f := freq("cold"); f != 6 {
		t.Errorf("FREQ after TOUCH = %d, want 6 (the first increments are certain)", f)
	}
	clk.Advance(3 * time.Minute)
	if f := freq("cold"); f != 3 {
		t.Errorf("FREQ after 3 idle minutes = %d, want 3", f)
	}
	if f := freq("hot"); f != hot-3 {
		t.Errorf("FREQ of hot after 3 idle minutes = %d, want %d", f, hot-3)
	}
	c.MustDo(t, "RENAME", "hot", "hot2")
	if f := freq("hot2"); f < hot-3 {
		t.Errorf("FREQ after RENAME = %d, want the source's (%d) or one more", f, hot-3)
	}
	v := c.MustDo(t, "OBJECT", "IDLETIME", "cold")
	if want := "ERR An LFU maxmemory policy is selected, idle time not tracked. Please note that when switching between policies at runtime LRU and LFU data will take some time to adjust."; v.Str != want {
		t.Errorf("OBJECT IDLETIME under LFU = %q, want %q", v.Str, want)
	}
}

// allkeys-lfu keeps the keys read often when new keys need room, where
// allkeys-lru would keep the newest.
func TestLFUEvictsRarelyUsed(t *testing.T) {
	ks, c, _ := startCapped(t, 1<<20, lfuTestPolicy)
	const hot = 20
	for i := range hot {
		c.MustDo(t, "SET", fmt.Sprintf("hot%d", i), "v")
	}
	for range 100 {
		for i := range hot {
			c.MustDo(t, "GET", fmt.Sprintf("hot%d", i))
		}
	}
	for i := range 40000 { // far more than the cap holds
		c.MustDo(t, "SET", fmt.Sprintf("new%d", i), "v")
	}
	if ks.Memory().Evicted == 0 {
		t.Fatal("nothing evicted: the cap is too high for the test")
	}
	kept := 0
	for i := range hot {
		if c.MustDo(t, "EXISTS", fmt.Sprintf("hot%d", i)).Str == "1" {
			kept++
		}
	}
	if kept < hot*3/4 {
		t.Errorf("%d of %d frequently read keys kept after %d evictions, want most", kept, hot, ks.Memory().Evicted)
	}
}

// COPY is denyoom: over the cap under noeviction it is refused even when
// the destination exists, while RENAME (not denyoom) still runs.
func TestCopyDenyOOM(t *testing.T) {
	_, c, _ := startCapped(t, 4<<10, "noeviction")
	c.MustDo(t, "SET", "a", "v")
	c.MustDo(t, "SET", "b", "v")
	for i := 0; ; i++ {
		if v := c.MustDo(t, "SET", fmt.Sprintf("fill%d", i), strings.Repeat("x", 100)); v.Kind == '-' {
			break
		}
		if i > 1000 {
			t.Fatal("no OOM")
		}
	}
	if v := c.MustDo(t, "COPY", "a", "b", "REPLACE"); v.Str != msgOOMText {
		t.Errorf("COPY over the cap = %v, want %q", v, msgOOMText)
	}
	if v := c.MustDo(t, "RENAME", "a", "c"); v.Str != "OK" {
		t.Errorf("RENAME over the cap = %v, want OK", v)
	}
}

// redis-cli --hotkeys (SCAN, then OBJECT FREQ per key) lists the keys
// read most under allkeys-lfu, and fails with Redis's error otherwise.
func TestRedisCLIHotkeys(t *testing.T) {
	cli, err := exec.LookPath("redis-cli")
	if err != nil {
		t.Skip("redis-cli not installed")
	}
	run := func(t *testing.T, addr string) (string, error) {
		host, port, err := net.SplitHostPort(addr)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, cli, "-h", host, "-p", port, "--hotkeys")
		cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir()}
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	t.Run("lfu", func(t *testing.T) {
		_, addr := servertest.Start(t, server.Config{MaxMemoryPolicy: "allkeys-lfu"})
		c := resptest.MustDial(t, addr)
		for i := range 50 {
			c.MustDo(t, "SET", fmt.Sprintf("cold%d", i), "v")
		}
		c.MustDo(t, "SET", "hottest", "v")
		for range 3000 {
			c.MustDo(t, "GET", "hottest")
		}
		out, err := run(t, addr)
		if err != nil {
			t.Fatalf("redis-cli --hotkeys: %v\n%s", err, out)
		}
		m := regexp.MustCompile(`hot key found with counter: (\d+)\s+keyname: "?hottest"?`).FindStringSubmatch(out)
		if m == nil {
			t.Fatalf("redis-cli --hotkeys does not list hottest:\n%s", out)
		}
		if n, _ := strconv.Atoi(m[1]); n <= 5 {
			t.Errorf("hottest's counter = %d, want more than a new key's 5", n)
		}
		if !strings.Contains(out, "Sampled 51 keys") {
			t.Errorf("redis-cli --hotkeys did not sample the 51 keys:\n%s", out)
		}
	})
	t.Run("lru", func(t *testing.T) {
		_, addr := servertest.Start(t, server.Config{})
		resptest.MustDial(t, addr).MustDo(t, "SET", "k", "v")
		out, err := run(t, addr)
		if err == nil || !strings.Contains(out, "Error: ERR An LFU maxmemory policy is not selected") {
			t.Errorf("redis-cli --hotkeys under allkeys-lru: %v\n%s", err, out)
		}
	})
}

// lfuTestPolicy is TestLFUEvictsRarelyUsed's policy (a variable so that
// the test can be seen failing under allkeys-lru).
var lfuTestPolicy = "allkeys-lfu"

// COPY copies a limiter's state: using the copy leaves the source as it
// was (DUMP encodes the exact state), for every kind, reservations and
// leases included.
func TestCopyLimiterIndependent(t *testing.T) {
	clk := servertest.NewClock(goldenT0)
	_, addr := servertest.Start(t, server.Config{Clock: clk.Now})
	c := resptest.MustDial(t, addr)
	for _, tc := range []struct {
		name string
		cmd  func(key string, i int) []string
	}{
		{"cl.throttle", func(k string, i int) []string { return []string{"CL.THROTTLE", k, "100", "10", "60"} }},
		{"cl.fixed", func(k string, i int) []string { return []string{"CL.FIXED", k, "100", "60"} }},
		{"cl.sliding", func(k string, i int) []string { return []string{"CL.SLIDING", k, "100", "60"} }},
		{"cl.slidinglog", func(k string, i int) []string { return []string{"CL.SLIDINGLOG", k, "100", "60"} }},
		{"cl.acquire", func(k string, i int) []string { return []string{"CL.ACQUIRE", k, "100", "60", fmt.Sprint("tok", i)} }},
		{"cl.reserve", func(k string, i int) []string {
			return []string{"CL.RESERVE", k, "SLIDINGLOG", "100", "60", "1", "60"}
		}},
	} {
		src, dst := "src:"+tc.name, "dst:"+tc.name
		for i := range 3 {
			if v := c.MustDo(t, tc.cmd(src, i)...); v.Kind == '-' {
				t.Fatalf("%v: %v", tc.cmd(src, i), v)
			}
			clk.Advance(time.Millisecond)
		}
		before := c.MustDo(t, "DUMP", src).Str
		if v := c.MustDo(t, "COPY", src, dst); v.Str != "1" {
			t.Fatalf("COPY %s: %v", tc.name, v)
		}
		if got := c.MustDo(t, "DUMP", dst).Str; got != before {
			t.Errorf("%s: the copy's state differs from the source's", tc.name)
		}
		for i := range 3 {
			clk.Advance(time.Millisecond)
			c.MustDo(t, tc.cmd(dst, i+10)...)
		}
		if got := c.MustDo(t, "DUMP", src).Str; got != before {
			t.Errorf("%s: using the copy changed the source", tc.name)
		}
		if got := c.MustDo(t, "DUMP", dst).Str; got == before {
			t.Errorf("%s: the copy did not change", tc.name)
		}
	}
}

// Over the cap, a COPY is refused when MULTI would queue it, and EXEC
// then aborts, as Redis.
func TestCopyDenyOOMInMulti(t *testing.T) {
	_, c, _ := startCapped(t, 4<<10, "noeviction")
	c.MustDo(t, "SET", "a", "v")
	for i := 0; ; i++ {
		if v := c.MustDo(t, "SET", fmt.Sprintf("fill%d", i), strings.Repeat("x", 100)); v.Kind == '-' {
			break
		}
		if i > 1000 {
			t.Fatal("no OOM")
		}
	}
	c.MustDo(t, "MULTI")
	if v := c.MustDo(t, "COPY", "a", "b"); v.Str != msgOOMText {
		t.Errorf("COPY queued over the cap = %v, want %q", v, msgOOMText)
	}
	if v := c.MustDo(t, "EXEC"); !strings.HasPrefix(v.Str, "EXECABORT") {
		t.Errorf("EXEC after a refused COPY = %v, want EXECABORT", v)
	}
}

// An EXEC that queued a COPY is refused whole once the memory is over the
// cap, as Redis: EXECABORT with the OOM text, nothing run.
func TestExecDenyOOM(t *testing.T) {
	_, c, _ := startCapped(t, 4<<10, "noeviction")
	c.MustDo(t, "SET", "a", "v")
	c.MustDo(t, "MULTI")
	c.MustDo(t, "COPY", "a", "b")
	c.MustDo(t, "SET", "c", "v")
	c2 := resptest.MustDial(t, c.C.RemoteAddr().String())
	for i := 0; ; i++ {
		if v := c2.MustDo(t, "SET", fmt.Sprintf("fill%d", i), strings.Repeat("x", 100)); v.Kind == '-' {
			break
		}
		if i > 1000 {
			t.Fatal("no OOM")
		}
	}
	if v, want := c.MustDo(t, "EXEC"), "EXECABORT Transaction discarded because of: "+msgOOMText; v.Str != want {
		t.Errorf("EXEC = %v, want %q", v, want)
	}
	if v := c.MustDo(t, "EXISTS", "b", "c"); v.Str != "0" {
		t.Errorf("EXISTS b c after the refused EXEC = %v, want 0", v)
	}
}
