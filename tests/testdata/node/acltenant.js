// ioredis, authenticated as an ACL user, hammers its own CL.THROTTLE key
// and tries the other tenant's key (tests/acl). argv: host port user
// password own-prefix other-prefix n. Each of n steps sends CL.THROTTLE
// <own>:lim 99 1 3600 1; every fourth also GET <other>:lim, which must be
// refused with NOPERM. Prints {client, version, allowed (the remaining
// of each allowed reply), refused, noperm}.
'use strict';
const Redis = require('ioredis');
const version = require('ioredis/package.json').version;
const assert = require('assert/strict');

const [host, port, user, pass, own, other, nStr] = process.argv.slice(2);
const n = Number(nStr);
const nopermKey = 'NOPERM this user has no permissions to access one of the keys used as arguments';

async function main() {
  // No ready check: it sends INFO, which the tenant may not run (and
  // each refusal would be one more ACL LOG count).
  const r = new Redis({ host, port: Number(port), username: user, password: pass,
    enableReadyCheck: false, lazyConnect: true, maxRetriesPerRequest: 0 });
  await r.connect();
  const out = { client: 'ioredis', version, allowed: [], refused: 0, noperm: 0 };
  for (let i = 0; i < n; i++) {
    const v = await r.call('CL.THROTTLE', own + ':lim', '99', '1', '3600', '1');
    assert.equal(v.length, 5, `reply ${v}`);
    assert.equal(v[1], 100, `limit in ${v}`);
    if (v[0] === 0) {
      out.allowed.push(v[2]);
    } else {
      assert.ok(v[0] === 1 && v[2] === 0 && v[3] > 0 && v[4] > 0, `refused reply ${v}`);
      out.refused++;
    }
    if (i % 4 === 0) {
      await assert.rejects(r.get(other + ':lim'), (e) => {
        assert.equal(e.message, nopermKey);
        return true;
      });
      out.noperm++;
    }
  }
  await r.quit();
  console.log(JSON.stringify(out));
}

const timer = setTimeout(() => { console.error('timed out'); process.exit(2); }, 60000);
main().then(() => clearTimeout(timer), (e) => { console.error(e && e.stack || e); process.exit(1); });
