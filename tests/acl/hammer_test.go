package acl

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cellserver/cellserver/tests/internal/harness"
)

// The limit every tenant hammers: CL.THROTTLE <prefix>:lim 99 1 3600 1,
// one unit per 3600 s with a burst of 99. GCRA admits max_burst+1 = 100
// at once and one more per emission interval (3600 s): within the first
// hour of a key exactly 100 requests are allowed, whatever their
// interleaving, and the allowed replies' remaining are 99, 98, ..., 0,
// each exactly once (the decisions are serialised on the key).
const (
	hammerBurst   = 99
	hammerAllowed = hammerBurst + 1
	hammerPeriod  = 3600 * time.Second
)

// tally is what one client of a tenant saw.
type tally struct {
	Client  string
	Version string
	Allowed []int64 // remaining of each allowed reply
	Refused int
	NoPerm  int
}

// redisPyTenantScript is the ioredis script (tests/testdata/node/acltenant.js)
// with redis-py (RESP2). argv: host port user password own other n.
const redisPyTenantScript = `
import json, sys
import redis

host, port, user, pw, own, other, n = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5], sys.argv[6], int(sys.argv[7])
noperm_key = "NOPERM this user has no permissions to access one of the keys used as arguments"
r = redis.Redis(host=host, port=port, username=user, password=pw)
out = {"client": "redis-py", "version": redis.__version__, "allowed": [], "refused": 0, "noperm": 0}
for i in range(n):
    v = r.execute_command("CL.THROTTLE", own + ":lim", 99, 1, 3600, 1)
    assert len(v) == 5 and v[1] == 100, v
    if v[0] == 0:
        out["allowed"].append(v[2])
    else:
        assert v[0] == 1 and v[2] == 0 and v[3] > 0 and v[4] > 0, v
        out["refused"] += 1
    if i % 4 == 0:
        try:
            r.get(other + ":lim")
        except redis.exceptions.NoPermissionError as e:
            # redis-py maps the code NOPERM to the class and strips it
            assert str(e) == noperm_key[len("NOPERM "):], str(e)
            out["noperm"] += 1
        else:
            raise AssertionError("GET of the other tenant's key allowed")
print(json.dumps(out))
`

// TestTenantsHammer: tenants a and b hammer their own CL.THROTTLE key at
// once, each through go-redis (several goroutines), redis-py and ioredis
// (one process each, when installed), and every fourth step try the
// other's key. Each tenant's allowed count is exactly GCRA's (100, the
// remaining values 99..0 each once), every attempt on the other's key is
// refused with NOPERM and counted in ACL LOG, and neither key moved
// because of the other tenant.
func TestTenantsHammer(t *testing.T) {
	n := cellserver.start(t, "cellserver")
	const (
		goroutines = 4
		goSteps    = 150 // per goroutine
		procSteps  = 200 // per redis-py / ioredis process
	)
	py := harness.Python("redis")
	nodeDir, nodeWhy := harness.NodeModules()
	if py == "" {
		t.Log("redis-py not installed (Debian python3-redis): go-redis and ioredis only")
	}
	if nodeWhy != "" {
		t.Logf("ioredis left out: %s", nodeWhy)
	}
	tenants := [][2]string{{"a", "b"}, {"b", "a"}}
	for _, tn := range tenants {
		n.setTenant(t, tn[0], tn[0], "pw-"+tn[0])
	}
	n.do(t, "ACL", "LOG", "RESET")
	host, port := hostPort(t, n.addr)

	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	var (
		mu      sync.Mutex
		tallies = map[string][]tally{}
		wg      sync.WaitGroup
	)
	add := func(user string, tl tally) {
		mu.Lock()
		defer mu.Unlock()
		tallies[user] = append(tallies[user], tl)
	}
	start := time.Now()
	for _, tn := range tenants {
		own, other, pass := tn[0], tn[1], "pw-"+tn[0]
		var procs []*exec.Cmd
		if py != "" {
			procs = append(procs, exec.CommandContext(ctx, py, "-c", redisPyTenantScript, host, port, own, pass, own, other, strconv.Itoa(procSteps)))
		}
		if nodeWhy == "" {
			cmd := exec.CommandContext(ctx, "node", "acltenant.js", host, port, own, pass, own, other, strconv.Itoa(procSteps))
			cmd.Dir = nodeDir
			procs = append(procs, cmd)
		}
		for _, cmd := range procs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				var stderr bytes.Buffer
				cmd.Stderr = &stderr
				out, err := cmd.Output()
				if err != nil {
					t.Errorf("tenant %s: %v: %v\n%s%s", own, cmd.Args[:2], err, out, stderr.Bytes())
					return
				}
				var tl tally
				if err := json.Unmarshal(out, &tl); err != nil {
					t.Errorf("tenant %s: output %q: %v", own, out, err)
					return
				}
				add(own, tl)
			}()
		}
		c := n.client(own, pass)
		defer c.Close()
		for g := range goroutines {
			wg.Add(1)
			go func() {
				defer wg.Done()
				tl := tally{Client: fmt.Sprintf("go-redis#%d", g)}
				for i := range goSteps {
					v, err := c.Do(ctx, "CL.THROTTLE", own+":lim", hammerBurst, 1, int(hammerPeriod/time.Second), 1).Int64Slice()
					if err != nil || len(v) != 5 || v[1] != hammerAllowed {
						t.Errorf("tenant %s: CL.THROTTLE: %v %v", own, v, err)
						return
					}
					if v[0] == 0 {
						tl.Allowed = append(tl.Allowed, v[2])
					} else if v[0] == 1 && v[2] == 0 && v[3] > 0 && v[4] > 0 {
						tl.Refused++
					} else {
						t.Errorf("tenant %s: refused reply %v", own, v)
						return
					}
					if i%4 == 0 {
						err := c.Get(ctx, other+":lim").Err()
						if have := render(nil, err, false); have != nopermKey {
							t.Errorf("tenant %s: GET %s:lim: %s, want %s", own, other, have, nopermKey)
							return
						}
						tl.NoPerm++
					}
				}
				add(own, tl)
			}()
		}
	}
	wg.Wait()
	elapsed := time.Since(start)
	if t.Failed() {
		return
	}
	if elapsed >= hammerPeriod {
		t.Fatalf("the load took %v, more than one emission interval: the count below assumes less", elapsed)
	}
	log := map[logEntry]int64{}
	for _, e := range n.aclLog(t) {
		cnt := e.Count
		e.Count = 0
		log[e] += cnt
	}
	for _, tn := range tenants {
		own, other := tn[0], tn[1]
		var allowed []int64
		refused, noperm, sent := 0, 0, 0
		var clients []string
		for _, tl := range tallies[own] {
			allowed = append(allowed, tl.Allowed...)
			refused += tl.Refused
			noperm += tl.NoPerm
			sent += len(tl.Allowed) + tl.Refused
			clients = append(clients, strings.TrimSpace(tl.Client+" "+tl.Version))
		}
		slices.Sort(allowed)
		want := make([]int64, hammerAllowed)
		for i := range want {
			want[i] = int64(i)
		}
		if !slices.Equal(allowed, want) {
			t.Errorf("tenant %s: allowed remaining %v, want 0..%d each once", own, allowed, hammerAllowed-1)
		}
		if refused != sent-hammerAllowed {
			t.Errorf("tenant %s: %d refused of %d sent, want %d", own, refused, sent, sent-hammerAllowed)
		}
		e := logEntry{Reason: "key", Context: "toplevel", Object: other + ":lim", Username: own}
		if log[e] != int64(noperm) {
			t.Errorf("tenant %s: ACL LOG %v counted %d, want %d (NOPERM replies seen)", own, e, log[e], noperm)
		}
		delete(log, e)
		t.Logf("tenant %s: %d CL.THROTTLE (%d allowed, %d refused), %d NOPERM on %s:lim, through %v", own, sent,
			len(allowed), refused, noperm, other, clients)
		// The key holds this tenant's decisions only: its TAT is 100
		// emission intervals past the first decision.
		info := fieldMap(t, n.do(t, "CL.INFO", own+":lim"))
		tat, err := strconv.ParseInt(str(info["tat_ns"]), 10, 64)
		if err != nil {
			t.Fatalf("CL.INFO %s:lim: %v", own, info)
		}
		if d := time.Duration(tat - start.UnixNano()); d < hammerAllowed*hammerPeriod || d > hammerAllowed*hammerPeriod+elapsed {
			t.Errorf("tenant %s: TAT %v after the load's start, want %v (+ at most %v)", own, d, hammerAllowed*hammerPeriod, elapsed)
		}
	}
	if len(log) != 0 {
		t.Errorf("ACL LOG entries besides the refusals counted: %v", log)
	}
}

func hostPort(t *testing.T, addr string) (string, string) {
	t.Helper()
	i := strings.LastIndexByte(addr, ':')
	if i < 0 {
		t.Fatalf("address %q", addr)
	}
	return addr[:i], addr[i+1:]
}
