package compat

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// nodeDir holds the Node.js client scripts, with package.json and
// package-lock.json pinning node-redis and ioredis. Their node_modules is
// installed there by `npm ci` at test time and kept (git-ignored): a
// stamp file holding the lock file it was installed from makes later runs
// skip npm altogether.
const nodeDir = "testdata/node"

const nodeStamp = "node_modules/.cellserver-lock.json"

var (
	nodeOnce   sync.Once
	nodeReason string // why the Node tests skip, "" when they can run
)

// ensureNodeModules installs the pinned clients once per test binary, or
// says why it cannot.
func ensureNodeModules() string {
	nodeOnce.Do(func() {
		for _, tool := range []string{"node", "npm"} {
			if _, err := exec.LookPath(tool); err != nil {
				nodeReason = tool + " not installed (Debian nodejs, npm)"
				return
			}
		}
		// node-redis 6 requires Node.js 20 or later (its engines field).
		out, err := exec.Command("node", "--version").Output()
		v := strings.TrimPrefix(strings.TrimSpace(string(out)), "v")
		if major, _, _ := strings.Cut(v, "."); err != nil || atoiOr0(major) < 20 {
			nodeReason = "node-redis 6 needs Node.js 20 or later, found " + strings.TrimSpace(string(out))
			return
		}
		lock, err := os.ReadFile(filepath.Join(nodeDir, "package-lock.json"))
		if err != nil {
			nodeReason = err.Error()
			return
		}
		if stamp, err := os.ReadFile(filepath.Join(nodeDir, nodeStamp)); err == nil && bytes.Equal(stamp, lock) {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, "npm", "ci", "--no-audit", "--no-fund", "--prefer-offline",
			"--fetch-retries=1", "--fetch-timeout=30000")
		cmd.Dir = nodeDir
		if out, err := cmd.CombinedOutput(); err != nil {
			nodeReason = "npm ci in tests/compat/testdata/node failed (no registry access?): " + err.Error() + "\n" + string(out)
			return
		}
		if err := os.WriteFile(filepath.Join(nodeDir, nodeStamp), lock, 0o644); err != nil {
			nodeReason = err.Error()
		}
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
