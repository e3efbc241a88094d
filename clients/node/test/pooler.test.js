'use strict';
// Behind PgBouncer in transaction pooling mode: follow 'watch'
// (hoplock_watch) hears a lost term as LISTEN does directly, and the
// Elector's statements are never prepared on the server, so any server
// connection can run each.  Skipped without pgbouncer.
const test = require('node:test');
const assert = require('node:assert/strict');
const { execFileSync } = require('node:child_process');
const fs = require('node:fs');
const path = require('node:path');
const { performance } = require('node:perf_hooks');
const pg = require('pg');
const hoplock = require('..');
const { Server, SCHEMA, leaseName, waitUntil } = require('./server');

const exe = ['/usr/sbin/pgbouncer', '/usr/bin/pgbouncer'].find((p) => fs.existsSync(p));
const server = new Server();
let admin;
let dir;
const root = process.getuid && process.getuid() === 0;

test.before(async () => {
  if (!exe || process.env.HOPLOCK_TEST_DSN) return;
  await server.start();
  admin = new pg.Client(server.config);
  await admin.connect();
  dir = path.join(server.dir, 'pgbouncer');
  fs.mkdirSync(dir);
  const ini = path.join(dir, 'pgbouncer.ini');
  fs.writeFileSync(ini, `[databases]\npostgres = host=/tmp port=${server.port} dbname=postgres user=postgres\n` +
    `[pgbouncer]\nlisten_addr =\nlisten_port = ${server.port}\nunix_socket_dir = ${dir}\nauth_type = any\n` +
    'pool_mode = transaction\nmax_client_conn = 200\ndefault_pool_size = 3\n' +
    'server_reset_query = DISCARD ALL\nserver_reset_query_always = 1\n' +
    `logfile = ${dir}/pgbouncer.log\npidfile = ${dir}/pgbouncer.pid\n`);
  if (root) execFileSync('chown', ['-R', 'postgres', dir]);
  execFileSync(...(root ? ['runuser', ['-u', 'postgres', '--', exe, '-d', ini]] : [exe, ['-d', ini]]));
  await waitUntil(() => fs.existsSync(path.join(dir, `.s.PGSQL.${server.port}`)));
});
test.after(async () => {
  if (admin) await admin.end();
  if (dir) {
    try { process.kill(Number(fs.readFileSync(path.join(dir, 'pgbouncer.pid'), 'utf8').trim()), 'SIGTERM'); } catch { /* gone */ }
  }
  server.stop();
});

test('behind PgBouncer (transaction pooling), follow watch', { skip: !exe || !!process.env.HOPLOCK_TEST_DSN }, async () => {
  const name = leaseName('pooler');
  const cfg = { host: dir, port: server.port, user: 'postgres', database: 'postgres' };
  const pa = new pg.Pool({ ...cfg, max: 4 });
  const pb = new pg.Pool({ ...cfg, max: 4 });
  pa.on('error', (e) => console.log('# pool a:', e.message));
  pb.on('error', (e) => console.log('# pool b:', e.message));
  const a = new hoplock.Elector(pa, { name, owner: 'a', ttl: 9, follow: 'watch' });
  const b = new hoplock.Elector(pb, { name, owner: 'b', ttl: 9, follow: 'watch', poll: 30 });
  let t0 = 0;
  let lost = 0;
  let bLeads;
  const err = await a.lead(async (term) => {
    for (let i = 0; i < 8; i++) await term.fenced((c) => c.query('SELECT $1::int AS n', [i]));
    bLeads = b.lead(() => performance.now());
    await waitUntil(async () => (await admin.query(`SELECT count(*)::int AS n FROM "${SCHEMA}".hoplock_candidates WHERE name = $1`, [name])).rows[0].n === 1);
    t0 = performance.now();
    await admin.query(`SELECT "${SCHEMA}".hoplock_force_release($1)`, [name]);
    assert.equal(await term.wait(5), true);
    lost = performance.now() - t0;
    throw term.signal.reason;
  }).catch((x) => x);
  assert.ok(err instanceof hoplock.LeadershipLost, String(err));
  assert.ok(lost < 1000);
  const at = await bLeads;
  console.log(`measure: node behind PgBouncer (watch): forced release -> term lost ${lost.toFixed(1)} ms, follower leads ${(at - t0).toFixed(1)} ms`);
  await pa.end();
  await pb.end();
});
