// ioredis driver of tests/streams: runs one consumer-group operation per
// request line read from stdin (JSON) and answers one JSON line on stdout.
// argv[2] is a JSON object: {"addr": "host:port"} or {"sentinels":
// ["host:port", ...], "master": name}, with "stream", "group" and "wait"
// (send WAIT 1 1000 after every write, in a pipeline: the same connection).
// The operations and their answers are those of tests/streams's request
// and response (streams_test.go); an error answers {"err": "..."} and the
// next request goes on (ioredis reconnects, through Sentinel when given
// sentinels). ioredis speaks RESP3 by default, its maps read as flat
// [key, value, ...] arrays.
'use strict';
const Redis = require('ioredis');
const version = require('ioredis/package.json').version;
const readline = require('readline');

const cfg = JSON.parse(process.argv[2]);
const { stream, group, wait } = cfg;
const hp = (a) => { const i = a.lastIndexOf(':'); return { host: a.slice(0, i), port: Number(a.slice(i + 1)) }; };
const common = { commandTimeout: 5000, connectTimeout: 1000, retryStrategy: () => 50 };
const r = cfg.sentinels
  ? new Redis({ ...common, sentinels: cfg.sentinels.map(hp), name: cfg.master, sentinelRetryStrategy: () => 50 })
  : new Redis({ ...common, ...hp(cfg.addr) });
r.on('error', () => {}); // reconnects are the point; each failed request answers its error

// entries turns [[id, [field, value, ...]], ...] into [[id, value of i]];
// a deleted entry (fields null) into [id, null].
function entries(list) {
  return (list || []).map(([id, fields]) => {
    let v = null;
    for (let i = 0; fields && i + 1 < fields.length; i += 2) if (String(fields[i]) === 'i') v = String(fields[i + 1]);
    return [String(id), v];
  });
}

// write sends args and, with wait, WAIT 1 1000 on the same connection:
// [reply, replicas that acknowledged (-1 without wait)].
async function write(...args) {
  if (!wait) return [await r.call(...args), -1];
  const res = await r.pipeline().call(...args).call('WAIT', '1', '1000').exec();
  for (const [err] of res) if (err) throw err;
  return [res[0][1], res[1][1]];
}

async function run(req) {
  switch (req.op) {
    case 'ping':
      await r.ping();
      return {};
    case 'xadd': {
      const [id, waited] = await write('XADD', stream, '*', 'i', String(req.i));
      return { id: String(id), waited };
    }
    case 'read': {
      const [reply, waited] = await write('XREADGROUP', 'GROUP', group, req.consumer, 'COUNT', String(req.count),
        'STREAMS', stream, req.id);
      let got = [];
      if (reply) {
        // RESP2: [[stream, entries]]; RESP3 (a map): [stream, entries].
        const pairs = Array.isArray(reply[0]) ? reply : [reply];
        for (const p of pairs) got = got.concat(entries(p[1]));
      }
      return { entries: got, waited };
    }
    case 'ack': {
      const [n, waited] = await write('XACK', stream, group, req.id);
      return { n, waited };
    }
    case 'pending': {
      const rows = await r.call('XPENDING', stream, group, '-', '+', '100000');
      return { pending: rows.map((x) => [String(x[0]), String(x[1]), Number(x[3])]) };
    }
    case 'claim': {
      const [reply, waited] = await write('XCLAIM', stream, group, req.consumer, '0', ...req.ids);
      return { entries: entries(reply), waited };
    }
    case 'autoclaim': {
      const [reply, waited] = await write('XAUTOCLAIM', stream, group, req.consumer, '0', req.start,
        'COUNT', String(req.count));
      return { next: String(reply[0]), entries: entries(reply[1]), waited };
    }
    default:
      throw new Error('unknown op ' + req.op);
  }
}

async function main() {
  console.log(JSON.stringify({ client: 'ioredis', version }));
  const rl = readline.createInterface({ input: process.stdin });
  for await (const line of rl) {
    if (!line.trim()) continue;
    let out;
    try {
      out = await run(JSON.parse(line));
    } catch (e) {
      out = { err: String(e && e.message || e) };
    }
    console.log(JSON.stringify(out));
  }
  r.disconnect();
}

main().catch((e) => { console.error(e && e.stack || e); process.exit(1); });
