// Package acl checks ACL users from the outside: real binaries on
// 127.0.0.1, users made with ACL SETUSER through the default user, and
// real clients (go-redis, redis-py, ioredis) authenticating as them.
//
// Every probe of a user's permissions also runs against real Redis 7.0
// (redis-server, when installed) with the same rules, and the replies
// the test expects are the ones Redis gives: cellserver must answer the
// same. What Redis cannot run (CL.THROTTLE, the @rate_limit category) is
// checked on cellserver alone.
package acl

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/cellserver/cellserver/internal/binproc"
	"github.com/cellserver/cellserver/tests/internal/harness"
)

func TestMain(m *testing.M) { binproc.Main(m) }

// flavor is the server a test runs on: cellserver (the subject) or
// redis-server 7.0 (the reference).
type flavor struct {
	name  string
	redis bool
}

var (
	cellserver = flavor{name: "cellserver"}
	redisRef   = flavor{name: "redis", redis: true}
)

const startTimeout = 30 * time.Second

// node is one running server process the test started.
type node struct {
	flavor
	addr  string
	p     *harness.Proc
	admin *redis.Client // the default user
}

// start launches a server of flavor f with args and waits until it
// answers PING; it is killed when the test ends, its log printed if the
// test failed.
func (f flavor) start(t *testing.T, name string, args ...string) *node {
	t.Helper()
	if testing.Short() {
		t.Skip("runs server binaries")
	}
	n := &node{flavor: f}
	if f.redis {
		harness.NeedTools(t, "redis-server")
		port := harness.FreePorts(t, 1)[0]
		n.addr = harness.Addr(port)
		argv := append([]string{"redis-server", "--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "",
			"--appendonly", "no", "--dir", t.TempDir()}, args...)
		n.p = harness.Start(t, name, nil, argv...)
	} else {
		n.p, n.addr = harness.ListenCellserver(t, name, args...)
	}
	t.Cleanup(func() {
		n.p.Kill()
		if t.Failed() {
			t.Logf("--- log of %s (%s):\n%s", name, n.addr, n.p.Logs)
		}
	})
	harness.WaitPing(t, n.p, n.addr, startTimeout)
	n.admin = n.client("", "")
	t.Cleanup(func() { n.admin.Close() })
	n.needACL(t)
	return n
}

// needACL skips the test when the server has no ACL SETUSER (a build of
// cellserver before ACL users).
func (n *node) needACL(t *testing.T) {
	t.Helper()
	err := n.admin.Do(context.Background(), "ACL", "WHOAMI").Err()
	if err != nil && strings.HasPrefix(err.Error(), "ERR unknown command") {
		t.Skipf("%s has no ACL command: %v", n.name, err)
	}
}

// client is a go-redis client of the node authenticating as user (""
// for the default user): RESP2, no retries, no CLIENT SETINFO (Redis
// 7.0 has none, and a user without it would log a refusal).
func (n *node) client(user, pass string) *redis.Client {
	return redis.NewClient(&redis.Options{Addr: n.addr, Username: user, Password: pass, Protocol: 2,
		DisableIdentity: true, MaxRetries: -1, PoolSize: 16, DialTimeout: 5 * time.Second,
		ReadTimeout: 20 * time.Second, WriteTimeout: 20 * time.Second})
}

// do runs args on the admin connection and fails the test on an error.
func (n *node) do(t *testing.T, args ...any) any {
	t.Helper()
	v, err := n.admin.Do(context.Background(), args...).Result()
	if err != nil {
		t.Fatalf("%s: %v: %v", n.name, args, err)
	}
	return v
}

// tenantRules are the ACL rules of a team sharing the server, confined
// to keys and channels starting with prefix+":": the limiter commands
// (@rate_limit), the read and write commands on its own keys, the
// connection commands clients send (PING, HELLO, SELECT, CLIENT
// SETNAME...), and nothing @dangerous (FLUSHALL, FLUSHDB, KEYS, CONFIG,
// INFO, CLIENT KILL, DEBUG, ...). @read keeps SCAN, RANDOMKEY and DBSIZE,
// which in Redis show every key name (not its value) whatever the key
// patterns: checked below as Redis does it. Redis 7.0 has no @rate_limit
// category: the reference gets the rest (its @write holds no limiter).
func tenantRules(f flavor, prefix, pass string) []any {
	rules := []any{"reset", "on", ">" + pass, "~" + prefix + ":*", "&" + prefix + ":*"}
	if !f.redis {
		rules = append(rules, "+@rate_limit")
	}
	return append(rules, "+@read", "+@write", "+@connection", "-@dangerous")
}

// setTenant makes (or remakes) the user name with tenantRules.
func (n *node) setTenant(t *testing.T, name, prefix, pass string) {
	t.Helper()
	n.do(t, append([]any{"ACL", "SETUSER", name}, tenantRules(n.flavor, prefix, pass)...)...)
}

// logEntry is one ACL LOG entry, the fields this suite compares.
type logEntry struct {
	Count    int64
	Reason   string // command, key, channel, auth
	Context  string // toplevel, multi, lua
	Object   string
	Username string
}

func (e logEntry) String() string {
	return fmt.Sprintf("%s %s %s %s x%d", e.Username, e.Reason, e.Context, e.Object, e.Count)
}

// aclLog reads every ACL LOG entry as the admin.
func (n *node) aclLog(t *testing.T) []logEntry {
	t.Helper()
	v := n.do(t, "ACL", "LOG", "1000") // without a count: the last 10
	rows, ok := v.([]any)
	if !ok {
		t.Fatalf("%s: ACL LOG reply %T %v", n.name, v, v)
	}
	var out []logEntry
	for _, r := range rows {
		m := fieldMap(t, r)
		e := logEntry{Reason: str(m["reason"]), Context: str(m["context"]), Object: str(m["object"]),
			Username: str(m["username"])}
		switch c := m["count"].(type) {
		case int64:
			e.Count = c
		default:
			t.Fatalf("%s: ACL LOG entry count %T %v in %v", n.name, c, c, m)
		}
		for _, f := range []string{"age-seconds", "client-info"} {
			if _, ok := m[f]; !ok {
				t.Errorf("%s: ACL LOG entry without %s: %v", n.name, f, m)
			}
		}
		out = append(out, e)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].String() < out[j].String() })
	return out
}

// fieldMap reads a RESP2 array of name/value pairs or a RESP3 map.
func fieldMap(t *testing.T, v any) map[string]any {
	t.Helper()
	m := map[string]any{}
	switch r := v.(type) {
	case []any:
		for i := 0; i+1 < len(r); i += 2 {
			m[str(r[i])] = r[i+1]
		}
	case map[any]any:
		for k, v := range r {
			m[str(k)] = v
		}
	default:
		t.Fatalf("not a map: %T %v", v, v)
	}
	return m
}

func str(v any) string {
	switch s := v.(type) {
	case string:
		return s
	case nil:
		return ""
	default:
		return fmt.Sprint(s)
	}
}

// render is a reply as the probes compare it: an error's text after
// "error: ", an array's elements in brackets (sorted when sorted is set),
// nil as "(nil)".
func render(v any, err error, sorted bool) string {
	if err == redis.Nil {
		return "(nil)"
	}
	if err != nil {
		return "error: " + err.Error()
	}
	switch r := v.(type) {
	case []any:
		parts := make([]string, len(r))
		for i, e := range r {
			parts[i] = render(e, nil, sorted)
		}
		if sorted {
			sort.Strings(parts)
		}
		return "[" + strings.Join(parts, " ") + "]"
	case nil:
		return "(nil)"
	default:
		return fmt.Sprint(r)
	}
}
