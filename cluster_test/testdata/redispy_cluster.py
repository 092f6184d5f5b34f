# redis-py RedisCluster (Debian python3-redis) against a three-node
# cluster, run by cluster_test. argv: host port prefix n calls mode burst.
# Keys are <prefix>:user:<i>. The first call on every key goes through
# execute_command (routed by the slot map from CLUSTER SLOTS and the key
# position from COMMAND); the remaining calls go in ClusterPipeline
# batches. Prints JSON: how many keys had how many calls admitted.
import json
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


start = time.monotonic()
rc = RedisCluster(host=host, port=port, socket_timeout=5)
keys = ["%s:user:%d" % (prefix, i) for i in range(n)]
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
