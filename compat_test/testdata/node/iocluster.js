// ioredis Cluster against a three-node cluster, run by cluster_test.
// argv: host port prefix n calls mode burst keyed. Keys are
// <prefix>:user:<i>; each gets `calls` calls in sequence, with up to 64
// keys in flight. ioredis routes by its built-in command table, which does
// not list CL.THROTTLE: with keyed=true each call is a Command whose keys
// are set by hand, so it goes to the slot's owner; with keyed=false it is
// cluster.call(...) as is (a random node, then MOVED). Prints JSON: how
// many keys had how many calls admitted.
'use strict';
const Redis = require('ioredis');
const version = require('ioredis/package.json').version;

const [host, portStr, prefix, nStr, callsStr, mode, burstStr, keyedStr] = process.argv.slice(2);
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

async function main() {
  const start = Date.now();
  const cluster = new Redis.Cluster([{ host, port: Number(portStr) }], {
    redisOptions: { connectTimeout: 2000 },
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
