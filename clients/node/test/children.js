'use strict';
// A leader process of child.js, as the process and slots tests drive it:
// its output lines, split into words, read as they come (expect, drain),
// and SIGKILL (kill).
const { spawn } = require('node:child_process');
const path = require('node:path');
const readline = require('node:readline');

const CHILD = path.join(__dirname, 'child.js');

class Child {
  /** node child.js ARGS..., with env (the connection's PG* variables) */
  constructor(env, args) {
    this.p = spawn(process.execPath, [CHILD, ...args], { env, stdio: ['ignore', 'pipe', 'inherit'] });
    this.log = [];
    this.queue = [];
    this.waiters = [];
    this.exited = new Promise((r) => this.p.on('exit', (code, sig) => r({ code, sig })));
    readline.createInterface({ input: this.p.stdout }).on('line', (l) => this.push(l.split(' ')));
    this.p.stdout.on('close', () => this.push(['CLOSED']));
  }
  push(line) {
    this.queue.push(line);
    const w = this.waiters;
    this.waiters = [];
    for (const f of w) f();
  }
  next(timeoutMs) {
    if (this.queue.length) return Promise.resolve(this.queue.shift());
    return new Promise((resolve) => {
      const t = setTimeout(() => { this.waiters = this.waiters.filter((x) => x !== f); resolve(null); }, timeoutMs);
      const f = () => { clearTimeout(t); resolve(this.queue.shift()); };
      this.waiters.push(f);
    });
  }
  async expect(word, timeoutMs = 10000) {
    const end = Date.now() + timeoutMs;
    for (;;) {
      const left = end - Date.now();
      const line = left > 0 ? await this.next(left) : null;
      if (!line) throw new Error(`child ${this.p.pid}: no ${word} within ${timeoutMs} ms (saw ${JSON.stringify(this.log)})`);
      this.log.push(line);
      if (line[0] === word) return line;
      if (line[0] === 'CLOSED') throw new Error(`child ${this.p.pid} exited before ${word}: ${JSON.stringify(this.log)}`);
    }
  }
  drain() {
    while (this.queue.length) this.log.push(this.queue.shift());
  }
  async kill() {
    if (this.p.exitCode === null && this.p.signalCode === null) {
      try { this.p.kill('SIGCONT'); this.p.kill('SIGKILL'); } catch { /* gone */ }
    }
    await this.exited;
  }
}

module.exports = { Child };
