'use strict';
// The Elector against a real server: leading, events, fencing, losing a
// term (forced release, a killed session-bound connection), handoff on
// stop(), health(), exact 64-bit generations, hoplock_watch.
const test = require('node:test');
const assert = require('node:assert/strict');
const { performance } = require('node:perf_hooks');
const pg = require('pg');
const hoplock = require('..');
const { Server, SCHEMA, leaseName, waitUntil } = require('./server');

const server = new Server();
let admin;
const pools = [];
function pool(max = 6, extra = {}) {
  const p = new pg.Pool({ ...server.config, max, ...extra });
  p.on('error', () => {}); // an idle connection terminated by a test
  pools.push(p);
  return p;
}
const ms = (t) => (performance.now() - t).toFixed(1);

test.before(async () => {
  await server.start();
  admin = new pg.Client(server.config);
  await admin.connect();
});
test.after(async () => {
  if (admin) await admin.end();
  await Promise.all(pools.map((p) => p.end()));
  server.stop();
});

test('lead: a term with an exact generation, fenced writes, released at the end', async () => {
  const name = leaseName('lead');
  await admin.query('CREATE TABLE lead_log (generation bigint)');
  const e = new hoplock.Elector(pool(), { name, ttl: 6 });
  const events = [];
  e.on('acquired', (l) => events.push(['acquired', l.generation]));
  e.on('lost', (l, err) => events.push(['lost', l.generation, err]));
  const g = await e.lead(async (term) => {
    assert.equal(typeof term.generation, 'bigint');
    const { rows } = await admin.query(`SELECT generation::text AS g FROM "${SCHEMA}".hoplock_holder($1)`, [name]);
    assert.equal(term.generation.toString(), rows[0].g); // exact, above 2^53
    assert.ok(term.generation > BigInt(Number.MAX_SAFE_INTEGER), 'generations are above 2^53');
    await term.fenced((c) => c.query('INSERT INTO lead_log VALUES ($1)', [term.generation.toString()]));
    assert.equal(term.lost, false);
    assert.equal(e.health().ok, true);
    assert.equal(e.health().leading, true);
    return term.generation;
  });
  const { rows } = await admin.query('SELECT generation::text AS g FROM lead_log');
  assert.deepEqual(rows, [{ g: g.toString() }]);
  const h = await admin.query(`SELECT * FROM "${SCHEMA}".hoplock_holder($1)`, [name]);
  assert.equal(h.rows[0].generation, null, 'released');
  assert.deepEqual(events, [['acquired', g], ['lost', g, null]]);
});

test('one lead() or run() at a time on an Elector; fn gets the signal too', async () => {
  const e = new hoplock.Elector(pool(), { name: leaseName('busy'), ttl: 6 });
  await e.lead(async (term, signal) => {
    assert.equal(signal, term.signal);
    await assert.rejects(e.lead(() => 1), /already running/);
    await assert.rejects(e.run(), /already running/);
  });
});

test('fenced: a generation that does not hold is refused, nothing written', async () => {
  const name = leaseName('fence');
  await admin.query('CREATE TABLE fence_log (x int)');
  const e = new hoplock.Elector(pool(), { name, ttl: 6 });
  const g = await e.lead((term) => term.generation);
  await assert.rejects(e.fenced(g, (c) => c.query('INSERT INTO fence_log VALUES (1)')), hoplock.FenceRefused);
  const { rows } = await admin.query('SELECT count(*)::int AS n FROM fence_log');
  assert.equal(rows[0].n, 0);
});

for (const follow of ['listen', 'watch']) {
  test(`a forced release aborts the signal at once (${follow}); another instance leads`, async () => {
    const name = leaseName(`force-${follow}`);
    const a = new hoplock.Elector(pool(), { name, owner: 'a', ttl: 9, follow });
    const b = new hoplock.Elector(pool(), { name, owner: 'b', ttl: 9, follow, value: 'http://b:8080' });
    const leaders = [];
    a.on('leader', (l) => leaders.push(l));
    let t0 = 0;
    let lostAfter = 0;
    let bLeads;
    const err = await a.lead(async (term) => {
      bLeads = b.lead(async (t2) => {
        const at = performance.now();
        await new Promise((r) => setTimeout(r, 300));
        return { at, g: t2.generation };
      });
      await waitUntil(async () => (await admin.query(`SELECT count(*)::int AS n FROM "${SCHEMA}".hoplock_candidates WHERE name = $1`, [name])).rows[0].n === 1);
      t0 = performance.now();
      await admin.query(`SELECT "${SCHEMA}".hoplock_force_release($1)`, [name]);
      await new Promise((resolve) => term.signal.addEventListener('abort', resolve, { once: true }));
      lostAfter = performance.now() - t0;
      throw term.signal.reason;
    }).catch((x) => x);
    assert.ok(err instanceof hoplock.LeadershipLost, String(err));
    assert.ok(err.cause instanceof hoplock.NoLease || err.cause instanceof hoplock.LeaseHeld, String(err.cause));
    assert.ok(lostAfter < 1000, `lost after ${lostAfter} ms`);
    const got = await bLeads;
    // a, no longer leading, reports b's term with its value
    const other = await a.leader();
    assert.equal(other, null); // b released at the end
    console.log(`measure: node forced release -> term lost (${follow}) ${lostAfter.toFixed(1)} ms; follower leads ${(got.at - t0).toFixed(1)} ms`);
    void leaders;
  });
}

test("'leader' events: another instance's term, with its value, once per term", async () => {
  const name = leaseName('leader');
  const a = new hoplock.Elector(pool(), { name, owner: 'a', ttl: 6, value: 'addr-a' });
  const b = new hoplock.Elector(pool(), { name, owner: 'b', ttl: 6 });
  const seen = [];
  b.on('leader', (l) => seen.push(l));
  let release;
  const held = new Promise((r) => { release = r; });
  const aDone = a.lead(async (term) => { await held; return term.generation; });
  await waitUntil(async () => (await a.leader()) !== null);
  const run = b.run();
  await waitUntil(() => seen.length === 1);
  assert.equal(seen[0].owner, 'a');
  assert.equal(seen[0].value, 'addr-a');
  const acquired = new Promise((r) => b.once('acquired', r));
  release();
  const g = await aDone;
  assert.equal(seen[0].generation, g);
  const lb = await acquired;
  assert.ok(lb.generation > g);
  b.stop();
  await run;
  assert.equal(seen.length, 1);
});

test('stop() while leading hands the term to the waiting candidate', async () => {
  const name = leaseName('handoff');
  const a = new hoplock.Elector(pool(), { name, owner: 'a', ttl: 9, handoffLinger: 0 });
  const b = new hoplock.Elector(pool(), { name, owner: 'b', ttl: 9 });
  let bLeads;
  const err = await a.lead(async (term) => {
    bLeads = b.lead((t) => t.generation);
    await waitUntil(async () => (await admin.query(`SELECT count(*)::int AS n FROM "${SCHEMA}".hoplock_candidates WHERE name = $1`, [name])).rows[0].n === 1);
    a.stop();
    assert.ok(term.signal.aborted);
    assert.equal(term.cause, null);
    return 'done';
  }).catch((x) => x);
  assert.equal(err, 'done');
  const gb = await bLeads;
  const { rows } = await admin.query(`SELECT how, owner FROM "${SCHEMA}".hoplock_history WHERE name = $1 ORDER BY generation`, [name]);
  assert.equal(rows[0].how, 'handed off');
  assert.equal(rows[1].owner, 'b');
  assert.equal(typeof gb, 'bigint');
  await assert.rejects(a.lead(() => 1), hoplock.Stopped);
});

test('a wait outlasting the ttl (poll > ttl) keeps the term it gets late: renewed, led, not released', async () => {
  const name = leaseName('late');
  await admin.query(`SELECT "${SCHEMA}".hoplock_acquire($1, 'holder', '30 s')`, [name]);
  const e = new hoplock.Elector(pool(), { name, owner: 'late', ttl: 1, poll: 5 });
  const releaseLate = (async () => {
    await waitUntil(async () => (await admin.query(`SELECT count(*)::int AS n FROM "${SCHEMA}".hoplock_candidates WHERE name = $1`, [name])).rows[0].n === 1);
    await new Promise((r) => setTimeout(r, 1500)); // past the candidate's ttl, within its wait
    await admin.query(`SELECT "${SCHEMA}".hoplock_release($1, 'holder')`, [name]);
  })();
  const g = await e.lead((term) => {
    assert.equal(term.lost, false);
    return term.generation;
  });
  await releaseLate;
  const { rows } = await admin.query(`SELECT owner, generation::text AS g FROM "${SCHEMA}".hoplock_history WHERE name = $1 ORDER BY generation`, [name]);
  assert.deepEqual(rows.map((r) => r.owner), ['holder', 'late'], 'no term released unused');
  assert.equal(rows[1].g, g.toString());
});

test('stop() before leading: Stopped, the wait cancelled in the server, the pool clean', async () => {
  const name = leaseName('stopwait');
  const p = pool(3);
  const holder = new hoplock.Elector(pool(), { name, owner: 'h', ttl: 9 });
  let release;
  const held = new Promise((r) => { release = r; });
  const h = holder.lead(() => held);
  await waitUntil(async () => (await holder.leader()) !== null);
  const e = new hoplock.Elector(p, { name, owner: 'w', ttl: 9, poll: 60 });
  const t = e.lead(() => 'never');
  await waitUntil(async () => (await admin.query(`SELECT count(*)::int AS n FROM "${SCHEMA}".hoplock_candidates WHERE name = $1`, [name])).rows[0].n === 1);
  const t0 = performance.now();
  e.stop();
  await assert.rejects(t, hoplock.Stopped);
  const took = performance.now() - t0;
  assert.ok(took < 2000, `stop took ${took} ms`);
  const { rows } = await admin.query(`SELECT count(*)::int AS n FROM "${SCHEMA}".hoplock_candidates WHERE name = $1`, [name]);
  assert.equal(rows[0].n, 0);
  const r = await p.query('SELECT 1 AS one'); // the pool's connections are usable
  assert.equal(r.rows[0].one, 1);
  release();
  await h;
  console.log(`measure: node stop() of a waiting Elector -> lead rejects ${took.toFixed(1)} ms`);
});

test('session-bound: the term ends when its connection dies; the signal aborts', async () => {
  const name = leaseName('bound');
  const e = new hoplock.Elector(pool(6, { application_name: 'boundtest' }), { name, ttl: 9, sessionBound: true });
  const err = await e.lead(async (term) => {
    const t0 = performance.now();
    await admin.query(`SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'boundtest' AND query LIKE '%hoplock_wait%'`);
    await term.wait(5);
    const took = performance.now() - t0;
    console.log(`measure: node session-bound connection terminated -> term lost ${took.toFixed(1)} ms`);
    throw term.signal.reason;
  }).catch((x) => x);
  assert.ok(err instanceof hoplock.LeadershipLost, String(err));
});

test('health(): false when the leader has not renewed within the ttl (event loop blocked)', async () => {
  const name = leaseName('health');
  const e = new hoplock.Elector(pool(), { name, ttl: 0.6 });
  assert.equal(e.health().ok, true);
  const res = await e.lead(async (term) => {
    const ok = e.health();
    const end = performance.now() + 700;
    while (performance.now() < end) { /* the event loop blocked past the ttl */ }
    const bad = e.health();
    await term.wait(1);
    return { ok, bad, cause: term.cause };
  });
  assert.equal(res.ok.ok, true);
  assert.equal(res.bad.ok, false);
  assert.match(res.bad.reason, /not renewed within the ttl/);
  assert.ok(res.cause instanceof hoplock.LeaseExpired, String(res.cause));
});

test('renewals keep the term; minHold is accepted; options are checked', async () => {
  const name = leaseName('renew');
  const e = new hoplock.Elector(pool(), { name, ttl: 0.6, minHold: 0.3 });
  let renewed = 0;
  e.on('renewed', () => renewed++);
  await e.lead(async (term) => {
    await term.wait(1.5);
    assert.equal(term.lost, false);
  });
  assert.ok(renewed >= 3, `renewed ${renewed} times`);
  assert.throws(() => new hoplock.Elector(pool(), { name, ttl: 1, minHold: 2 }), RangeError);
  assert.throws(() => new hoplock.Elector(pool(), { name, ttl: 1, renew: 1 }), RangeError);
  assert.throws(() => new hoplock.Elector(pool(), { name: '' }), TypeError);
});

test('a permanent error (hoplock not in that schema) rejects lead', async () => {
  const e = new hoplock.Elector(pool(), { name: leaseName('perm'), schema: 'nonesuch' });
  await assert.rejects(e.lead(() => 1), hoplock.Permanent);
});

test('parsePayload reads generations and event numbers exactly', () => {
  const p = hoplock.parsePayload('{"event":"acquired","name":"x","generation":1765000000000000123,' +
    '"generation_text":"1765000000000000123","seq":9007199254740993,"seq_text":"9007199254740993","owner":"o"}');
  assert.equal(p.generation, 1765000000000000123n);
  assert.equal(p.seq, 9007199254740993n);
  assert.equal(hoplock.parsePayload('{"event":"acquired","name":"x","generation":1765000000000000123}').generation, null);
  assert.equal(hoplock.parsePayload('{"event":"acquired","name":"x","generation":42}').generation, 42n);
  assert.equal(hoplock.parsePayload('[1]'), null);
  assert.equal(hoplock.parsePayload('nope'), null);
});

test('real payloads carry exact numbers', async () => {
  const name = leaseName('payload');
  const c = new pg.Client(server.config);
  await c.connect();
  const got = [];
  c.on('notification', (n) => got.push(hoplock.parsePayload(n.payload)));
  await c.query('LISTEN hoplock');
  const e = new hoplock.Elector(pool(), { name, ttl: 6 });
  const g = await e.lead((t) => t.generation);
  await waitUntil(() => got.filter((p) => p && p.name === name).length >= 2);
  const mine = got.filter((p) => p && p.name === name);
  assert.equal(mine[0].event, 'acquired');
  assert.equal(mine[0].generation, g);
  assert.equal(typeof mine[0].seq, 'bigint');
  assert.ok(mine[1].seq > mine[0].seq);
  await c.end();
});

test('a step-down request ends the term at the next renewal and hands it to the named candidate', async () => {
  const name = leaseName('stepdown');
  const a = new hoplock.Elector(pool(), { name, owner: 'a', ttl: 0.9 });
  const b = new hoplock.Elector(pool(), { name, owner: 'b', ttl: 0.9 });
  const c = new hoplock.Elector(pool(), { name, owner: 'c', ttl: 0.9, priority: 5 });
  let later;
  const err = await a.lead(async (term) => {
    later = [b.lead((t) => t.lease.owner), c.lead((t) => t.lease.owner)];
    await waitUntil(async () => (await admin.query(`SELECT count(*)::int AS n FROM "${SCHEMA}".hoplock_candidates WHERE name = $1`, [name])).rows[0].n === 2);
    await admin.query(`SELECT "${SCHEMA}".hoplock_request_step_down($1, 'b')`, [name]);
    assert.equal(await term.wait(2), true);
    assert.ok(term.cause instanceof hoplock.StepDown, String(term.cause));
    return 'stepped down';
  });
  assert.equal(err, 'stepped down');
  assert.equal(await later[0], 'b'); // the one named, not the higher priority
  assert.equal(await later[1], 'c');
  const { rows } = await admin.query(`SELECT owner, how FROM "${SCHEMA}".hoplock_history WHERE name = $1 ORDER BY generation`, [name]);
  assert.deepEqual(rows.map((r) => [r.owner, r.how]).slice(0, 2), [['a', 'handed off'], ['b', 'released']]);
});

test('term.handoff(): to the first waiting candidate; NoCandidate when none waits', async () => {
  const name = leaseName('termhandoff');
  const a = new hoplock.Elector(pool(), { name, owner: 'a', ttl: 6 });
  const b = new hoplock.Elector(pool(), { name, owner: 'b', ttl: 6 });
  let bl;
  await a.lead(async (term) => {
    await assert.rejects(term.handoff(), hoplock.NoCandidate);
    bl = b.lead((t) => t.lease.owner);
    await waitUntil(async () => (await admin.query(`SELECT count(*)::int AS n FROM "${SCHEMA}".hoplock_candidates WHERE name = $1`, [name])).rows[0].n === 1);
    await term.handoff();
    assert.ok(term.signal.aborted);
    assert.ok(term.cause instanceof hoplock.HandedOff);
  });
  assert.equal(await bl, 'b');
});

test("lost connections are transient: the term holds, LISTEN comes back", async () => {
  const name = leaseName('transient');
  const p = pool(6, { application_name: 'transienttest' });
  const e = new hoplock.Elector(p, { name, ttl: 1.5 });
  let renewed = 0;
  e.on('renewed', () => renewed++);
  const res = await e.lead(async (term) => {
    for (let i = 0; i < 3; i++) {
      await admin.query("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'transienttest'");
      await term.wait(0.6);
    }
    const before = renewed;
    // LISTEN was re-established on a new connection
    await waitUntil(async () => (await admin.query("SELECT count(*)::int AS n FROM pg_stat_activity " +
      "WHERE application_name = 'transienttest' AND query LIKE 'LISTEN %'")).rows[0].n === 1, 3000);
    const t0 = performance.now();
    await admin.query(`SELECT "${SCHEMA}".hoplock_force_release($1)`, [name]);
    await term.wait(1.4);
    return { before, cause: term.cause, lost: performance.now() - t0 };
  });
  assert.ok(res.before >= 3, `renewed ${res.before} times`);
  assert.ok(res.cause instanceof hoplock.NoLease, String(res.cause));
  assert.ok(res.lost < 1000, `lost after ${res.lost} ms`);
});

test('isTransient: which errors are retried', () => {
  const err = (code) => Object.assign(new Error(code), { code });
  for (const c of ['08006', '40001', '53300', '57P01', '58030', '55P03', '25006']) assert.equal(hoplock.isTransient(err(c)), true, c);
  for (const c of ['53400', '42883', '22023', '42501', '22004']) assert.equal(hoplock.isTransient(err(c)), false, c);
  assert.equal(hoplock.isTransient(new Error('Connection terminated unexpectedly')), true);
  assert.equal(hoplock.isTransient(Object.assign(new Error('x'), { code: 'ECONNREFUSED' })), true);
  assert.equal(hoplock.isTransient(new TypeError('a bug')), false);
});
