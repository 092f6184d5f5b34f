// ioredis Cluster pub/sub, run by tests/cluster (TestPubSub*). argv: host
// port total shardchannel... SUBSCRIBE "news" goes through the Cluster's
// subscriber connection (to a node of ioredis's choosing), SSUBSCRIBE
// through its sharded subscribers (shardedSubscribers: to the node serving
// each channel's slot). Prints {"phase":"ready"}, then collects until it
// has `total` messages or 30 s pass, and prints them: "kind channel
// payload" each.
'use strict';
const Redis = require('ioredis');

const [host, portStr, totalStr, ...shard] = process.argv.slice(2);
const total = Number(totalStr);

function emit(obj) {
  process.stdout.write(JSON.stringify(obj) + '\n');
}

async function main() {
  const cluster = new Redis.Cluster([{ host, port: Number(portStr) }], { shardedSubscribers: true });
  const got = [];
  let done;
  const finished = new Promise((resolve) => { done = resolve; });
  const add = (kind) => (channel, message) => {
    got.push(`${kind} ${channel} ${message}`);
    if (got.length >= total) done();
  };
  cluster.on('message', add('message'));
  cluster.on('smessage', add('smessage'));
  await cluster.subscribe('news');
  for (const ch of shard) await cluster.ssubscribe(ch);
  emit({ phase: 'ready' });
  const timer = setTimeout(done, 30000);
  await finished;
  clearTimeout(timer);
  emit({ phase: 'done', messages: got });
  cluster.disconnect();
}

main().catch((e) => {
  process.stderr.write(String(e && e.stack || e) + '\n');
  process.exit(1);
});
