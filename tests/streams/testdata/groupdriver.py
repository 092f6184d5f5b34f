# redis-py driver of tests/streams: runs one consumer-group operation per
# request line read from stdin (JSON) and answers one JSON line on stdout.
# argv[1] is a JSON object: {"addr": "host:port"} or {"sentinels":
# ["host:port", ...], "master": name}, with "stream", "group" and "wait"
# (send WAIT 1 1000 after every write, on the same connection).
# The operations and their answers are those of streams_test.go's request
# and response; an error answers {"err": "..."} and the next request goes on
# (redis-py reconnects, through Sentinel when given sentinels).
import json
import sys

import redis
from redis.sentinel import Sentinel

cfg = json.loads(sys.argv[1])
stream, group, wait = cfg["stream"], cfg["group"], cfg["wait"]
opts = dict(socket_timeout=3, socket_connect_timeout=1, decode_responses=True)
if "sentinels" in cfg:
    hosts = [(a.rsplit(":", 1)[0], int(a.rsplit(":", 1)[1])) for a in cfg["sentinels"]]
    r = Sentinel(hosts, socket_timeout=1, socket_connect_timeout=1).master_for(cfg["master"], **opts)
else:
    host, port = cfg["addr"].rsplit(":", 1)
    r = redis.Redis(host=host, port=int(port), **opts)


def entries(lst):
    # [(id, {"i": v})] -> [[id, v]]; a deleted entry (fields None) -> [id, null]
    return [[eid, (fields or {}).get("i")] for eid, fields in lst or []]


def write(fn):
    # fn(pipeline-or-client) -> reply; with wait, followed by WAIT on the
    # same connection: (reply, replicas that acknowledged).
    if not wait:
        return fn(r), -1
    p = r.pipeline(transaction=False)
    fn(p)
    p.execute_command("WAIT", 1, 1000)
    reply, waited = p.execute()
    return reply, waited


def run(req):
    op = req["op"]
    if op == "ping":
        r.ping()
        return {}
    if op == "xadd":
        eid, waited = write(lambda c: c.xadd(stream, {"i": str(req["i"])}))
        return {"id": eid, "waited": waited}
    if op == "read":
        reply, waited = write(lambda c: c.xreadgroup(group, req["consumer"], {stream: req["id"]}, count=req["count"]))
        got = []
        for _name, lst in reply or []:
            got += entries(lst)
        return {"entries": got, "waited": waited}
    if op == "ack":
        n, waited = write(lambda c: c.xack(stream, group, req["id"]))
        return {"n": n, "waited": waited}
    if op == "pending":
        rows = r.xpending_range(stream, group, min="-", max="+", count=100000)
        return {"pending": [[x["message_id"], x["consumer"], x["times_delivered"]] for x in rows]}
    if op == "claim":
        reply, waited = write(lambda c: c.xclaim(stream, group, req["consumer"], 0, req["ids"]))
        return {"entries": entries(reply), "waited": waited}
    if op == "autoclaim":
        reply, waited = write(lambda c: c.xautoclaim(stream, group, req["consumer"], 0, start_id=req["start"], count=req["count"]))
        return {"next": reply[0], "entries": entries(reply[1]), "waited": waited}
    raise ValueError("unknown op " + op)


print(json.dumps({"client": "redis-py", "version": redis.__version__}), flush=True)
for line in sys.stdin:
    if not line.strip():
        continue
    try:
        out = run(json.loads(line))
    except Exception as e:  # every failure is the answer, the Go side judges it
        out = {"err": "%s: %s" % (type(e).__name__, e)}
    print(json.dumps(out), flush=True)
