'use strict';
// README.md's quick start, as pasted: two instances; the leader
// terminated (SIGTERM) hands its term to the other, which leads next.
const test = require('node:test');
const assert = require('node:assert/strict');
const { spawn } = require('node:child_process');
const fs = require('node:fs');
const path = require('node:path');
const readline = require('node:readline');
const pg = require('pg');
const { Server, SCHEMA, waitUntil } = require('./server');

const top = path.join(__dirname, '..');
const server = new Server();
let dir;

test.before(async () => {
  await server.start();
  // inside the package, so that require('hoplock') finds it by its name
  dir = fs.mkdtempSync(path.join(top, '.readme-'));
});
test.after(() => {
  if (dir) fs.rmSync(dir, { recursive: true, force: true });
  server.stop();
});

function block(marker) {
  const text = fs.readFileSync(path.join(top, 'README.md'), 'utf8');
  const m = text.match(new RegExp('```js\\n(// ' + marker + '\\n[\\s\\S]*?)```'));
  assert.ok(m, `no block ${marker} in README.md`);
  return m[1];
}

function start(file) {
  const p = spawn(process.execPath, [file], { env: server.env(), stdio: ['ignore', 'pipe', 'inherit'] });
  p.lines = [];
  p.exited = new Promise((r) => p.on('exit', (code) => r(code)));
  readline.createInterface({ input: p.stdout }).on('line', (l) => p.lines.push(l));
  return p;
}

test('the quick start runs as pasted: two instances, SIGTERM hands over', async () => {
  const file = path.join(dir, 'leader.js');
  fs.writeFileSync(file, block('quick start: leader.js'));
  const a = start(file);
  const b = start(file); // at once: the set-up must not race
  let admin;
  try {
    const leading = (p) => p.lines.some((l) => l.startsWith('leading, generation'));
    const first = await waitUntil(() => (leading(a) ? a : leading(b) ? b : null), 15000);
    const other = first === a ? b : a;
    admin = new pg.Client(server.config);
    await admin.connect();
    await waitUntil(async () => (await admin.query(
      `SELECT count(*)::int AS n FROM "${SCHEMA}".hoplock_candidates WHERE name = 'report-runner'`)).rows[0].n === 1, 15000);
    first.kill('SIGTERM');
    assert.equal(await first.exited, 0);
    await waitUntil(() => leading(other), 5000);
    assert.ok(first.lines.includes('no longer leading: stopped'), first.lines.join('\n'));
    const { rows } = await admin.query('SELECT count(DISTINCT generation)::int AS n FROM report_log');
    assert.ok(rows[0].n >= 1);
    other.kill('SIGTERM');
    assert.equal(await other.exited, 0);
  } finally {
    for (const p of [a, b]) if (p.exitCode === null) p.kill('SIGKILL');
    if (admin) await admin.end();
  }
});

test('the slots example runs as pasted: a worker in one of three slots', async () => {
  const file = path.join(dir, 'worker.js');
  fs.writeFileSync(file, block('slots: worker.js'));
  const p = start(file);
  assert.equal(await p.exited, 0);
  assert.match(p.lines.join('\n'), /^worker in slot [123] generation [0-9]+$/);
});
