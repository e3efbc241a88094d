#!/usr/bin/env node
// leader.js: run a job's work only while this process leads it (node-postgres).
//
//   node leader.js [lease-name]     connection from the usual PG* variables
//   LEADER_TTL=15                   ttl in seconds (fractions allowed)
//   LEADER_SCHEMA=hoplock           schema hoplock is installed in
//   LEADER_SESSION_BOUND=1          bind the term to this connection
//   LEADER_WORK_SCHEMA=public       schema of the table work_log: one that
//                                   no untrusted role can create in or owns
//
// The README's recipe: LISTEN first, then wait for the lease in the server;
// while leading, fence each unit of work, renew at a third of the ttl, and
// stop working the moment the local deadline -- the send time of the last
// successful renewal plus the ttl, on the monotonic clock -- passes, or a
// renewal says the term is gone.  A transient error is not loss: it
// retries until the deadline.  Release on SIGTERM/SIGINT.
//
// node-postgres returns bigint as a string (generations are above 2^53:
// keep it a string, or BigInt) and drops the microseconds of timestamps
// (select them as text, or as epoch numbers, if they matter).  The work
// here appends to work_log, created if missing.
'use strict';

const os = require('os');
const { Client } = require('pg');

const lease = process.argv[2] || 'billing-scheduler';
const owner = `${os.hostname()}:${process.pid}`;
const ttl = Number(process.env.LEADER_TTL || '15');
const schema = process.env.LEADER_SCHEMA || 'hoplock';
const workLog = `"${(process.env.LEADER_WORK_SCHEMA || 'public').replace(/"/g, '""')}".work_log`;
const sessionBound = !['', '0', undefined].includes(process.env.LEADER_SESSION_BOUND);
if (!(ttl > 0)) {
  console.error('leader.js: LEADER_TTL must be a positive number of seconds');
  process.exit(2);
}
const ttlSql = `${ttl} seconds`;
// a function of hoplock's, schema-qualified (never via search_path); every
// call casts each argument to the parameter's exact type: node-postgres
// sends untyped parameters, which an overload planted beside it (say
// hoplock_wait(text, text, text, text, boolean)) would match better
const q = (name) => `"${schema.replace(/"/g, '""')}".${name}`;

// errors that say nothing about the lease: retry until the deadline
const TRANSIENT = new Set(['55P03', '40001', '57P01', '08006', '08003', '08000']);
const transient = (e) => TRANSIENT.has(e.code) || !e.code;

const now = () => Number(process.hrtime.bigint()) / 1e9; // monotonic seconds
const sleep = (s) => new Promise((r) => setTimeout(r, s * 1000));

let stopping = false;
let conn;
let generation = null; // a string: bigint as node-postgres returns it
let endedByEvent = false;

async function connect() {
  for (;;) {
    const c = new Client();
    c.on('error', () => {}); // a dropped connection shows in the next query
    try {
      await c.connect();
      return c;
    } catch (e) {
      await sleep(Math.min(ttl / 10, 1));
    }
  }
}

async function reconnect() {
  try { await conn.end(); } catch (e) { /* gone already */ }
  conn = await connect();
}

async function holderGeneration() {
  const r = await conn.query(`SELECT generation FROM ${q('hoplock_holder')}($1::text)`, [lease]);
  return r.rows[0].generation;
}

// The event a payload claims -- { event, name, generation } -- or null if it
// is not one of hoplock's shape.  JSON.parse rounds a number above 2^53,
// and generations are about 1.7e18: the exact generation is the string
// "generation_text"; without it generation is null, and the server's
// answer decides.
function parseEvent(payload) {
  let ev;
  try { ev = JSON.parse(payload); } catch (e) { return null; }
  if (ev === null || typeof ev !== 'object' || Array.isArray(ev)) return null;
  if (typeof ev.event !== 'string' || typeof ev.name !== 'string') return null;
  let gen = null;
  if (ev.generation_text !== undefined) {
    if (typeof ev.generation_text !== 'string' || !/^-?[0-9]{1,19}$/.test(ev.generation_text)) return null;
    gen = ev.generation_text;
  } else if (!Number.isFinite(ev.generation)) {
    return null;
  }
  return { event: ev.event, name: ev.name, generation: gen };
}

// Does the server say our term has ended?  If it cannot answer, lead on:
// the next renewal, or the deadline, decides.
async function termGone() {
  try {
    return (await holderGeneration()) !== generation;
  } catch (e) {
    console.log(`could not confirm with hoplock_holder (${e.code || e.message}): leading on`);
    return false;
  }
}

async function work() {
  await conn.query('BEGIN');
  try {
    await conn.query(`SELECT ${q('hoplock_fence')}($1::text, $2::bigint)`, [lease, generation]);
    await conn.query(`INSERT INTO ${workLog} (lease, owner, generation) VALUES ($1, $2, $3)`,
      [lease, owner, generation]);
    await conn.query('COMMIT');
  } catch (e) {
    await conn.query('ROLLBACK').catch(() => {});
    throw e;
  }
}

async function lead(sentAt) {
  let deadline = sentAt + ttl;
  let nextRenew = sentAt + ttl / 3;
  endedByEvent = false;
  while (!stopping && now() < deadline) {
    if (endedByEvent) {
      endedByEvent = false;
      if (await termGone()) {
        console.log('lost: the term ended');
        return;
      }
    }
    try {
      await work();
    } catch (e) {
      if (e.code === '55P03') {
        // fenced out, or the table busy for a moment: ask
        if (await termGone()) {
          console.log('lost: fenced out');
          return;
        }
      } else if (transient(e)) {
        await reconnect();
      } else {
        throw e;
      }
    }
    if (now() >= nextRenew) {
      const t0 = now();
      let r;
      try {
        r = await conn.query(`SELECT generation FROM ${q('hoplock_renew')}($1::text, $2::text, $3::interval, $4::bigint)`,
          [lease, owner, ttlSql, generation]);
      } catch (e) {
        if (!transient(e)) throw e;
        await reconnect();
        nextRenew = Math.min(deadline, now() + ttl / 10);
        continue;
      }
      if (r.rows[0].generation === null) {
        console.log('lost: the renewal found the term gone');
        return;
      }
      deadline = t0 + ttl;
      nextRenew = t0 + ttl / 3;
    }
    await sleep(Math.min(ttl / 10, 0.5));
  }
  if (!stopping) console.log('lost: no renewal before the deadline');
}

async function main() {
  const listener = await connect();
  await listener.query('LISTEN hoplock');
  listener.on('notification', (n) => {
    // Any role may NOTIFY anything on the channel: a payload is untrusted
    // input, and what it claims a hint that lead() confirms with the server.
    const ev = parseEvent(n.payload);
    if (ev === null) {
      console.log(`ignored a notification that is not an event: ${JSON.stringify(String(n.payload).slice(0, 80))}`);
      return;
    }
    if (ev.name === lease && generation !== null &&
        (ev.event === 'released' || ev.event === 'expired') &&
        (ev.generation === null || ev.generation === generation)) {
      endedByEvent = true;
    }
  });
  conn = await connect();
  await conn.query('SET client_min_messages = warning');
  const create = `CREATE TABLE IF NOT EXISTS ${workLog} (
      id bigserial PRIMARY KEY, lease text NOT NULL, owner text NOT NULL,
      generation bigint NOT NULL, at timestamptz NOT NULL DEFAULT pg_catalog.clock_timestamp())`;
  try {
    await conn.query(create);
  } catch (e) {
    // instances started at once race in CREATE TABLE IF NOT EXISTS: the
    // loser fails ("already exists", or on a catalog's unique index), and
    // its second try finds the table; any other error comes again
    await conn.query(create);
  }

  const stop = () => { stopping = true; };
  process.on('SIGTERM', stop);
  process.on('SIGINT', stop);

  while (!stopping) {
    const sentAt = now();
    let r;
    try {
      r = await conn.query(`SELECT generation FROM ${q('hoplock_wait')}($1::text, $2::text, $3::interval, $4::interval, $5::boolean)`,
        [lease, owner, ttlSql, ttlSql, sessionBound]);
    } catch (e) {
      if (e.code === '57014' && stopping) break;
      if (!transient(e)) throw e;
      await reconnect();
      continue;
    }
    generation = r.rows[0].generation;
    if (generation === null) continue;
    console.log(`leading, generation ${generation}`);
    await lead(sentAt);
    if (stopping) break;
    generation = null;
  }
  if (generation !== null) {
    await conn.query(`SELECT ${q('hoplock_release')}($1::text, $2::text, $3::bigint)`, [lease, owner, generation])
      .catch(() => {});
  }
  await conn.end().catch(() => {});
  await listener.end().catch(() => {});
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
