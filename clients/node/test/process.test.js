'use strict';
// Leaders in processes of their own, killed (SIGKILL), stopped (SIGSTOP)
// and terminated (SIGTERM), a second process taking over; then a history
// checker over the rows they wrote through hoplock_fenced.  Reports the
// takeover: from the signal to the next leader's first committed fenced
// row.
const test = require('node:test');
const assert = require('node:assert/strict');
const pg = require('pg');
const { Server, SCHEMA, leaseName, waitUntil } = require('./server');
const { Child: Proc } = require('./children');

const ROUNDS = Number(process.env.HOPLOCK_TEST_ROUNDS || '5');
const server = new Server();
let admin;
const wall = () => Date.now() / 1000;

test.before(async () => {
  await server.start();
  admin = new pg.Client(server.config);
  await admin.connect();
});
test.after(async () => {
  if (admin) await admin.end();
  server.stop();
});

class Child extends Proc {
  constructor(name, table, ttl, bound, follow = 'listen') {
    super(server.env(), [name, table, String(ttl), bound ? '1' : '0', follow]);
  }
}

/** The child that prints LEAD next (the others' lines are kept). */
async function leaderOf(children, timeoutMs = 10000) {
  const end = Date.now() + timeoutMs;
  while (Date.now() < end) {
    for (const ch of children) {
      const line = ch.queue.length ? ch.queue.shift() : null;
      if (!line) continue;
      ch.log.push(line);
      if (line[0] === 'LEAD') return [ch, line];
    }
    await new Promise((r) => setTimeout(r, 2));
  }
  throw new Error(`nobody leads: ${JSON.stringify(children.map((c) => c.log))}`);
}

async function makeTable(name, table) {
  await admin.query(`CREATE TABLE "${table}" (id bigserial PRIMARY KEY, owner text NOT NULL, generation bigint NOT NULL)`);
  await admin.query(`CREATE TRIGGER "${table}_fenced" BEFORE INSERT OR UPDATE OR DELETE ON "${table}" ` +
    `FOR EACH ROW EXECUTE FUNCTION "${SCHEMA}".hoplock_fenced('${name}', 'generation')`);
}

async function waitCandidate(name, n) {
  await waitUntil(async () => (await admin.query(
    `SELECT count(*)::int AS n FROM "${SCHEMA}".hoplock_candidates WHERE name = $1`, [name])).rows[0].n >= n);
}

/** No two terms overlap; generations rise with time; every row lies in
 *  its own term (committed after it began, before the next began, and,
 *  unless it lapsed, before it ended); row generations never go back in
 *  id order; no write with a lost generation committed. */
async function checkHistory(name, table, children) {
  const terms = (await admin.query(
    `SELECT generation::text AS g, owner, acquired_at, ended_at, how FROM "${SCHEMA}".hoplock_history ` +
    'WHERE name = $1 ORDER BY acquired_at', [name])).rows.map((t) => ({ ...t, g: BigInt(t.g) }));
  assert.ok(terms.length > 0, 'no terms');
  for (let i = 1; i < terms.length; i++) {
    const a = terms[i - 1];
    const b = terms[i];
    assert.ok(b.g > a.g, `generations do not rise: ${a.g} then ${b.g}`);
    assert.ok(a.ended_at !== null && a.ended_at <= b.acquired_at, `terms overlap: ${a.g} and ${b.g}`);
  }
  const byGen = new Map(terms.map((t, i) => [t.g, i]));
  // commit timestamps as text: node-postgres's Date drops the microseconds
  const rows = (await admin.query(
    `SELECT id::text AS rid, owner, generation::text AS g, ` +
    `extract(epoch FROM pg_xact_commit_timestamp(xmin))::text AS c FROM "${table}" ORDER BY id`)).rows;
  assert.ok(rows.length > 0, 'no rows');
  const tt = (await admin.query(
    `SELECT generation::text AS g, extract(epoch FROM acquired_at)::text AS a, extract(epoch FROM ended_at)::text AS e ` +
    `FROM "${SCHEMA}".hoplock_history WHERE name = $1`, [name])).rows;
  const exact = new Map(tt.map((t) => [BigInt(t.g), { a: Number(t.a), e: t.e === null ? null : Number(t.e) }]));
  let last = 0n;
  for (const r of rows) {
    const g = BigInt(r.g);
    const c = Number(r.c);
    assert.ok(g >= last, `row ${r.rid} goes back to generation ${g} after ${last}`);
    last = g;
    assert.ok(byGen.has(g), `row ${r.rid}: generation ${g} is no term of ${name}`);
    const i = byGen.get(g);
    const t = terms[i];
    assert.equal(r.owner, t.owner, `row ${r.rid} written by ${r.owner} in ${t.owner}'s term`);
    assert.ok(c >= exact.get(g).a, `row ${r.rid} committed before its term began`);
    if (i + 1 < terms.length) assert.ok(c <= exact.get(terms[i + 1].g).a, `row ${r.rid} committed after the next term began`);
    if (t.ended_at !== null && t.how !== 'expired') assert.ok(c <= exact.get(g).e, `row ${r.rid} committed after its term ended (${t.how})`);
  }
  for (const ch of children) {
    ch.drain();
    assert.ok(!ch.log.some((l) => l[0] === 'STALE-COMMITTED'), JSON.stringify(ch.log));
  }
  return rows.length;
}

const median = (xs) => (xs.length % 2 ? xs[(xs.length - 1) / 2] : (xs[xs.length / 2 - 1] + xs[xs.length / 2]) / 2);

async function runRounds(label, sig, ttl, bound, rounds, follow = 'listen') {
  const name = leaseName(label.replace(/\W+/g, '-'));
  const table = `hist_${process.pid}_${name.replace(/\W+/g, '_')}`;
  await makeTable(name, table);
  let children = [new Child(name, table, ttl, bound, follow), new Child(name, table, ttl, bound, follow)];
  const takeovers = [];
  let n = 0;
  try {
    let [leader] = await leaderOf(children);
    await leader.expect('ROW');
    for (let i = 0; i < rounds; i++) {
      const others = children.filter((c) => c !== leader);
      await waitCandidate(name, others.length);
      const t0 = wall();
      leader.p.kill(sig);
      const [next] = await leaderOf(others, ttl * 1000 + 10000);
      const row = await next.expect('ROW', 5000);
      takeovers.push(Number(row[2]) - t0);
      if (sig === 'SIGTERM') {
        await leader.expect('EXIT');
        assert.equal((await leader.exited).code, 0);
      } else {
        await leader.exited;
      }
      children = children.filter((c) => c !== leader);
      children.push(new Child(name, table, ttl, bound, follow));
      leader = next;
    }
    n = await checkHistory(name, table, children);
    if (sig === 'SIGTERM') {
      const how = (await admin.query(`SELECT how FROM "${SCHEMA}".hoplock_history WHERE name = $1 ORDER BY generation`, [name])).rows.map((r) => r.how);
      assert.deepEqual(how.slice(0, rounds), Array(rounds).fill('handed off'));
    }
  } finally {
    await Promise.all(children.map((c) => c.kill()));
  }
  takeovers.sort((a, b) => a - b);
  console.log(`measure: node ${label} (ttl ${ttl} s, ${rounds} rounds, ${n} rows): signal -> next leader's first fenced row ` +
    `p50 ${(median(takeovers) * 1000).toFixed(1)} ms, max ${(takeovers[takeovers.length - 1] * 1000).toFixed(1)} ms`);
  return takeovers;
}

test('SIGTERM: the leader process hands its term to the waiting one', async () => {
  const t = await runRounds('SIGTERM (handoff)', 'SIGTERM', 10, false, ROUNDS);
  assert.ok(t[t.length - 1] < 2.0);
});

test('SIGKILL of a session-bound leader process: the other takes over at once', async () => {
  const t = await runRounds('SIGKILL session-bound', 'SIGKILL', 10, true, ROUNDS);
  assert.ok(t[t.length - 1] < 3.0);
});

test('the same with hoplock_watch (follow watch): SIGTERM hands over, SIGKILL of a session-bound leader', async () => {
  const rounds = Math.max(Math.floor(ROUNDS / 2), 1);
  let t = await runRounds('watch SIGTERM (handoff)', 'SIGTERM', 10, false, rounds, 'watch');
  assert.ok(t[t.length - 1] < 2.0);
  t = await runRounds('watch SIGKILL session-bound', 'SIGKILL', 10, true, rounds, 'watch');
  assert.ok(t[t.length - 1] < 3.0);
});

test('SIGKILL of a ttl-bound leader process: the other takes over a ttl later', async () => {
  const t = await runRounds('SIGKILL ttl-bound', 'SIGKILL', 1, false, 2);
  assert.ok(t[0] > 0.3, 'nobody leads before the term lapses');
});

test('SIGSTOP past the ttl: the other takes over; resumed, the old leader stops and its stale write is refused', async () => {
  const name = leaseName('sigstop');
  const table = `hist_stop_${process.pid}`;
  await makeTable(name, table);
  const ttl = 1;
  const children = [new Child(name, table, ttl, false), new Child(name, table, ttl, false)];
  try {
    const [leader] = await leaderOf(children);
    await leader.expect('ROW');
    const other = children.find((c) => c !== leader);
    await waitCandidate(name, 1);
    const t0 = wall();
    leader.p.kill('SIGSTOP');
    await leaderOf([other], 10000);
    const row = await other.expect('ROW');
    await new Promise((r) => setTimeout(r, Math.max(0, (t0 + 2 - wall()) * 1000)));
    const t1 = wall();
    leader.p.kill('SIGCONT');
    const end = await leader.expect('END', 5000);
    const resumed = wall() - t1;
    assert.ok(['LeaseExpired', 'NoLease', 'LeaseHeld'].includes(end[2]), JSON.stringify(leader.log));
    assert.ok(leader.log.some((l) => l[0] === 'STALE-REFUSED'), JSON.stringify(leader.log));
    await checkHistory(name, table, children);
    console.log(`measure: node SIGSTOP (ttl ${ttl} s): stop -> next leader's first fenced row ${((Number(row[2]) - t0) * 1000).toFixed(0)} ms; ` +
      `resumed -> old leader's term over ${(resumed * 1000).toFixed(1)} ms, its stale write refused`);
  } finally {
    await Promise.all(children.map((c) => c.kill()));
  }
});
