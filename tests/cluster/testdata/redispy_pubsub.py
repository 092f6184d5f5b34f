# redis-py RedisCluster (Debian python3-redis) pub/sub, run by tests/cluster
# (TestPubSub*). argv: host port total shardchannel... Subscribes to
# "news" (ClusterPubSub picks the node serving the channel's slot) and, on
# a ClusterPubSub of its own per shard channel, SSUBSCRIBEs to it (redis-py
# 4.3 has no ssubscribe method: the command goes through execute_command,
# which routes it the same way). Prints {"phase":"ready"}, then reads until
# it has `total` messages or 30 s pass, and prints them: "kind channel
# payload" each.
import json
import sys
import time

from redis.cluster import RedisCluster, ClusterNode

host, port, total = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
shard = sys.argv[4:]


def emit(obj):
    print(json.dumps(obj), flush=True)


rc = RedisCluster(startup_nodes=[ClusterNode(host, port)], decode_responses=True)
plain = rc.pubsub()
plain.subscribe("news")
subs = [plain]
for ch in shard:
    p = rc.pubsub()
    p.execute_command("SSUBSCRIBE", ch)
    subs.append(p)
# Wait for every confirmation before saying ready.
got = []
pending = 1 + len(shard)
deadline = time.time() + 30
while pending and time.time() < deadline:
    for p in subs:
        r = p.parse_response(block=False, timeout=0.05)
        if r and r[0] in ("subscribe", "ssubscribe"):
            pending -= 1
        elif r:
            got.append("%s %s %s" % (r[0], r[1], r[2]))
emit({"phase": "ready", "node": plain.get_pubsub_node().name})
deadline = time.time() + 30
while len(got) < total and time.time() < deadline:
    for p in subs:
        r = p.parse_response(block=False, timeout=0.01)
        if r and r[0] in ("message", "smessage"):
            got.append("%s %s %s" % (r[0], r[1], r[2]))
emit({"phase": "done", "messages": got})
