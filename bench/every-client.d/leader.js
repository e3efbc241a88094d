'use strict';
// bench/every-client's Node leader: leads NAME with the Node client's
// Elector, its settings the defaults but the ttl and the binding, and
// while it leads inserts a row fenced with its generation into TABLE every
// 20 ms (term.fenced(): hoplock_fence, and the table's hoplock_fenced
// trigger).  SIGTERM stops it (handing the term over).
//
//   node leader.js NAME TABLE TTL SESSION_BOUND(0|1)   (connection: PG* variables)
const path = require('node:path');
const pg = require(path.join(__dirname, '../../clients/node/node_modules/pg'));
const hoplock = require(path.join(__dirname, '../../clients/node'));

const [name, table, ttl, bound] = process.argv.slice(2);
const owner = `js-${process.pid}`;
const insert = `INSERT INTO "${table}" (owner, generation) VALUES ($1, $2::bigint)`;
const pool = new pg.Pool({ max: 6 });
pool.on('error', () => {});
const e = new hoplock.Elector(pool, { name, owner, ttl: Number(ttl), sessionBound: bound === '1' });
process.on('SIGTERM', () => e.stop());

async function fn(term) {
  while (!term.lost) {
    try {
      await term.fenced((c) => c.query(insert, [owner, term.generation.toString()]));
    } catch (err) {
      if (err instanceof hoplock.FenceRefused || err instanceof hoplock.LeadershipLost) return;
      console.log('error:', String(err));
    }
    await term.wait(0.02);
  }
}

(async () => {
  while (!e.stopped) {
    try {
      await e.lead(fn);
    } catch (err) {
      if (err instanceof hoplock.Stopped) break;
      if (!(err instanceof hoplock.LeadershipLost)) console.log('error:', String(err));
    }
  }
  await pool.end();
})();
