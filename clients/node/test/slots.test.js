'use strict';
// Electors with slots (slots: N): at most N lead at once, each in a term
// and slot of its own; a killed leader's slot goes to a waiting one; an
// event of another slot never ends a term; every Elector must agree on N.
//
// The first term of a name with slots is begun before the others
// campaign: two waits that both begin a fresh name's slots at once may
// both wait out their timeout (the server's race, not the client's).
const test = require('node:test');
const assert = require('node:assert/strict');
const pg = require('pg');
const hoplock = require('..');
const { Server, SCHEMA, leaseName, waitUntil } = require('./server');
const { Child } = require('./children');

const server = new Server();
let admin;
const pools = [];
function pool(max = 6) {
  const p = new pg.Pool({ ...server.config, max });
  p.on('error', () => {});
  pools.push(p);
  return p;
}
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

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

async function slotOf(name, generation) {
  const { rows } = await admin.query(
    `SELECT slot FROM "${SCHEMA}".hoplock_leases WHERE name = $1 AND generation = $2::bigint`, [name, String(generation)]);
  return rows.length ? rows[0].slot : null;
}

async function waitCandidate(name, n) {
  await waitUntil(async () => (await admin.query(
    `SELECT count(*)::int AS n FROM "${SCHEMA}".hoplock_candidates WHERE name = $1`, [name])).rows[0].n >= n);
}

/** A payload on hoplock's channel as any role could send it. */
async function notify(payload) {
  await admin.query("SELECT pg_notify('hoplock', $1)", [JSON.stringify(payload)]);
}

/** The next LEAD line of any of children not seen before. */
async function nextLead(children, timeoutMs) {
  const end = Date.now() + timeoutMs;
  while (Date.now() < end) {
    for (const ch of children) {
      ch.drain();
      ch.leads = ch.leads || 0;
      const leads = ch.log.filter((l) => l[0] === 'LEAD');
      if (leads.length > ch.leads) return [ch, leads[ch.leads++]];
    }
    await sleep(5);
  }
  throw new Error(`nobody new leads: ${JSON.stringify(children.map((c) => c.log))}`);
}

/** At no instant more than slots terms; the terms of a slot never
 *  overlap; every fenced row lies in its own term, by its owner; no write
 *  with a lost generation committed. */
async function checkSlotHistory(name, table, slots, children) {
  const terms = (await admin.query(
    'SELECT generation::text AS g, owner, slot, extract(epoch FROM acquired_at)::float8 AS a, ' +
    `extract(epoch FROM coalesce(ended_at, clock_timestamp()))::float8 AS e FROM "${SCHEMA}".hoplock_history ` +
    'WHERE name = $1', [name])).rows;
  assert.ok(terms.length >= slots + 1, JSON.stringify(terms));
  for (const t of terms) {
    assert.ok(t.slot >= 1 && t.slot <= slots, JSON.stringify(t));
    const atOnce = terms.filter((u) => u.a <= t.a && t.a < u.e);
    assert.ok(atOnce.length <= slots, `more than ${slots} terms at ${t.a}: ${JSON.stringify(atOnce)}`);
    for (const u of terms)
      if (u !== t && u.slot === t.slot && t.a <= u.a) assert.ok(t.e <= u.a, `terms of slot ${t.slot} overlap: ${t.g}, ${u.g}`);
  }
  const byGen = new Map(terms.map((t) => [t.g, t]));
  const rows = (await admin.query(
    `SELECT owner, generation::text AS g, extract(epoch FROM pg_xact_commit_timestamp(xmin))::float8 AS c FROM "${table}"`)).rows;
  assert.ok(rows.length > 0, 'no rows');
  for (const r of rows) {
    const t = byGen.get(r.g);
    assert.ok(t && t.owner === r.owner && t.a <= r.c, `row ${JSON.stringify(r)} outside its term ${JSON.stringify(t)}`);
  }
  for (const ch of children) {
    ch.drain();
    assert.ok(!ch.log.some((l) => l[0] === 'STALE-COMMITTED'), JSON.stringify(ch.log));
  }
}

test('three leader processes with slots 2: two lead, each its slot; SIGKILL one, the third takes its slot', async () => {
  const name = leaseName('slots-proc');
  const table = `slots_${process.pid}`;
  await admin.query(`CREATE TABLE "${table}" (id bigserial PRIMARY KEY, owner text NOT NULL, generation bigint NOT NULL)`);
  await admin.query(`CREATE TRIGGER "${table}_fenced" BEFORE INSERT OR UPDATE OR DELETE ON "${table}" ` +
    `FOR EACH ROW EXECUTE FUNCTION "${SCHEMA}".hoplock_fenced('${name}', 'generation')`);
  const ttl = 2;
  const child = () => new Child(server.env(), [name, table, String(ttl), '0', 'listen', '2']);
  const children = [child()];
  try {
    const first = await nextLead(children, 15000);
    children.push(child(), child());
    const leads = new Map([first, await nextLead(children, 15000)]);
    assert.equal(leads.size, 2);
    for (const line of leads.values()) assert.equal(Number(line[3]), await slotOf(name, line[1]), JSON.stringify(line));
    assert.deepEqual([...leads.values()].map((l) => Number(l[3])).sort(), [1, 2]);
    await waitCandidate(name, 1);
    await sleep(300);
    const { rows } = await admin.query(`SELECT count(*)::int AS n FROM "${SCHEMA}".hoplock_leases WHERE name = $1 AND NOT expired`, [name]);
    assert.equal(rows[0].n, 2);
    for (let round = 0; round < 2; round++) {
      const waiting = children.find((c) => !leads.has(c));
      const [victim, survivor] = [...leads.keys()];
      const t0 = Date.now();
      victim.p.kill('SIGKILL');
      await victim.exited;
      const [next, line] = await nextLead([waiting], ttl * 1000 + 10000);
      const took = Date.now() - t0;
      assert.equal(line[3], leads.get(victim)[3], `took another slot: ${line}`);
      assert.equal(Number(line[3]), await slotOf(name, line[1]));
      assert.ok(took > (ttl * 1000) / 2, `led before the killed leader's term lapsed (${took} ms)`);
      await sleep(500); // the survivor hears the other slot's events
      survivor.drain();
      assert.ok(!survivor.log.some((l) => l[0] === 'END'), JSON.stringify(survivor.log));
      assert.equal(await slotOf(name, leads.get(survivor)[1]), Number(leads.get(survivor)[3]));
      console.log(`measure: node slots=2 SIGKILL (ttl ${ttl} s) -> third leads in slot ${line[3]}: ${took} ms`);
      leads.delete(victim);
      leads.set(next, line);
      children.splice(children.indexOf(victim), 1);
      children.push(child());
      await waitCandidate(name, 1);
    }
    await checkSlotHistory(name, table, 2, children);
  } finally {
    await Promise.all(children.map((c) => c.kill()));
  }
});

/** Leads with e until release() is called or the term is lost; resolves
 *  the term at once (.term), the end of lead() later (.done). */
function leadUntil(e) {
  let release;
  const released = new Promise((r) => { release = r; });
  let got;
  const term = new Promise((r) => { got = r; });
  const done = e.lead(async (t) => {
    got(t);
    await Promise.race([released, t.wait()]);
  }).catch((err) => err);
  return { term, done, release };
}

for (const follow of ['listen', 'watch']) {
  test(`an event of another slot never ends a term; its own slot's does, at once (${follow})`, async () => {
    const name = leaseName(`slots-other-${follow}`);
    const es = Object.fromEntries(['a', 'b', 'c'].map((o) => [o, new hoplock.Elector(pool(), { name, owner: o, ttl: 30, slots: 2, follow })]));
    const runs = { a: leadUntil(es.a) };
    const ta = await runs.a.term;
    runs.b = leadUntil(es.b);
    const tb = await runs.b.term;
    const bySlot = { [ta.slot]: 'a', [tb.slot]: 'b' };
    assert.deepEqual(Object.keys(bySlot).sort(), ['1', '2']);
    const low = bySlot[1];
    const high = bySlot[2];
    const hterm = high === 'a' ? ta : tb;
    assert.equal(es[high].health().slot, 2);
    assert.equal(es[low].health().slot, 1);
    runs[low].release();
    await runs[low].done;
    runs.c = leadUntil(es.c);
    const tc = await runs.c.term;
    assert.equal(tc.slot, 1); // hoplock_holder now reads c's term
    await notify({ event: 'released', name, owner: 'x' });
    await notify({ event: 'expired', name, owner: 'x', slot: 2 });
    await sleep(1000);
    assert.equal(hterm.lost, false, String(hterm.cause));
    assert.equal(tc.lost, false);
    const t0 = Date.now();
    await admin.query(`SELECT "${SCHEMA}".hoplock_release($1, $2, $3::bigint)`, [name, high, hterm.generation.toString()]);
    assert.equal(await hterm.wait(5), true);
    assert.ok(hterm.cause instanceof hoplock.NoLease, String(hterm.cause));
    assert.ok(Date.now() - t0 < 2000, 'heard from its own slot\'s event, not at a renewal 10 s away');
    for (const r of Object.values(runs)) r.release();
    await Promise.all(Object.values(runs).map((r) => r.done));
  });
}

test('another number of slots than the lease has: Permanent, naming both', async () => {
  const name = leaseName('slots-mismatch');
  const run = leadUntil(new hoplock.Elector(pool(), { name, owner: 'a', ttl: 30, slots: 2 }));
  const term = await run.term;
  for (const [n, want] of [[undefined, /has 2 slots, not 1/], [1, /has 2 slots, not 1/], [3, /has 2 slots, not 3/]]) {
    const e = new hoplock.Elector(pool(), { name, owner: 'b', ttl: 30, slots: n });
    const timer = setTimeout(() => e.stop(), 5000); // Stopped, not a hang, if no error comes
    await assert.rejects(e.lead(() => 1), (err) => err instanceof hoplock.Permanent && want.test(err.message));
    clearTimeout(timer);
  }
  assert.equal(term.lost, false);
  run.release();
  await run.done;
});

test('slots must be an integer from 1 to 1000', () => {
  for (const bad of [0, -1, 1001, 1.5, '2', true, NaN, Infinity]) {
    assert.throws(() => new hoplock.Elector(pool(), { name: 'n', slots: bad }),
      (err) => err instanceof RangeError && /slots must be an integer from 1 to 1000/.test(err.message), String(bad));
  }
  for (const good of [1, 2, 1000]) new hoplock.Elector(pool(), { name: 'n', slots: good });
});

test("run() with slots: 'acquired', 'renewed' and 'lost' carry the term's slot; health() reports it", async () => {
  const name = leaseName('slots-run');
  const es = ['a', 'b'].map((owner) => new hoplock.Elector(pool(), { name, owner, ttl: 1.5, slots: 2 }));
  const evs = [[], []];
  const health = [null, null];
  es.forEach((e, i) => {
    for (const kind of ['acquired', 'renewed', 'lost']) {
      e.on(kind, (lease) => {
        evs[i].push([kind, lease && lease.slot]);
        if (kind === 'renewed') health[i] = e.health().slot;
      });
    }
  });
  const runs = [es[0].run()];
  await waitUntil(() => evs[0].length > 0);
  runs.push(es[1].run());
  await waitUntil(() => evs.every((ev) => ev.some((x) => x[0] === 'renewed')), 5000);
  for (const e of es) e.stop();
  await Promise.all(runs);
  const slots = evs.map((ev, i) => {
    assert.equal(ev[0][0], 'acquired');
    assert.equal(ev[ev.length - 1][0], 'lost');
    const slot = ev[0][1];
    assert.ok(slot === 1 || slot === 2, JSON.stringify(ev));
    assert.ok(ev.every((x) => x[1] === slot), JSON.stringify(ev));
    assert.equal(health[i], slot);
    assert.equal(es[i].health().slot, null); // no longer leads
    return slot;
  });
  assert.deepEqual(slots.sort(), [1, 2]);
});
