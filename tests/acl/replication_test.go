package acl

import (
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/cellserver/cellserver/internal/testwait"
	"github.com/cellserver/cellserver/tests/internal/harness"
)

// replicationRules are what Redis's ACL documentation gives a replica's
// user on its primary, and nothing more: "ACL SETUSER replica-user on
// >somepassword +psync +replconf +ping".
var replicationRules = []any{"reset", "on", ">repl-pw", "+psync", "+replconf", "+ping"}

// TestReplicationUser: a replica started with --masteruser/--masterauth
// of a user holding only the replication commands syncs and follows its
// primary; a replica with a wrong password stays down, keeps retrying
// (each attempt one more auth entry in the primary's ACL LOG) and says
// why (WRONGPASS) in its log, and syncs as soon as the primary accepts
// its password. The same on redis-server 7.0.
func TestReplicationUser(t *testing.T) {
	for _, f := range []flavor{cellserver, redisRef} {
		t.Run(f.name, func(t *testing.T) {
			t.Parallel()
			if !f.redis {
				harness.NeedReplication(t)
			}
			testwait.SetBudget(t, 2*time.Minute)
			ctx := context.Background()
			primary := f.start(t, f.name+"-primary")
			primary.do(t, append([]any{"ACL", "SETUSER", "repl"}, replicationRules...)...)
			primary.do(t, "SET", "k", "v1")
			host, port, _ := net.SplitHostPort(primary.addr)
			replicaOf := host + " " + port

			// The replication user can do nothing else.
			c := primary.client("repl", "repl-pw")
			v, err := c.Do(ctx, "GET", "k").Result()
			if have := render(v, err, false); have != nopermCmd("get") {
				t.Errorf("%s: GET as the replication user: %s", f.name, have)
			}
			c.Close()

			good := f.start(t, f.name+"-replica", "--replicaof", replicaOf, "--masteruser", "repl", "--masterauth", "repl-pw")
			harness.WaitReplicaOf(t, "replica", good.addr, primary.addr, 30*time.Second)
			primary.do(t, "SET", "k", "v2")
			waitValue(t, good, "k", "v2")

			primary.do(t, "ACL", "LOG", "RESET")
			bad := f.start(t, f.name+"-replica-wrongpass", "--replicaof", replicaOf, "--masteruser", "repl", "--masterauth", "wrong")
			testwait.For(t, 30*time.Second, "two refused AUTH of the replica in the primary's ACL LOG, WRONGPASS in its log", func() (bool, string) {
				var n int64
				for _, e := range primary.aclLog(t) {
					if e.Reason == "auth" && e.Username == "repl" && e.Object == "AUTH" {
						n += e.Count
					}
				}
				logged := strings.Contains(bad.p.Logs.String(), "WRONGPASS")
				return n >= 2 && logged, fmt.Sprintf("%d refused AUTH, WRONGPASS logged: %v", n, logged)
			})
			m, err := harness.Info(ctx, bad.addr, "replication")
			if err != nil || m["master_link_status"] != "down" {
				t.Errorf("%s: the replica with a wrong password: %v %v", f.name, m, err)
			}
			// The primary now accepts that password too: the next retry syncs.
			primary.do(t, "ACL", "SETUSER", "repl", ">wrong")
			harness.WaitReplicaOf(t, "replica-wrongpass", bad.addr, primary.addr, 30*time.Second)
			primary.do(t, "SET", "k", "v3")
			waitValue(t, bad, "k", "v3")
			waitValue(t, good, "k", "v3")
		})
	}
}

// waitValue waits until GET key on n answers want.
func waitValue(t *testing.T, n *node, key, want string) {
	t.Helper()
	testwait.For(t, 30*time.Second, fmt.Sprintf("%s: GET %s = %s", n.name, key, want), func() (bool, string) {
		v, err := n.admin.Get(context.Background(), key).Result()
		return v == want, fmt.Sprintf("%q %v", v, err)
	})
}
