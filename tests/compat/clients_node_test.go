package compat

import (
	"bytes"
	"context"
	"encoding/json"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/cellserver/cellserver/tests/internal/harness"
)

var (
	nodeOnce   sync.Once
	nodeDir    string // the Node.js client scripts, node_modules installed
	nodeReason string // why the Node tests skip, "" when they can run
)

// ensureNodeModules installs the pinned clients (harness.NodeModules)
// once per test binary, or says why it cannot.
func ensureNodeModules() string {
	nodeOnce.Do(func() {
		if _, err := exec.LookPath("node"); err == nil {
			// node-redis 6 requires Node.js 20 or later (its engines field).
			out, err := exec.Command("node", "--version").Output()
			v := strings.TrimPrefix(strings.TrimSpace(string(out)), "v")
			if major, _, _ := strings.Cut(v, "."); err != nil || atoiOr0(major) < 20 {
				nodeReason = "node-redis 6 needs Node.js 20 or later, found " + strings.TrimSpace(string(out))
				return
			}
		}
		nodeDir, nodeReason = harness.NodeModules()
	})
	return nodeReason
}

// TestNodeClients runs node-redis and ioredis, at the versions
// package-lock.json pins and with their defaults (both say HELLO 3 and
// speak RESP3), against cellserver: the README's CL.THROTTLE (the five
// integers), CL.INFO's tat_ns read exactly (a string, parsed with BigInt),
// SET/GET, a pipeline, MULTI/EXEC, a WATCH transaction whose first attempt
// another client's write aborts and whose retry commits, and a reconnect
// after the connection is closed under the client. The script exits
// non-zero naming the step and the assertion that failed.
func TestNodeClients(t *testing.T) {
	if why := ensureNodeModules(); why != "" {
		t.Skip(why)
	}
	for _, tc := range []struct{ name, script string }{
		{"node-redis", "noderedis.js"},
		{"ioredis", "ioredis.js"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, addr := startServer(t)
			p := startKillProxy(t, addr)
			host, port, ctlPort, wantTat := p.scriptArgs(t)
			ctx, cancel := context.WithTimeout(context.Background(), ioTimeout)
			defer cancel()
			cmd := exec.CommandContext(ctx, "node", tc.script, host, port, ctlPort, wantTat)
			cmd.Dir = nodeDir
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			out, err := cmd.Output()
			if err != nil {
				t.Fatalf("node %s: %v\n%s%s", tc.script, err, out, stderr.Bytes())
			}
			var res struct {
				Client, Version string
				Steps           []string
			}
			if err := json.Unmarshal(out, &res); err != nil {
				t.Fatalf("output %q: %v", out, err)
			}
			t.Logf("%s %s passed: %v (connections closed by the proxy: %d)", res.Client, res.Version, res.Steps, p.Kills())
			if n := len(res.Steps); n < 8 || res.Steps[n-1] != "reconnect" {
				t.Errorf("steps %v, want every step through reconnect", res.Steps)
			}
		})
	}
}

func atoiOr0(s string) int {
	n, err := strconv.Atoi(s)
	if err != nil {
		return 0
	}
	return n
}
