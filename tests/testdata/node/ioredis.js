// ioredis with its defaults against the cellserver behind the test's
// proxy; see lib.js for argv.
'use strict';
const Redis = require('ioredis');
const version = require('ioredis/package.json').version;
const L = require('./lib');
const { assert } = L;

function connect() {
  const r = new Redis({ host: L.host, port: L.port, retryStrategy: () => 20, lazyConnect: true });
  r.on('error', (e) => L.errors.push(String(e)));
  return r;
}

L.run('ioredis', version, async (step) => {
  const r = connect();
  await r.connect();
  step('connect');

  assert.deepEqual(await r.call(...L.throttleArgs), L.throttleWant, 'CL.THROTTLE');
  step('throttle');
  L.checkTat(await r.call('CL.INFO', 'user123'));
  step('tat_ns');

  assert.equal(await r.set('k', 'v'), 'OK');
  assert.equal(await r.get('k'), 'v');
  assert.equal(await r.get('nokey'), null);
  step('set/get');

  const piped = await r.pipeline().set('p', '1').get('p').get('nokey')
    .call(...L.throttleArgs).exec();
  assert.deepEqual(piped, [[null, 'OK'], [null, '1'], [null, null], [null, [0, 16, 14, -1, 4]]], 'pipeline');
  step('pipeline');

  const tx = await r.multi().set('t', 'x').get('t').call(...L.throttleArgs).exec();
  assert.deepEqual(tx, [[null, 'OK'], [null, 'x'], [null, [0, 16, 13, -1, 6]]], 'MULTI/EXEC');
  step('multi/exec');

  // WATCH: the first attempt sees another client change the key between
  // WATCH and EXEC: exec() resolves to null; the retry commits.
  const other = connect();
  await other.connect();
  await r.set('w', '10');
  let attempts = 0;
  for (;;) {
    attempts++;
    await r.watch('w');
    const cur = Number(await r.get('w'));
    if (attempts === 1) await other.set('w', '100');
    const res = await r.multi().set('w', String(cur + 1)).exec();
    if (res !== null) {
      assert.deepEqual(res, [[null, 'OK']]);
      break;
    }
    if (attempts > 1) throw new Error('the retry aborted too');
  }
  assert.equal(attempts, 2, 'WATCH attempts');
  assert.equal(await r.get('w'), '101', 'WATCH result');
  await other.quit();
  step('watch');

  // Reconnect: the connection is closed under the client; it reconnects
  // and the next command works.
  const id1 = await r.client('ID');
  const ready = new Promise((resolve) => r.once('reconnecting', () => r.once('ready', resolve)));
  await L.killConnections();
  await ready;
  const id2 = await r.client('ID');
  assert.notEqual(id2, id1, 'CLIENT ID after reconnect');
  assert.equal(await r.get('k'), 'v', 'GET after reconnect');
  step('reconnect');
  await r.quit();
});
