package compat

import (
	"context"
	"encoding/json"
	"os/exec"
	"testing"

	"github.com/cellserver/cellserver/tests/internal/harness"
)

// redisPyMatrixScript runs the client-matrix scenario with redis-py (RESP2)
// against the cellserver behind the test's proxy. argv: host port
// control-port tat_ns; connecting to the control port closes every
// connection the proxy carries. It prints one JSON object, or fails with a
// traceback naming the assertion.
const redisPyMatrixScript = `
import json, socket, sys
import redis

host, port, ctl, want_tat = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
steps = []
r = redis.Redis(host=host, port=port)
other = redis.Redis(host=host, port=port)

assert r.execute_command("CL.THROTTLE", "user123", 15, 30, 60, 1) == [0, 16, 15, -1, 2]
steps.append("throttle")
info = r.execute_command("CL.INFO", "user123")
m = dict(zip(info[::2], info[1::2]))
assert m[b"kind"] == b"gcra", m
assert isinstance(m[b"tat_ns"], bytes) and int(m[b"tat_ns"]) == int(want_tat), m
steps.append("tat_ns")

assert r.set("k", "v") is True and r.get("k") == b"v" and r.get("nokey") is None
steps.append("set/get")

p = r.pipeline(transaction=False)
p.set("p", "1").get("p").get("nokey").execute_command("CL.THROTTLE", "user123", 15, 30, 60, 1)
assert p.execute() == [True, b"1", None, [0, 16, 14, -1, 4]]
steps.append("pipeline")

p = r.pipeline(transaction=True)
p.set("t", "x").get("t").execute_command("CL.THROTTLE", "user123", 15, 30, 60, 1)
assert p.execute() == [True, b"x", [0, 16, 13, -1, 6]]
steps.append("multi/exec")

r.set("w", "10")
attempts = [0]
def incr(pipe):
    attempts[0] += 1
    cur = int(pipe.get("w"))
    if attempts[0] == 1:
        other.set("w", "100")
    pipe.multi()
    pipe.set("w", cur + 1)
r.transaction(incr, "w")
assert attempts[0] == 2 and r.get("w") == b"101", (attempts, r.get("w"))
steps.append("watch")

id1 = r.client_id()
s = socket.create_connection((host, ctl))
while s.recv(64):
    pass
s.close()
for i in range(5):  # a command on the dead connection may fail once
    try:
        id2 = r.client_id()
        break
    except redis.ConnectionError:
        if i == 4:
            raise
assert id2 != id1 and r.get("k") == b"v", (id1, id2)
steps.append("reconnect")
print(json.dumps({"version": redis.__version__, "steps": steps}))
`

// TestRedisPyClient runs redis-py (Debian's python3-redis, RESP2) through
// the client-matrix scenario the Node and rueidis tests run: the README's
// CL.THROTTLE, CL.INFO's tat_ns as exact digits, SET/GET, a pipeline,
// MULTI/EXEC, transaction() with one attempt aborted by another client,
// and a reconnect after the connection is closed under the client.
func TestRedisPyClient(t *testing.T) {
	py := harness.Python("redis")
	if py == "" {
		t.Skip("no python3 with the redis module (Debian python3-redis; scripts/ensure-tools.sh installs it)")
	}
	_, addr := startServer(t)
	p := startKillProxy(t, addr)
	host, port, ctlPort, wantTat := p.scriptArgs(t)
	ctx, cancel := context.WithTimeout(context.Background(), ioTimeout)
	defer cancel()
	out, err := exec.CommandContext(ctx, py, "-c", redisPyMatrixScript, host, port, ctlPort, wantTat).CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s", py, err, out)
	}
	var res struct {
		Version string
		Steps   []string
	}
	if err := json.Unmarshal(out, &res); err != nil {
		t.Fatalf("output %q: %v", out, err)
	}
	t.Logf("redis-py %s passed: %v (connections closed by the proxy: %d)", res.Version, res.Steps, p.Kills())
	if n := len(res.Steps); n != 7 || res.Steps[n-1] != "reconnect" {
		t.Errorf("steps %v, want all 7 through reconnect", res.Steps)
	}
}
