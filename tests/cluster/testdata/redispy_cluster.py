# redis-py RedisCluster (Debian python3-redis) against a three-node
# cluster, run by tests/cluster. argv: host port prefix n calls mode burst
# [follow]. With "follow", see follow() below.
# Keys are <prefix>:user:<i>. The first call on every key goes through
# execute_command (routed by the slot map from CLUSTER SLOTS and the key
# position from COMMAND); the remaining calls go in ClusterPipeline
# batches. Prints JSON: how many keys had how many calls admitted.
import json
import logging
import sys
import time

import redis
from redis.cluster import RedisCluster

host, port, prefix, n, calls, mode, burst = sys.argv[1:8]
port, n, calls, burst = int(port), int(n), int(calls), int(burst)
limit = burst + 1


def cmd(key):
    if mode == "incr":
        return ("INCR", key)
    return ("CL.THROTTLE", key, burst, 1, 3600)


def admitted(reply):
    if mode == "incr":
        return int(reply) <= limit
    if not isinstance(reply, list) or len(reply) != 5:
        raise ValueError("CL.THROTTLE replied %r" % (reply,))
    return reply[0] == 0


# redis.cluster logs every retried error with its traceback.
logging.getLogger("redis.cluster").setLevel(logging.CRITICAL)


def emit(obj):
    print(json.dumps(obj), flush=True)


def owner(rc, key):
    node = rc.nodes_manager.get_node_from_slot(rc.keyslot(key))
    return "%s:%d" % (node.host, node.port)


def follow(rc, keys):
    """Node loss, driven by the test over stdin: one call per key, then
    "ready"; on "killed <addr>" every key whose owner (in this client's slot
    map) is alive must be served, and the first of the dead node's fails
    (it costs redis-py 3 tries of 5 attempts 0.25 s apart); on "pushed" the dead
    node's keys are retried until all are served (15 s at most)."""
    for k in keys:
        rc.execute_command(*cmd(k))
    emit({"phase": "ready", "n": len(keys)})
    line = sys.stdin.readline().split()
    dead = line[1]
    dead_keys = [k for k in keys if owner(rc, k) == dead]
    live_ok, live_errors = 0, []
    for k in keys:
        if k in dead_keys:
            continue
        try:
            rc.execute_command(*cmd(k))
            live_ok += 1
        except Exception as e:  # noqa: BLE001
            live_errors.append("%s: %r" % (k, e))
    dead_failed, first_dead = 0, ""
    for k in dead_keys[:1]:
        try:
            rc.execute_command(*cmd(k))
        except Exception as e:  # noqa: BLE001
            dead_failed += 1
            first_dead = first_dead or repr(e)
    emit({"phase": "killed", "liveOk": live_ok, "liveErrors": live_errors[:5], "deadKeys": len(dead_keys),
          "deadTried": min(1, len(dead_keys)), "deadFailed": dead_failed, "firstDeadError": first_dead})
    sys.stdin.readline()
    start = time.monotonic()
    pending, errors, last = list(dead_keys), 0, ""
    while pending and time.monotonic() - start < 15:
        still = []
        for k in pending:
            try:
                rc.execute_command(*cmd(k))
            except Exception as e:  # noqa: BLE001
                errors += 1
                last = repr(e)
                still.append(k)
        pending = still
    emit({"phase": "followed", "ms": int((time.monotonic() - start) * 1000), "pending": len(pending),
          "errors": errors, "lastError": last, "served": len(dead_keys) - len(pending)})


start = time.monotonic()
rc = RedisCluster(host=host, port=port, socket_timeout=5)
keys = ["%s:user:%d" % (prefix, i) for i in range(n)]
if sys.argv[8:] == ["follow"]:
    follow(rc, keys)
    sys.exit(0)
got = [0] * n
errors, first = 0, []
for i, k in enumerate(keys):
    try:
        if admitted(rc.execute_command(*cmd(k))):
            got[i] += 1
    except Exception as e:  # noqa: BLE001 - reported to the test
        errors += 1
        if len(first) < 5:
            first.append("%s: %r" % (k, e))
batch = 500
for b in range(0, n, batch):
    pipe = rc.pipeline()
    for k in keys[b:b + batch]:
        for _ in range(calls - 1):
            pipe.execute_command(*cmd(k))
    try:
        replies = pipe.execute(raise_on_error=False)
    except Exception as e:  # noqa: BLE001
        errors += 1
        first.append("pipeline at %d: %r" % (b, e))
        continue
    for j, r in enumerate(replies):
        i = b + j // (calls - 1)
        if isinstance(r, Exception):
            errors += 1
            if len(first) < 5:
                first.append("%s: %r" % (keys[i], r))
        elif admitted(r):
            got[i] += 1
hist = {}
for g in got:
    hist[str(g)] = hist.get(str(g), 0) + 1
print(json.dumps({"client": "redis-py", "version": redis.__version__, "hist": hist,
                  "errors": errors, "firstErrors": first, "calls": n * calls,
                  "ms": int((time.monotonic() - start) * 1000),
                  "note": "(execute_command once per key, then ClusterPipeline batches of %d keys)" % batch}))
