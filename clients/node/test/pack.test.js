'use strict';
// npm pack, then an install into a fresh application outside the tree:
// pg and the types first, then the tarball offline; the installed
// package loads and its types check with TypeScript.
const test = require('node:test');
const assert = require('node:assert/strict');
const { execFileSync } = require('node:child_process');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');

const top = path.join(__dirname, '..');
const npm = (args, cwd) => execFileSync('npm', [...args, '--no-audit', '--no-fund', '--loglevel=error'],
  { cwd, encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] });

test('npm pack installs offline in a fresh directory, with its types', () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'hoplock-npm-pack.'));
  try {
    const out = npm(['pack', '--pack-destination', dir], top).trim().split('\n');
    const tgz = path.join(dir, out[out.length - 1]);
    assert.ok(fs.existsSync(tgz), `no tarball: ${out}`);
    const app = path.join(dir, 'app');
    fs.mkdirSync(app);
    fs.writeFileSync(path.join(app, 'package.json'), JSON.stringify({ name: 'app', version: '1.0.0', private: true }));
    // the versions npm has fetched for clients/node (an offline resolve
    // of a range would pick the newest it has heard of)
    const have = (m) => JSON.parse(fs.readFileSync(path.join(top, 'node_modules', m, 'package.json'), 'utf8')).version;
    const deps = [`pg@${have('pg')}`, `@types/node@${have('@types/node')}`, `@types/pg@${have('@types/pg')}`];
    // npm ci fetched their tarballs but not the registry's metadata that
    // an install by name needs (theirs and their dependencies'): the
    // application installs them first, from npm's cache where it can
    npm(['install', '--prefer-offline', ...deps], app);
    npm(['install', '--offline', tgz, ...deps], app);
    const files = fs.readdirSync(path.join(app, 'node_modules', 'hoplock', 'dist')).sort();
    assert.deepEqual(files.filter((f) => f.endsWith('.d.ts')), ['elector.d.ts', 'index.d.ts', 'payload.d.ts']);
    const v = execFileSync(process.execPath, ['-e', `
      const h = require('hoplock'); const pg = require('pg');
      const e = new h.Elector(new pg.Pool(), { name: 'x' });
      console.log(typeof h.Elector, typeof h.parsePayload, e.owner.includes(':'))`], { cwd: app, encoding: 'utf8' });
    assert.equal(v.trim(), 'function function true');
    fs.writeFileSync(path.join(app, 'check.ts'), `
import { Pool } from 'pg';
import { Elector, Term, Lease, LeadershipLost, parsePayload } from 'hoplock';
const e = new Elector(new Pool(), { name: 'job', ttl: 15, follow: 'watch', minHold: 5 });
e.on('leader', (l: Lease) => console.log(l.owner, l.value));
e.on('lost', (l, err) => { const g: bigint | undefined = l?.generation; console.log(g, err?.message); });
e.once('acquired', (l) => { const v: string | null = l.value; void v; });
const h: { ok: boolean; reason: string; leading: boolean } = e.health();
void h;
async function main(): Promise<bigint> {
  return e.lead(async (term: Term, signal) => {
    const s: AbortSignal = signal;
    await term.fenced((c) => c.query('SELECT 1'));
    return s.aborted ? 0n : term.generation + 1n;
  }).catch((err: unknown) => { if (err instanceof LeadershipLost) return -1n; throw err; });
}
const g: bigint | null | undefined = parsePayload('{}')?.generation;
void main; void g;
`);
    // (skipLibCheck: pg-protocol's own .d.ts wants a newer @types/node
    // than Node 20's)
    try {
      execFileSync(process.execPath, [path.join(top, 'node_modules', 'typescript', 'bin', 'tsc'), '--noEmit', '--strict',
        '--skipLibCheck', '--target', 'es2020', '--module', 'commonjs', '--esModuleInterop', 'check.ts'],
      { cwd: app, encoding: 'utf8' });
    } catch (err) {
      assert.fail(`tsc: ${err.stdout}${err.stderr}`);
    }
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
});
