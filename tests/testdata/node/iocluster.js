// ioredis Cluster against a three-node cluster, run by tests/cluster.
// argv: host port prefix n calls mode burst keyed [follow]. Keys are
// <prefix>:user:<i>; each gets `calls` calls in sequence, with up to 64
// keys in flight. ioredis routes by its built-in command table, which does
// not list CL.THROTTLE: with keyed=true each call is a Command whose keys
// are set by hand, so it goes to the slot's owner; with keyed=false it is
// cluster.call(...) as is (a random node, then MOVED). Prints JSON: how
// many keys had how many calls admitted. With "follow", see follow().
'use strict';
const readline = require('readline');
const Redis = require('ioredis');
const calculateSlot = require('cluster-key-slot');
const version = require('ioredis/package.json').version;

const [host, portStr, prefix, nStr, callsStr, mode, burstStr, keyedStr, followArg] = process.argv.slice(2);
const n = Number(nStr);
const calls = Number(callsStr);
const burst = Number(burstStr);
const limit = burst + 1;
const keyed = keyedStr === 'true';

function args(key) {
  return mode === 'incr' ? ['INCR', key] : ['CL.THROTTLE', key, String(burst), '1', '3600'];
}

function admitted(reply) {
  if (mode === 'incr') return Number(reply) <= limit;
  if (!Array.isArray(reply) || reply.length !== 5) throw new Error('CL.THROTTLE replied ' + JSON.stringify(reply));
  return reply[0] === 0;
}

function emit(obj) {
  process.stdout.write(JSON.stringify(obj) + '\n');
}

// follow: node loss, driven by the test over stdin. One call per key, then
// "ready"; on "killed <addr>" every key whose owner (in this client's slot
// map) is alive must be served and the first 2 of the dead node's fail; on
// "pushed" the dead node's keys are retried until all are served (15 s at
// most).
async function follow(cluster, send, keys) {
  const lines = readline.createInterface({ input: process.stdin })[Symbol.asyncIterator]();
  for (const k of keys) await send(k);
  emit({ phase: 'ready', n: keys.length });
  const dead = (await lines.next()).value.split(' ')[1];
  const deadKeys = keys.filter((k) => (cluster.slots[calculateSlot(k)] || [])[0] === dead);
  let liveOk = 0;
  const liveErrors = [];
  for (const k of keys) {
    if (deadKeys.includes(k)) continue;
    try {
      await send(k);
      liveOk++;
    } catch (e) {
      if (liveErrors.length < 5) liveErrors.push(`${k}: ${e}`);
    }
  }
  let deadFailed = 0;
  let firstDeadError = '';
  for (const k of deadKeys.slice(0, 2)) {
    try {
      await send(k);
    } catch (e) {
      deadFailed++;
      firstDeadError = firstDeadError || String(e);
    }
  }
  emit({ phase: 'killed', liveOk, liveErrors, deadKeys: deadKeys.length, deadTried: Math.min(2, deadKeys.length), deadFailed, firstDeadError });
  await lines.next();
  const start = Date.now();
  let pending = deadKeys;
  let errors = 0;
  let lastError = '';
  while (pending.length > 0 && Date.now() - start < 15000) {
    const still = [];
    for (const k of pending) {
      try {
        await send(k);
      } catch (e) {
        errors++;
        lastError = String(e);
        still.push(k);
      }
    }
    pending = still;
    if (pending.length > 0) await new Promise((r) => setTimeout(r, 50));
  }
  emit({ phase: 'followed', ms: Date.now() - start, pending: pending.length, errors, lastError, served: deadKeys.length - pending.length });
}

async function main() {
  const start = Date.now();
  const cluster = new Redis.Cluster([{ host, port: Number(portStr) }], {
    redisOptions: { connectTimeout: 1000, commandTimeout: 2000 },
    clusterRetryStrategy: () => null,
  });
  let refreshes = 0;
  cluster.on('refresh', () => refreshes++);
  await new Promise((resolve, reject) => {
    cluster.once('ready', resolve);
    cluster.once('error', reject);
  });
  const send = (key) => {
    const [name, ...rest] = args(key);
    if (!keyed) return cluster.call(name, ...rest);
    const cmd = new Redis.Command(name, rest, { replyEncoding: null });
    cmd.keys = [key];
    cluster.sendCommand(cmd);
    return cmd.promise;
  };
  if (followArg === 'follow') {
    const keys = Array.from({ length: n }, (_, i) => `${prefix}:user:${i}`);
    await follow(cluster, send, keys);
    cluster.disconnect();
    return;
  }
  const got = new Array(n).fill(0);
  let errors = 0;
  const firstErrors = [];
  let next = 0;
  async function worker() {
    for (;;) {
      const i = next++;
      if (i >= n) return;
      const key = `${prefix}:user:${i}`;
      for (let c = 0; c < calls; c++) {
        try {
          if (admitted(await send(key))) got[i]++;
        } catch (e) {
          errors++;
          if (firstErrors.length < 5) firstErrors.push(`${key}: ${e}`);
        }
      }
    }
  }
  await Promise.all(Array.from({ length: 64 }, worker));
  cluster.disconnect();
  const hist = {};
  for (const g of got) hist[g] = (hist[g] || 0) + 1;
  process.stdout.write(JSON.stringify({
    client: 'ioredis', version, hist, errors, firstErrors, calls: n * calls, ms: Date.now() - start,
    note: `(keyed=${keyed}, 64 keys in flight, slot refreshes: ${refreshes})`,
  }) + '\n');
}

main().catch((e) => {
  process.stderr.write(String(e && e.stack || e) + '\n');
  process.exit(1);
});
