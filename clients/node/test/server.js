'use strict';
// A scratch PostgreSQL server with hoplock preloaded and created in schema
// hoplock, started by each test file (initdb under a temp dir, socket in
// /tmp, as the postgres OS user when run as root), or the server
// HOPLOCK_TEST_DSN names (a superuser; hoplock in HOPLOCK_TEST_SCHEMA).
const { execFileSync } = require('node:child_process');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const pg = require('pg');

const SCHEMA = process.env.HOPLOCK_TEST_SCHEMA || 'hoplock';
const root = process.getuid && process.getuid() === 0;
const asOwner = (cmd) => (root ? ['runuser', '-u', 'postgres', '--', ...cmd] : cmd);

function run(cmd) {
  execFileSync(cmd[0], cmd.slice(1), { stdio: ['ignore', 'ignore', 'inherit'] });
}

function bindir() {
  let pgConfig = process.env.PG_CONFIG || '/usr/lib/postgresql/15/bin/pg_config';
  if (!fs.existsSync(pgConfig)) pgConfig = 'pg_config';
  return execFileSync(pgConfig, ['--bindir'], { encoding: 'utf8' }).trim();
}

function freePort() {
  if (process.env.HOPLOCK_TEST_PORT) return Number(process.env.HOPLOCK_TEST_PORT);
  for (let port = 54500 + (process.pid % 200); port < 54900; port++) {
    if (!fs.existsSync(`/tmp/.s.PGSQL.${port}`) && !fs.existsSync(`/tmp/.s.PGSQL.${port}.lock`)) return port;
  }
  throw new Error('no free port');
}

class Server {
  constructor() {
    this.dir = '';
    this.port = 0;
    this.config = null; // pg connection config
    this.pgCtl = null;
  }

  async start() {
    if (process.env.HOPLOCK_TEST_DSN) {
      this.config = { connectionString: process.env.HOPLOCK_TEST_DSN };
      this.dsn = process.env.HOPLOCK_TEST_DSN;
      return this;
    }
    const bin = bindir();
    this.dir = fs.mkdtempSync(path.join(os.tmpdir(), 'hoplock-nodetest.'));
    if (root) run(['chown', 'postgres', this.dir]);
    this.port = freePort();
    const data = path.join(this.dir, 'data');
    run(asOwner([path.join(bin, 'initdb'), '-D', data, '-A', 'trust', '-U', 'postgres', '--no-sync']));
    const conf = [
      `port = ${this.port}`,
      "listen_addresses = ''",
      "unix_socket_directories = '/tmp'",
      "shared_preload_libraries = 'hoplock'",
      'track_commit_timestamp = on',
      'max_connections = 100',
      'fsync = off',
      '',
    ].join('\n');
    if (root) run(['runuser', '-u', 'postgres', '--', 'sh', '-c', `cat >> '${data}/postgresql.conf' <<'EOF'\n${conf}EOF`]);
    else fs.appendFileSync(path.join(data, 'postgresql.conf'), conf);
    this.pgCtl = asOwner([path.join(bin, 'pg_ctl'), '-D', data, '-l', path.join(this.dir, 'server.log'), '-w']);
    run([...this.pgCtl, 'start']);
    this.config = { host: '/tmp', port: this.port, user: 'postgres', database: 'postgres' };
    this.dsn = `postgresql://postgres@%2Ftmp:${this.port}/postgres`;
    const c = new pg.Client(this.config);
    await c.connect();
    await c.query(`CREATE SCHEMA "${SCHEMA}"`);
    await c.query(`CREATE EXTENSION hoplock SCHEMA "${SCHEMA}"`);
    await c.end();
    return this;
  }

  /** PG* variables for a child process */
  env() {
    if (!this.port) return { ...process.env, HOPLOCK_DSN: this.dsn };
    return { ...process.env, PGHOST: '/tmp', PGPORT: String(this.port), PGUSER: 'postgres', PGDATABASE: 'postgres', HOPLOCK_DSN: this.dsn };
  }

  stop() {
    if (!this.pgCtl) return;
    try {
      run([...this.pgCtl, '-m', 'immediate', 'stop']);
    } catch {
      /* gone */
    }
    fs.rmSync(this.dir, { recursive: true, force: true });
    this.pgCtl = null;
  }
}

let n = 0;
function leaseName(label) {
  n += 1;
  return `${label}-${process.pid}-${n}`;
}

async function waitUntil(cond, timeoutMs = 10000, stepMs = 5) {
  const end = Date.now() + timeoutMs;
  for (;;) {
    const v = await cond();
    if (v) return v;
    if (Date.now() > end) throw new Error(`condition not met within ${timeoutMs} ms`);
    await new Promise((r) => setTimeout(r, stepMs));
  }
}

module.exports = { Server, SCHEMA, leaseName, waitUntil };
