package acl

import (
	"context"
	"reflect"
	"strings"
	"testing"
)

// The NOPERM texts of Redis 7.0.15 (src/server.c, recorded from
// redis-server 7.0.15 with the rules of tenantRules).
const (
	nopermKey = "error: NOPERM this user has no permissions to access one of the keys used as arguments"
	wrongPass = "error: WRONGPASS invalid username-password pair or user is disabled."
)

func nopermCmd(name string) string {
	return "error: NOPERM this user has no permissions to run the '" + name + "' command"
}

// probe is one command a tenant sends, in terms of {own} and {other}
// (the two prefixes), the reply Redis 7.0.15 gives, and the ACL LOG
// entry it adds (reason and object; none when reason is "").
type probe struct {
	args   []string
	want   string
	reason string // ACL LOG reason: key, command, auth; "" for none
	object string // ACL LOG object, in terms of {own} / {other}
	// needs names a command the probe needs; on a server without it
	// (COMMAND INFO answers nil) the probe is left out.
	needs string
	// cellOnly probes need a cellserver command (CL.THROTTLE) or
	// category Redis does not have.
	cellOnly bool
	// sorted compares an array reply's elements in any order (SCAN).
	sorted bool
}

// isolationProbes are what a tenant tries on the other's keys and on the
// whole keyspace; every reply here was recorded from redis-server
// 7.0.15. SCAN is not confined by key patterns in Redis: a tenant sees
// the other's key names (never their values), and cellserver answers the
// same.
var isolationProbes = []probe{
	{args: []string{"GET", "{other}:k"}, want: nopermKey, reason: "key", object: "{other}:k"},
	{args: []string{"SET", "{other}:k", "x"}, want: nopermKey, reason: "key", object: "{other}:k"},
	{args: []string{"DEL", "{other}:k"}, want: nopermKey, reason: "key", object: "{other}:k"},
	{args: []string{"UNLINK", "{other}:k"}, want: nopermKey, reason: "key", object: "{other}:k"},
	{args: []string{"EXISTS", "{other}:k"}, want: nopermKey, reason: "key", object: "{other}:k"},
	{args: []string{"EXPIRE", "{other}:k", "100"}, want: nopermKey, reason: "key", object: "{other}:k"},
	{args: []string{"PERSIST", "{other}:k"}, want: nopermKey, reason: "key", object: "{other}:k"},
	{args: []string{"TYPE", "{other}:k"}, want: nopermKey, reason: "key", object: "{other}:k"},
	{args: []string{"MGET", "{own}:k", "{other}:k"}, want: nopermKey, reason: "key", object: "{other}:k", needs: "mget"},
	{args: []string{"RENAME", "{own}:k", "{other}:k2"}, want: nopermKey, reason: "key", object: "{other}:k2", needs: "rename"},
	{args: []string{"RENAME", "{other}:k", "{own}:k2"}, want: nopermKey, reason: "key", object: "{other}:k", needs: "rename"},
	{args: []string{"CL.THROTTLE", "{other}:lim", "99", "1", "3600", "1"}, want: nopermKey, reason: "key", object: "{other}:lim", cellOnly: true},
	{args: []string{"CL.PEEK", "{other}:lim", "99", "1", "3600"}, want: nopermKey, reason: "key", object: "{other}:lim", cellOnly: true},
	{args: []string{"FLUSHALL"}, want: nopermCmd("flushall"), reason: "command", object: "flushall"},
	{args: []string{"FLUSHDB"}, want: nopermCmd("flushdb"), reason: "command", object: "flushdb"},
	{args: []string{"KEYS", "*"}, want: nopermCmd("keys"), reason: "command", object: "keys"},
	{args: []string{"CONFIG", "GET", "maxmemory"}, want: nopermCmd("config|get"), reason: "command", object: "config|get"},
	{args: []string{"ACL", "LOG"}, want: nopermCmd("acl|log"), reason: "command", object: "acl|log"},
	{args: []string{"AUTH", "{own}", "wrong"}, want: wrongPass, reason: "auth", object: "AUTH"},
	// Allowed: the tenant's own keys, and SCAN / DBSIZE over everything.
	{args: []string{"GET", "{own}:k"}, want: "v-{own}"},
	{args: []string{"SET", "{own}:k2", "x"}, want: "OK"},
	{args: []string{"DEL", "{own}:k2"}, want: "1"},
	{args: []string{"SCAN", "0", "MATCH", "*:k", "COUNT", "1000"}, want: "[0 [a:k b:k]]", sorted: true},
	{args: []string{"DBSIZE"}, want: "2"},
	{args: []string{"PING"}, want: "PONG"},
}

// expand replaces {own} and {other}.
func expand(s, own, other string) string {
	return strings.NewReplacer("{own}", own, "{other}", other).Replace(s)
}

// hasCommand reports whether the server knows name (COMMAND INFO).
func (n *node) hasCommand(t *testing.T, name string) bool {
	t.Helper()
	v := n.do(t, "COMMAND", "INFO", name)
	a, ok := v.([]any)
	return ok && len(a) == 1 && a[0] != nil
}

// TestIsolationProbes: tenants a (~a:*) and b (~b:*) try every probe on
// each other's keys; each reply must be Redis 7.0.15's, the other's keys
// must be untouched, and ACL LOG must hold one entry per (user, reason,
// object) whose count is the number of refusals. It runs on cellserver
// and on redis-server 7.0 (which checks the recorded replies and counts).
func TestIsolationProbes(t *testing.T) {
	for _, f := range []flavor{cellserver, redisRef} {
		t.Run(f.name, func(t *testing.T) {
			t.Parallel()
			n := f.start(t, f.name)
			runProbes(t, n)
		})
	}
}

func runProbes(t *testing.T, n *node) {
	ctx := context.Background()
	tenants := [][2]string{{"a", "b"}, {"b", "a"}}
	for _, tn := range tenants {
		n.setTenant(t, tn[0], tn[0], "pw-"+tn[0])
		n.do(t, "SET", tn[0]+":k", "v-"+tn[0])
	}
	n.do(t, "ACL", "LOG", "RESET")
	var probes []probe
	for _, p := range isolationProbes {
		if p.cellOnly && n.redis {
			continue
		}
		if p.needs != "" && !n.hasCommand(t, p.needs) {
			t.Logf("%s has no %s: %v left out", n.name, p.needs, p.args)
			continue
		}
		probes = append(probes, p)
	}
	want := map[logEntry]int64{}
	const rounds = 3 // each probe thrice: ACL LOG counts the repeats
	for _, tn := range tenants {
		own, other := tn[0], tn[1]
		c := n.client(own, "pw-"+own)
		for range rounds {
			for _, p := range probes {
				args := make([]any, len(p.args))
				for i, a := range p.args {
					args[i] = expand(a, own, other)
				}
				v, err := c.Do(ctx, args...).Result()
				if have, want := render(v, err, p.sorted), expand(p.want, own, other); have != want {
					t.Errorf("%s: user %s: %v\nhave %s\nwant %s", n.name, own, args, have, want)
				}
				if p.reason != "" {
					want[logEntry{Reason: p.reason, Context: "toplevel", Object: expand(p.object, own, other), Username: own}]++
				}
			}
		}
		c.Close()
	}
	// Nothing of the other tenant changed.
	for _, tn := range tenants {
		if v := n.do(t, "GET", tn[0]+":k"); v != "v-"+tn[0] {
			t.Errorf("%s: %s:k is %v after the other's probes", n.name, tn[0], v)
		}
		if v := n.do(t, "TTL", tn[0]+":k"); v != int64(-1) {
			t.Errorf("%s: TTL %s:k is %v after the other's probes", n.name, tn[0], v)
		}
		for _, k := range []string{":k2", ":lim"} {
			if v := n.do(t, "EXISTS", tn[0]+k); v != int64(0) {
				t.Errorf("%s: %s%s exists after the other's probes", n.name, tn[0], k)
			}
		}
	}
	if v := n.do(t, "DBSIZE"); v != int64(2) {
		t.Errorf("%s: DBSIZE %v after the probes, want 2", n.name, v)
	}
	have := map[logEntry]int64{}
	for _, e := range n.aclLog(t) {
		cnt := e.Count
		e.Count = 0
		have[e] += cnt
	}
	if !reflect.DeepEqual(have, want) {
		t.Errorf("%s: ACL LOG\nhave %v\nwant %v", n.name, have, want)
	}
}
