// node-redis with its defaults (RESP3: HELLO 3 on connect) against the
// cellserver behind the test's proxy; see lib.js for argv.
'use strict';
const { createClient, WatchError } = require('redis');
const version = require('redis/package.json').version;
const L = require('./lib');
const { assert } = L;

function connect() {
  const c = createClient({ socket: { host: L.host, port: L.port, reconnectStrategy: () => 20 } });
  c.on('error', (e) => L.errors.push(String(e)));
  return c;
}

L.run('node-redis', version, async (step) => {
  const c = connect();
  await c.connect();
  step('connect');
  const hello = await c.sendCommand(['HELLO']);
  assert.equal(Number(hello.proto), 3, 'HELLO proto');
  step('resp3');

  assert.deepEqual(await c.sendCommand(L.throttleArgs), L.throttleWant, 'CL.THROTTLE');
  step('throttle');
  L.checkTat(await c.sendCommand(['CL.INFO', 'user123']));
  step('tat_ns');

  assert.equal(await c.set('k', 'v'), 'OK');
  assert.equal(await c.get('k'), 'v');
  assert.equal(await c.get('nokey'), null);
  step('set/get');

  const piped = await c.multi().set('p', '1').get('p').get('nokey')
    .addCommand(L.throttleArgs).execAsPipeline();
  assert.deepEqual(piped, ['OK', '1', null, [0, 16, 14, -1, 4]], 'pipeline');
  step('pipeline');

  const tx = await c.multi().set('t', 'x').get('t').addCommand(L.throttleArgs).exec();
  assert.deepEqual(tx, ['OK', 'x', [0, 16, 13, -1, 6]], 'MULTI/EXEC');
  step('multi/exec');

  // WATCH: the first attempt sees another client change the key between
  // WATCH and EXEC and aborts with WatchError; the retry commits.
  const other = connect();
  await other.connect();
  await c.set('w', '10');
  let attempts = 0;
  for (;;) {
    attempts++;
    await c.watch('w');
    const cur = Number(await c.get('w'));
    if (attempts === 1) await other.set('w', '100');
    try {
      await c.multi().set('w', String(cur + 1)).exec();
      break;
    } catch (e) {
      if (!(e instanceof WatchError) || attempts > 1) throw e;
    }
  }
  assert.equal(attempts, 2, 'WATCH attempts');
  assert.equal(await c.get('w'), '101', 'WATCH result');
  await other.quit();
  step('watch');

  // Reconnect: the connection is closed under the client; it reconnects
  // (HELLO 3 again) and the next command works.
  const id1 = await c.clientId();
  const ready = new Promise((resolve) => c.once('reconnecting', () => c.once('ready', resolve)));
  await L.killConnections();
  await ready;
  const id2 = await c.clientId();
  assert.notEqual(id2, id1, 'CLIENT ID after reconnect');
  assert.equal(await c.get('k'), 'v', 'GET after reconnect');
  assert.equal(Number((await c.sendCommand(['HELLO'])).proto), 3, 'proto after reconnect');
  step('reconnect');
  await c.quit();
});
