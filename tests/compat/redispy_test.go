package compat

import (
	"context"
	"encoding/json"
	"net"
	"os/exec"
	"testing"

	"github.com/cellserver/cellserver/internal/servertest"
	"github.com/cellserver/cellserver/server"
	"github.com/cellserver/cellserver/tests/internal/harness"
)

// redisPyScript uses redis-py's optimistic-transaction helpers against
// the server at argv[1]:argv[2] and prints one JSON object:
//
//   - transaction(): several threads increment one counter through
//     Redis.transaction (WATCH, GET, MULTI, SET, EXEC, retried on
//     WatchError); count is the final value, calls how often the
//     callable ran (the excess over the increments are retries);
//   - watch_error: a pipeline that WATCHes a key another client then
//     changes gets WatchError from execute();
//   - unwatched: after reset() (UNWATCH) the same change does not abort.
const redisPyScript = `
import json, sys, threading
import redis

host, port = sys.argv[1], int(sys.argv[2])
THREADS, EACH, KEY = 4, 50, "py:counter"
calls = [0]
lock = threading.Lock()

def worker():
    r = redis.Redis(host=host, port=port)
    def incr(pipe):
        with lock:
            calls[0] += 1
        cur = pipe.get(KEY)
        pipe.multi()
        pipe.set(KEY, int(cur or 0) + 1)
    for _ in range(EACH):
        r.transaction(incr, KEY)

threads = [threading.Thread(target=worker) for _ in range(THREADS)]
for t in threads: t.start()
for t in threads: t.join()
r = redis.Redis(host=host, port=port)
count = int(r.get(KEY))

other = redis.Redis(host=host, port=port)
watch_error = False
with r.pipeline() as pipe:
    pipe.watch("py:k")
    other.set("py:k", "changed")
    pipe.multi()
    pipe.set("py:k", "mine")
    try:
        pipe.execute()
    except redis.WatchError:
        watch_error = True

with r.pipeline() as pipe:
    pipe.watch("py:k")
    pipe.reset()
    other.set("py:k", "changed again")
    pipe.multi()
    pipe.set("py:k", "mine")
    unwatched = pipe.execute() == [True]

print(json.dumps({"version": redis.__version__, "count": count, "want": THREADS * EACH,
                  "calls": calls[0], "watch_error": watch_error, "unwatched": unwatched,
                  "final": r.get("py:k").decode()}))
`

// TestRedisPyTransaction runs redis-py's transaction() and WATCH pipelines
// against cellserver: the counter that several threads increment
// optimistically is exact, a watched key changed by another client makes
// execute() raise WatchError, and reset() unwatches.
func TestRedisPyTransaction(t *testing.T) {
	py := harness.Python("redis")
	if py == "" {
		t.Skip("no python3 with the redis module (Debian python3-redis; scripts/ensure-tools.sh installs it)")
	}
	_, addr := servertest.Start(t, server.Config{})
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*ioTimeout)
	defer cancel()
	out, err := exec.CommandContext(ctx, py, "-c", redisPyScript, host, port).CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s", py, err, out)
	}
	var res struct {
		Version     string
		Count, Want int
		Calls       int
		WatchError  bool `json:"watch_error"`
		Unwatched   bool
		Final       string
	}
	if err := json.Unmarshal(out, &res); err != nil {
		t.Fatalf("output %q: %v", out, err)
	}
	t.Logf("redis-py %s: %d increments, callable ran %d times (%d retries after WatchError)",
		res.Version, res.Count, res.Calls, res.Calls-res.Want)
	if res.Count != res.Want {
		t.Errorf("counter = %d, want %d", res.Count, res.Want)
	}
	if res.Calls < res.Want {
		t.Errorf("callable ran %d times for %d increments", res.Calls, res.Want)
	}
	if !res.WatchError {
		t.Error("execute() after another client changed the watched key did not raise WatchError")
	}
	if !res.Unwatched || res.Final != "mine" {
		t.Errorf("after reset(): execute() succeeded %v, key %q, want true and \"mine\"", res.Unwatched, res.Final)
	}
}
