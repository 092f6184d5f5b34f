// Shared by the client scripts that tests/compat runs (clients_node_test.go).
// argv: host port control-port tat_ns. The control port belongs to the
// test's proxy between client and cellserver: connecting to it closes every
// connection the proxy carries, so the client sees the server close its
// connection and must reconnect.
'use strict';
const net = require('net');
const assert = require('assert/strict');

const [host, portStr, ctlStr, wantTat] = process.argv.slice(2);
const port = Number(portStr);
const ctlPort = Number(ctlStr);

// killConnections asks the proxy to close every client connection and
// resolves once it has.
function killConnections() {
  return new Promise((resolve, reject) => {
    const s = net.connect(ctlPort, host);
    s.on('error', reject);
    s.on('close', resolve);
    s.resume();
  });
}

// The README's example on a fresh key: allowed, limit 16, 15 left, no
// retry, reset in 2 s.
const throttleArgs = ['CL.THROTTLE', 'user123', '15', '30', '60', '1'];
const throttleWant = [0, 16, 15, -1, 2];

// fieldMap turns CL.INFO's reply into an object: a RESP3 map arrives as an
// object or a Map, a RESP2 array as name/value pairs.
function fieldMap(reply) {
  if (reply instanceof Map) return Object.fromEntries(reply);
  if (Array.isArray(reply)) {
    const o = {};
    for (let i = 0; i < reply.length; i += 2) o[String(reply[i])] = reply[i + 1];
    return o;
  }
  return reply;
}

// checkTat: tat_ns is a bulk string of decimal digits, read exactly.
function checkTat(info) {
  const m = fieldMap(info);
  assert.equal(String(m.kind), 'gcra', 'CL.INFO kind');
  const tat = m.tat_ns;
  assert.ok(typeof tat === 'string' || Buffer.isBuffer(tat), `tat_ns is a ${typeof tat} (${tat}), want a string`);
  assert.equal(BigInt(String(tat)), BigInt(wantTat), 'tat_ns exact');
  return String(tat);
}

// errors collects the clients' error events, for the timeout message.
const errors = [];

async function run(name, version, body) {
  const steps = [];
  const timer = setTimeout(() => {
    console.error(`${name} ${version}: timed out after steps [${steps.join(', ')}]; ` +
      `${errors.length} error events, the first: ${[...new Set(errors)].slice(0, 3).join(' | ')}`);
    process.exit(2);
  }, 20000);
  try {
    await body((s) => steps.push(s));
  } catch (e) {
    console.error(`${name} ${version}: failed after steps [${steps.join(', ')}]: ${e && e.stack || e}`);
    process.exit(1);
  }
  clearTimeout(timer);
  console.log(JSON.stringify({ client: name, version, steps }));
  process.exit(0);
}

module.exports = { errors, host, port, assert, killConnections, throttleArgs, throttleWant, fieldMap, checkTat, run };
