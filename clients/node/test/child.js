'use strict';
// A leader process for the process tests: leads NAME with an Elector
// and, while it leads, appends rows to TABLE (fenced by hoplock_fenced and
// by term.fenced) every 20 ms.  Prints, with the wall clock (seconds):
// LEAD g t / ROW g t (its first committed row) / END g cause /
// STALE-REFUSED g or STALE-COMMITTED g (a write with the lost generation,
// without the fence: the trigger must refuse it) / EXIT.  SIGTERM stops
// it gracefully (handing the term to a waiting candidate).
//
//   node child.js NAME TABLE TTL SESSION_BOUND(0|1) FOLLOW(listen|watch) [SLOTS]
//   (connection from the PG* variables; with SLOTS, the Elector has
//   slots: SLOTS, and LEAD also prints the term's slot)
const { performance } = require('node:perf_hooks');
const pg = require('pg');
const hoplock = require('..');

const [name, table, ttl, bound, follow, slots] = process.argv.slice(2);
const owner = `child-${process.pid}`;
const insert = `INSERT INTO "${table}" (owner, generation) VALUES ($1, $2::bigint)`;
const wall = () => ((performance.timeOrigin + performance.now()) / 1000).toFixed(6);
const out = (...a) => process.stdout.write(a.join(' ') + '\n');

const pool = new pg.Pool({ max: 6 });
pool.on('error', () => {});
const e = new hoplock.Elector(pool, {
  name, owner, ttl: Number(ttl), sessionBound: bound === '1', follow, poll: 30, handoffLinger: 0,
  slots: slots ? Number(slots) : 1,
});
process.on('SIGTERM', () => e.stop());

async function staleWrite(g) {
  const c = new pg.Client();
  try {
    await c.connect();
    await c.query(insert, [owner, g.toString()]);
    out('STALE-COMMITTED', g);
  } catch (err) {
    out(err.code === '55P03' ? 'STALE-REFUSED' : 'STALE-ERROR', g, err.code || err.message);
  } finally {
    await c.end().catch(() => {});
  }
}

async function fn(term) {
  const g = term.generation;
  out('LEAD', g, wall(), term.slot);
  let first = true;
  while (!term.lost) {
    try {
      await term.fenced((c) => c.query(insert, [owner, g.toString()]));
      if (first) {
        out('ROW', g, wall());
        first = false;
      }
    } catch (err) {
      if (err instanceof hoplock.FenceRefused || err instanceof hoplock.LeadershipLost) break;
      out('ERR', g, JSON.stringify(String(err)));
    }
    await term.wait(0.02);
  }
  if (!e.stopped && term.cause && !(term.cause instanceof hoplock.HandedOff)) await staleWrite(g);
  out('END', g, term.cause ? term.cause.name : 'stopped');
}

(async () => {
  out('START', process.pid);
  while (!e.stopped) {
    try {
      await e.lead(fn);
    } catch (err) {
      if (err instanceof hoplock.Stopped) break;
      if (!(err instanceof hoplock.LeadershipLost)) out('ERR', 0, JSON.stringify(String(err)));
    }
  }
  await pool.end();
  out('EXIT');
})();
