// The Elector on node-postgres: campaigns for a lease kept by the hoplock
// extension, runs a function while it leads, renews the term, and aborts
// the function's AbortSignal the moment the term is lost.  The semantics
// of the Go and Python clients' Electors.
import { EventEmitter } from 'node:events';
import * as net from 'node:net';
import * as os from 'node:os';
import { performance } from 'node:perf_hooks';
import { debuglog } from 'node:util';
import type { Pool, PoolClient } from 'pg';
import { parsePayload } from './payload';

const debug = debuglog('hoplock');

// ---------------------------------------------------------------- errors

/** Base class of hoplock's own errors. */
export class HoplockError extends Error {
  constructor(message: string, options?: { cause?: unknown }) {
    super(message);
    this.name = new.target.name;
    if (options && 'cause' in options) (this as { cause?: unknown }).cause = options.cause;
  }
}
/** The Elector was stopped (stop()) before it led, or while it led. */
export class Stopped extends HoplockError {}
/** The term is over: released, expired, forced out, or not ours. */
export class NoLease extends HoplockError {}
/** Another owner (or another term of ours) holds the lease. */
export class LeaseHeld extends HoplockError {}
/** No renewal succeeded within the ttl (by the local monotonic clock). */
export class LeaseExpired extends HoplockError {}
/** The term was handed to another candidate (Term.handoff). */
export class HandedOff extends HoplockError {}
/** A step-down was requested: the term is handed over when fn returns. */
export class StepDown extends HoplockError {}
/** No such candidate waits for the lease. */
export class NoCandidate extends HoplockError {}
/** A server error that retrying cannot mend (bad input, a missing
 *  function or privilege): it ends the campaign. */
export class Permanent extends HoplockError {}
/** hoplock_fence refused the generation (SQLSTATE 55P03). */
export class FenceRefused extends HoplockError {}
/** lead() rejects with this when the term was lost and fn rejected;
 *  .cause says why the term ended, .fnError is what fn threw. */
export class LeadershipLost extends HoplockError {
  readonly fnError: unknown;
  constructor(cause: Error, fnError?: unknown) {
    super(`hoplock: leadership lost: ${cause.message}`, { cause });
    this.fnError = fnError;
  }
}

// ---------------------------------------------------------------- types

/** One term, as the server returned it.  generation (the fencing token)
 *  is a BigInt, exact.  deadline: when, by performance.now() (ms), the
 *  term lapses unless renewed (null for another instance's term).  slot:
 *  the term's slot (1 to slots) for an Elector with slots above 1, else
 *  null. */
export interface Lease {
  name: string;
  owner: string;
  generation: bigint;
  handle: string;
  acquiredAt: Date | null;
  expiresAt: Date | null;
  value: string | null;
  stepDown: boolean;
  stepDownTo: string | null;
  deadline: number | null;
  slot: number | null;
}

export interface Health {
  /** false when this instance believes it leads but has not renewed within
   *  the ttl, or its campaign is wedged */
  ok: boolean;
  reason: string;
  leading: boolean;
  /** the slot of the term it leads in (slots above 1), else null */
  slot: number | null;
}

export type Follow = 'listen' | 'watch';

export interface ElectorOptions {
  /** the lease */
  name: string;
  /** this process's identity in the lease (default host:pid) */
  owner?: string;
  /** seconds a term lasts without renewal (default 15) */
  ttl?: number;
  /** seconds between renewals (default ttl/3) */
  renew?: number;
  /** seconds each hoplock_wait lasts before it is issued again (default renew) */
  poll?: number;
  /** the schema hoplock is installed in (default 'hoplock') */
  schema?: string;
  /** bind each term to the connection that waited for it */
  sessionBound?: boolean;
  /** rank among the waiting candidates */
  priority?: number;
  /** published with each term (hoplock_proclaim) */
  value?: string | null;
  /** seconds: hoplock_wait(..., min_hold => ...) */
  minHold?: number | null;
  /** up to this many Electors of different owners lead at once, each in a
   *  slot of its own (hoplock_wait(..., slots => N)): 1 to 1000 (default 1);
   *  every Elector of the lease must give the same */
  slots?: number;
  /** 'listen' (LISTEN on a connection of its own) or 'watch' (hoplock_watch: behind PgBouncer) */
  follow?: Follow;
  /** seconds each hoplock_watch waits at most (default 10) */
  watchWait?: number;
  /** seconds the release or handoff at the end of a term may take (default min(5, ttl)) */
  releaseTimeout?: number;
  /** seconds lead() waits after a graceful handoff before it returns (default 0.1) */
  handoffLinger?: number;
  /** receives warnings and notes (default: NODE_DEBUG=hoplock) */
  logger?: { warn(msg: string): void; info?(msg: string): void };
}

interface Settings {
  name: string;
  owner: string;
  ttl: number; // ms, all of these
  renew: number;
  poll: number;
  schema: string;
  sessionBound: boolean;
  priority: number;
  value: string | null;
  minHold: number | null;
  slots: number;
  follow: Follow;
  watchWait: number;
  releaseTimeout: number;
  handoffLinger: number;
  guard: number;
}

/** The most terms of a name hoplock runs at once (slots => N). */
const MAX_SLOTS = 1000;

export function defaultOwner(): string {
  return `${os.hostname()}:${process.pid}`;
}

function settings(o: ElectorOptions): Settings {
  if (!o || typeof o.name !== 'string' || o.name === '') throw new TypeError('hoplock: name is empty');
  const ttl = (o.ttl ?? 15) * 1000;
  if (!(ttl > 0)) throw new RangeError(`hoplock: ttl must be positive (${o.ttl})`);
  const renew = o.renew == null ? ttl / 3 : o.renew * 1000;
  if (!(renew > 0 && renew < ttl)) throw new RangeError('hoplock: renew must be positive and less than ttl');
  const poll = o.poll == null ? renew : o.poll * 1000;
  if (!(poll > 0)) throw new RangeError('hoplock: poll must be positive');
  const minHold = o.minHold == null ? null : o.minHold * 1000;
  if (minHold !== null && !(minHold > 0 && minHold <= ttl))
    throw new RangeError('hoplock: minHold must be positive and at most ttl');
  const slots = o.slots ?? 1;
  if (typeof slots !== 'number' || !Number.isInteger(slots) || slots < 1 || slots > MAX_SLOTS)
    throw new RangeError(`hoplock: slots must be an integer from 1 to ${MAX_SLOTS} (${String(slots)})`);
  const follow = o.follow ?? 'listen';
  if (follow !== 'listen' && follow !== 'watch') throw new RangeError(`hoplock: follow must be 'listen' or 'watch'`);
  return {
    name: o.name,
    owner: o.owner || defaultOwner(),
    ttl,
    renew,
    poll,
    schema: o.schema ?? 'hoplock',
    sessionBound: !!o.sessionBound,
    priority: o.priority ?? 0,
    value: o.value ?? null,
    minHold,
    slots,
    follow,
    watchWait: (o.watchWait ?? 10) * 1000,
    releaseTimeout: o.releaseTimeout == null ? Math.min(5000, ttl) : o.releaseTimeout * 1000,
    handoffLinger: (o.handoffLinger ?? 0.1) * 1000,
    guard: Math.min(ttl / 50, 50),
  };
}

// ---------------------------------------------------------------- SQL

/** An interval parameter from milliseconds. */
function interval(ms: number): string {
  return `${(Math.max(ms, 0.001) / 1000).toFixed(6)} seconds`;
}

const COLS =
  'l.name, l.owner, l.generation::pg_catalog.text AS generation, l.handle, l.acquired_at, ' +
  'l.expires_at, l.value, l.step_down';

// Every function qualified with the schema and every argument cast to its
// parameter's exact type (no overload planted beside hoplock's can capture
// a call); bigint columns read as text (exact).  No statement is named:
// node-postgres then never prepares one on the server (PgBouncer).
class Queries {
  wait: string;
  renew: string;
  release: string;
  releaseAny: string;
  holder: string;
  handoff: string;
  proclaim: string;
  fence: string;
  position: string;
  watch: string;
  stepDownTo: string;
  slot: string;
  hasMinHold: string;
  constructor(schema: string, minHold: boolean) {
    const s = `"${schema.replace(/"/g, '""')}"`;
    this.wait =
      `SELECT ${COLS} FROM ${s}.hoplock_wait($1::text, $2::text, $3::interval, $4::interval, ` +
      // min_hold and slots came together (1.2's 10-argument hoplock_wait)
      `$5::boolean, $6::integer, $7::text${minHold ? ', min_hold => $8::interval, slots => $9::integer' : ''}) AS l`;
    this.renew = `SELECT ${COLS} FROM ${s}.hoplock_renew($1::text, $2::text, $3::interval, $4::bigint) AS l`;
    this.release = `SELECT ${s}.hoplock_release($1::text, $2::text, $3::bigint) AS ok`;
    this.releaseAny = `SELECT ${s}.hoplock_release($1::text, $2::text) AS ok`;
    this.holder = `SELECT ${COLS} FROM ${s}.hoplock_holder($1::text) AS l`;
    this.handoff = `SELECT ${COLS} FROM ${s}.hoplock_handoff($1::text, $2::text, $3::bigint, $4::text) AS l`;
    this.proclaim = `SELECT ${s}.hoplock_proclaim($1::text, $2::text, $3::bigint, $4::text)`;
    this.fence = `SELECT ${s}.hoplock_fence($1::text, $2::bigint)`;
    this.position = `SELECT ${s}.hoplock_position()::pg_catalog.text AS seq`;
    this.watch =
      `SELECT w.seq::pg_catalog.text AS seq, w.name${minHold ? ', w.slot' : ''} ` +
      `FROM ${s}.hoplock_watch($1::bigint, $2::interval) AS w`;
    this.stepDownTo =
      `SELECT v.step_down_to FROM ${s}.hoplock_leases AS v ` +
      'WHERE v.name OPERATOR(pg_catalog.=) $1::text AND v.generation OPERATOR(pg_catalog.=) $2::bigint';
    this.slot =
      `SELECT v.slot FROM ${s}.hoplock_leases AS v ` +
      'WHERE v.name OPERATOR(pg_catalog.=) $1::text AND v.generation OPERATOR(pg_catalog.=) $2::bigint';
    this.hasMinHold =
      `SELECT pg_catalog.to_regprocedure('${s.replace(/'/g, "''")}.hoplock_wait(text,text,interval,interval,` +
      `boolean,integer,text,boolean,interval,integer)') IS NOT NULL AS ok`;
  }
}

// The server notices, while a wait sleeps, that its client has gone
// (PostgreSQL 14 and later), so that an abandoned wait takes no lease.
const CHECK_CONNECTION =
  "SELECT pg_catalog.set_config('client_connection_check_interval', '1000', false) " +
  "WHERE pg_catalog.current_setting('client_connection_check_interval', true) IS NOT NULL";
const CHANNEL = "SELECT pg_catalog.current_setting('hoplock.channel', true) AS channel";

// eslint-disable-next-line @typescript-eslint/no-explicit-any
type Row = Record<string, any>;

function leaseFrom(row: Row | undefined, deadline: number | null = null): Lease | null {
  if (!row || row.generation == null) return null;
  return {
    name: row.name,
    owner: row.owner,
    generation: BigInt(row.generation),
    handle: row.handle,
    acquiredAt: row.acquired_at ?? null,
    expiresAt: row.expires_at ?? null,
    value: row.value || null,
    stepDown: !!row.step_down,
    stepDownTo: null,
    deadline,
    slot: null,
  };
}

/** Is an event of slot (null: none given) about a slot other than mine
 *  (null: not known)?  Such an event cannot end this Elector's term. */
function otherSlot(slot: number | null | undefined, mine: number | null): boolean {
  return slot != null && mine !== null && slot !== mine;
}

function sqlstate(err: unknown): string | null {
  const code = (err as { code?: unknown } | null)?.code;
  return typeof code === 'string' && /^[0-9A-Z]{5}$/.test(code) ? code : null;
}

/** Is err one a retry may mend?  Server errors of class 08, 40, 53 (not
 *  53400), 57, 58, and 55P03, 25006; errors of the connection. */
export function isTransient(err: unknown): boolean {
  const code = sqlstate(err);
  if (code === null) {
    return (
      err instanceof Error &&
      !(err instanceof TypeError || err instanceof RangeError || err instanceof ReferenceError ||
        err instanceof SyntaxError || err instanceof HoplockError)
    );
  }
  if (code === '53400') return false;
  return ['08', '40', '53', '57', '58'].includes(code.slice(0, 2)) || code === '55P03' || code === '25006';
}

function classify(err: unknown): Error {
  if (err instanceof HoplockError) return err;
  if (!isTransient(err)) return new Permanent(`hoplock: ${(err as Error)?.message ?? err}`, { cause: err });
  return err instanceof Error ? err : new Error(String(err));
}

const now = (): number => performance.now();

function sleep(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, Math.max(ms, 0)));
}

/** Sends a cancel request for what the client runs now (its own socket,
 *  as libpq's PQcancel does). */
function sendCancel(client: PoolClient): Promise<void> {
  const c = client as unknown as { processID?: number; secretKey?: number; host?: string; port?: number };
  if (typeof c.processID !== 'number' || typeof c.secretKey !== 'number') return Promise.resolve();
  return new Promise((resolve) => {
    const host = c.host || 'localhost';
    const port = c.port || 5432;
    const sock = host.startsWith('/') ? net.connect(`${host}/.s.PGSQL.${port}`) : net.connect(port, host);
    const buf = Buffer.alloc(16);
    buf.writeInt32BE(16, 0);
    buf.writeInt32BE(80877102, 4);
    buf.writeInt32BE(c.processID as number, 8);
    buf.writeInt32BE(c.secretKey as number, 12);
    sock.setTimeout(2000, () => sock.destroy());
    sock.on('connect', () => sock.end(buf));
    sock.on('error', () => resolve());
    sock.on('close', () => resolve());
  });
}

// A connection lost while we hold it out of the pool shows as the error of
// the query in flight (or of the next); node-postgres also emits 'error' on
// the client, which must not go unhandled (pg-pool listens only while the
// client is idle in the pool).
const swallow = (): void => {};
async function take(pool: Pool): Promise<PoolClient> {
  const c = await pool.connect();
  c.on('error', swallow);
  return c;
}
function give(c: PoolClient, destroy?: Error | boolean): void {
  c.removeListener('error', swallow);
  c.release(destroy);
}

class Backoff {
  private min: number;
  private max: number;
  private cur = 0;
  constructor(renew: number) {
    this.min = Math.max(renew / 10, 5);
    this.max = Math.max(renew / 2, this.min);
  }
  next(): number {
    this.cur = this.cur === 0 ? this.min : Math.min(this.cur * 2, this.max);
    return this.cur;
  }
  reset(): void {
    this.cur = 0;
  }
}

// ---------------------------------------------------------------- following

/** Hears of changes to the lease: LISTEN on a connection of its own, or
 *  hoplock_watch in a loop.  Calls hint() for each (new) event of the
 *  name, and after each reconnect. */
class Follower {
  private client: PoolClient | null = null;
  private closed = false;
  private seen = new Set<string>();
  private loop: Promise<void> | null = null;
  private inflight: PoolClient | null = null;
  private cancelled = new WeakSet<PoolClient>();
  private retry: NodeJS.Timeout | null = null;

  constructor(private e: Elector, private hint: () => void) {}

  async start(): Promise<void> {
    if (this.e.s.follow === 'watch') {
      this.loop = this.watchLoop();
      return;
    }
    await this.listen();
  }

  private relevant(payload: string | undefined): boolean {
    const p = parsePayload(payload);
    if (p === null || p.name !== this.e.s.name) return false;
    if (otherSlot(p.slot, this.e._slot)) return false; // another slot's term: not ours
    if (p.seq !== null) {
      const k = p.seq.toString();
      if (this.seen.has(k)) return false; // a repeat
      this.seen.add(k);
      if (this.seen.size > 4096) this.seen = new Set([...this.seen].slice(-1024));
    }
    return true;
  }

  private async listen(): Promise<void> {
    let client: PoolClient | null = null;
    try {
      client = await take(this.e.pool);
      const c: PoolClient = client;
      c.on('error', (err) => this.broken(c, err));
      c.on('notification', (n) => {
        if (!this.closed && this.relevant(n.payload)) this.hint();
      });
      const r = await c.query(CHANNEL);
      const channel: string = r.rows[0]?.channel || 'hoplock';
      await c.query(`LISTEN "${channel.replace(/"/g, '""')}"`);
      if (this.closed) {
        give(c, true);
        return;
      }
      this.client = c;
    } catch (err) {
      this.e.warn(`could not follow the events: ${(err as Error).message}`);
      if (client) give(client, true);
      this.again();
    }
  }

  private broken(c: PoolClient, err: Error): void {
    if (this.client !== c) return;
    this.e.warn(`lost the listening connection: ${err.message}`);
    this.client = null;
    give(c, true);
    this.again();
  }

  private again(): void {
    if (this.closed || this.retry) return;
    this.retry = setTimeout(() => {
      this.retry = null;
      if (this.closed) return;
      void this.listen().then(() => {
        if (this.client) this.hint(); // events may have been missed
      });
    }, Math.min(1000, this.e.s.renew / 10));
  }

  private async watchLoop(): Promise<void> {
    const e = this.e;
    let after: bigint | null = null;
    const retry = new Backoff(e.s.renew);
    while (!this.closed) {
      let client: PoolClient | null = null;
      let bad: unknown;
      try {
        client = await take(e.pool);
        if (after === null) {
          const r = await client.query(e.q.position);
          after = BigInt(r.rows[0]?.seq ?? '0');
          this.hint();
          continue;
        }
        this.inflight = client;
        if (this.closed) break;
        const r: { rows: Row[] } = await client.query(e.q.watch, [after.toString(), interval(e.s.watchWait)]);
        this.inflight = null;
        let hit = false;
        for (const row of r.rows) {
          const seq: bigint = BigInt(row.seq);
          if (after === null || seq > after) after = seq;
          if (row.name === e.s.name && !otherSlot(row.slot, e._slot)) hit = true;
        }
        retry.reset();
        if (hit && !this.closed) this.hint();
      } catch (err) {
        this.inflight = null;
        const code = sqlstate(err);
        if (this.closed) break;
        if (code === 'HL001') {
          after = null; // the events after ours were forgotten: start over
          continue;
        }
        if (code === null || code.startsWith('08')) bad = err;
        e.warn(`hoplock_watch failed: ${(err as Error).message}`);
        await sleep(retry.next());
      } finally {
        this.inflight = null;
        if (client) give(client, bad instanceof Error || this.cancelled.has(client) ? true : undefined);
      }
    }
  }

  async close(): Promise<void> {
    this.closed = true;
    if (this.retry) clearTimeout(this.retry);
    this.retry = null;
    const c = this.client;
    this.client = null;
    if (c) give(c, true); // LISTEN state: not for the pool
    // a cancel request that reaches the server before the watch starts
    // is lost: send it again while the watch runs on
    for (let i = 0; this.loop && i < 20; i++) {
      const w = this.inflight;
      if (w) {
        this.cancelled.add(w);
        await sendCancel(w);
      }
      const done = await Promise.race([this.loop.then(() => true), sleep(250).then(() => false)]);
      if (done) break;
    }
    if (this.loop) await this.loop;
  }
}

// ---------------------------------------------------------------- the term

type Fn<T> = (term: Term, signal: AbortSignal) => Promise<T> | T;

/** The term fn runs in.  signal aborts the moment the term is lost (its
 *  reason is the cause) or the Elector is stopped (reason: Stopped). */
export class Term {
  private controller = new AbortController();
  /** aborted the moment the term is lost or stop() is called */
  readonly signal: AbortSignal = this.controller.signal;
  /** why the term was lost; null while it holds, and after a graceful stop */
  cause: Error | null = null;
  /** @internal */ deadline: number;
  /** @internal */ stepping = false;
  /** @internal */ handedOff = false;
  /** @internal */ lostFlag = false;
  private _lease: Lease;
  private lastErr: Error | null = null;
  private timer: NodeJS.Timeout | null = null;
  private chain: Promise<unknown> = Promise.resolve();
  private hinted = false;
  private wake: (() => void) | null = null;
  private finished = false;

  /** @internal */
  constructor(private e: Elector, lease: Lease, sent: number) {
    this.deadline = sent + e.s.ttl;
    this._lease = { ...lease, deadline: this.deadline };
    e._h.leading = true;
    e._h.deadline = this.deadline;
    e._h.slot = lease.slot;
    this.arm();
  }

  /** the term, as of the last renewal */
  get lease(): Lease {
    return this._lease;
  }
  /** the fencing token, exact */
  get generation(): bigint {
    return this._lease.generation;
  }
  /** the slot this term runs in (1 to slots) with slots above 1; null
   *  without slots, or if it could not be read */
  get slot(): number | null {
    return this._lease.slot;
  }
  /** true once the term is over (checks the deadline itself) */
  get lost(): boolean {
    this.expire();
    return this.signal.aborted;
  }

  /** Resolves true when the term ends, or false after `seconds`. */
  wait(seconds?: number): Promise<boolean> {
    if (this.lost) return Promise.resolve(true);
    return new Promise((resolve) => {
      let t: NodeJS.Timeout | null = null;
      const done = (): void => {
        if (t) clearTimeout(t);
        resolve(true);
      };
      this.signal.addEventListener('abort', done, { once: true });
      if (seconds != null) {
        t = setTimeout(() => {
          this.signal.removeEventListener('abort', done);
          resolve(this.lost);
        }, seconds * 1000);
      }
    });
  }

  /** Throws LeadershipLost (or Stopped) if the term is over. */
  check(): void {
    if (!this.lost) return;
    if (this.cause) throw new LeadershipLost(this.cause);
    throw new Stopped('hoplock: stopped');
  }

  /** Runs fn in a transaction whose first statement is hoplock_fence of
   *  this term: it commits only while this term holds the lease. */
  async fenced<T>(fn: (client: PoolClient) => Promise<T> | T): Promise<T> {
    this.check();
    return this.e.fenced(this.generation, fn);
  }

  /** Hands the term to the candidate waiting as owner `to`, or the first. */
  handoff(to?: string): Promise<void> {
    return this.locked(async () => {
      if (this.signal.aborted || this.handedOff) throw new NoLease('hoplock: this term is over');
      const r = await this.e._query(this.e.q.handoff, [this.e.s.name, this.e.s.owner, this.generation.toString(), to ?? null]);
      const nl = leaseFrom(r[0]);
      if (nl === null) throw new NoCandidate('hoplock: no such candidate waits');
      this.handedOff = true;
      this.lose(new HandedOff(`hoplock: handed off to ${nl.owner}`));
    });
  }

  private locked<T>(fn: () => Promise<T>): Promise<T> {
    const p = this.chain.then(fn);
    this.chain = p.catch(() => undefined);
    return p;
  }

  private arm(): void {
    if (this.timer) clearTimeout(this.timer);
    this.timer = setTimeout(() => this.expire(), Math.max(this.deadline - this.e.s.guard - now(), 0));
  }

  private expire(): void {
    if (this.signal.aborted || now() < this.deadline - this.e.s.guard) return;
    this.lose(new LeaseExpired('hoplock: no renewal succeeded within the ttl' +
      (this.lastErr ? ` (last renewal: ${this.lastErr.message})` : '')));
  }

  /** @internal ends the term for fn: cause null for a graceful stop */
  lose(cause: Error | null, stepping = false): void {
    if (this.signal.aborted) return;
    if (stepping) this.stepping = true;
    else this.lostFlag = cause !== null;
    this.cause = cause;
    this.e._h.leading = false;
    if (this.timer) clearTimeout(this.timer);
    if (cause) this.e.info(`${this.e.s.owner} lost generation ${this.generation}: ${cause.message}`);
    this.controller.abort(cause ?? new Stopped('hoplock: stopped'));
    this.poke();
  }

  /** @internal fn has returned: stop renewing */
  finish(): void {
    this.finished = true;
    if (this.timer) clearTimeout(this.timer);
    this.e._h.leading = false;
    this.poke();
  }

  /** @internal an event of the name arrived */
  hint(): void {
    this.hinted = true;
    this.poke();
  }

  private poke(): void {
    const w = this.wake;
    this.wake = null;
    if (w) w();
  }

  private get over(): boolean {
    return this.finished || this.signal.aborted;
  }

  private nap(ms: number): Promise<void> {
    if (this.hinted || this.over) return Promise.resolve();
    return new Promise((resolve) => {
      const t = setTimeout(() => {
        this.wake = null;
        resolve();
      }, ms);
      this.wake = () => {
        clearTimeout(t);
        resolve();
      };
    });
  }

  /** @internal the renewal loop */
  async loop(sent: number): Promise<void> {
    const e = this.e;
    const s = e.s;
    const retry = new Backoff(s.renew);
    let nextAt = sent + s.renew;
    while (!this.over) {
      const left = Math.min(nextAt, this.deadline - s.guard) - now();
      if (left > 0) {
        await this.nap(left);
        if (this.over) return;
        if (this.hinted) {
          this.hinted = false;
          await this.confirm();
        }
        this.expire();
        continue;
      }
      const start = now();
      const limit = Math.min(s.renew, this.deadline - start);
      let err = null as Error | null;
      let nl = null as Lease | null;
      const quit = await this.locked(async () => {
        if (this.over) return true;
        try {
          const r = await e._query(e.q.renew, [s.name, s.owner, interval(s.ttl), this.generation.toString()], limit);
          nl = leaseFrom(r[0]);
          if (nl !== null && nl.stepDown) {
            const r2 = await e._query(e.q.stepDownTo, [s.name, this.generation.toString()], limit);
            nl.stepDownTo = r2[0]?.step_down_to ?? null;
          }
        } catch (ex) {
          err = classify(ex);
        }
        return false;
      });
      if (quit) return;
      if (err === null) {
        const got = nl as Lease | null;
        if (got === null || got.generation !== this.generation) {
          this.lose(new NoLease('hoplock: the term is over (renewal returned no lease)'));
          return;
        }
        if (this.over) return;
        this.deadline = start + s.ttl;
        this._lease = {
          ...got,
          deadline: this.deadline,
          acquiredAt: got.acquiredAt ?? this._lease.acquiredAt,
          slot: this._lease.slot,
        };
        this.lastErr = null;
        e._h.deadline = this.deadline;
        this.arm();
        e.emit('renewed', this._lease);
        if (got.stepDown) {
          this.lose(new StepDown('hoplock: a step-down was requested'), true);
          return;
        }
        retry.reset();
        nextAt = start + s.renew;
      } else if (err instanceof Permanent) {
        this.lose(err);
        return;
      } else {
        const d = retry.next();
        e.warn(`renewal failed, retrying in ${d.toFixed(0)} ms: ${(err as Error).message}`);
        this.lastErr = err;
        nextAt = now() + d;
      }
    }
  }

  private async confirm(): Promise<void> {
    const e = this.e;
    await this.locked(async () => {
      if (this.over) return;
      if (e.s.slots > 1) return this.confirmSlot();
      let cur: Lease | null;
      try {
        cur = leaseFrom((await e._query(e.q.holder, [e.s.name], e.s.renew))[0]);
      } catch (ex) {
        e.warn(`could not confirm the lease: ${(ex as Error).message}`);
        return;
      }
      if (cur === null) this.lose(new NoLease('hoplock: the term is over'));
      else if (cur.owner !== e.s.owner || cur.generation !== this.generation)
        this.lose(new LeaseHeld('hoplock: another term holds the lease'));
    });
  }

  /** With slots, the holder is one of several (hoplock_holder reads the
   *  lowest slot's term): ask for this term itself, renewing it by
   *  generation, which succeeds only while it runs. */
  private async confirmSlot(): Promise<void> {
    const e = this.e;
    const s = e.s;
    let nl: Lease | null;
    try {
      nl = leaseFrom((await e._query(e.q.renew, [s.name, s.owner, interval(s.ttl), this.generation.toString()], s.renew))[0]);
    } catch (ex) {
      const c = classify(ex);
      if (c instanceof Permanent) this.lose(c);
      else e.warn(`could not confirm the lease: ${c.message}`);
      return;
    }
    if (nl === null || nl.generation !== this.generation) this.lose(new NoLease('hoplock: the term is over'));
  }
}

// ---------------------------------------------------------------- the Elector

class HealthState {
  leading = false;
  deadline = 0;
  campaigning = false;
  beat = 0;
  slot: number | null = null; // the slot of the term it leads in
  judge(s: Settings): Health {
    const t = now();
    const slot = this.leading ? this.slot : null;
    if (this.leading && t > this.deadline)
      return { ok: false, reason: `leads but has not renewed within the ttl (${((t - this.deadline) / 1000).toFixed(3)} s late)`, leading: true, slot };
    if (this.campaigning && t - this.beat > s.poll + s.ttl + s.releaseTimeout)
      return { ok: false, reason: `campaign wedged: no call returned for ${((t - this.beat) / 1000).toFixed(3)} s`, leading: false, slot };
    return { ok: true, reason: this.leading ? 'leading' : 'following', leading: this.leading, slot };
  }
}

interface Won {
  lease: Lease;
  sent: number;
  bound: PoolClient | null;
}

/** The events, typed. */
export interface ElectorEvents {
  /** this Elector leads, in the term of lease */
  acquired: (lease: Lease) => void;
  /** the term was renewed */
  renewed: (lease: Lease) => void;
  /** no longer leads: error says why (null: fn returned, the term released) */
  lost: (lease: Lease | null, error: Error | null) => void;
  /** another instance leads, in the term of lease (its owner, generation, value) */
  leader: (lease: Lease) => void;
}

// eslint-disable-next-line @typescript-eslint/no-unsafe-declaration-merging
export interface Elector {
  on<E extends keyof ElectorEvents>(event: E, listener: ElectorEvents[E]): this;
  once<E extends keyof ElectorEvents>(event: E, listener: ElectorEvents[E]): this;
  off<E extends keyof ElectorEvents>(event: E, listener: ElectorEvents[E]): this;
  emit<E extends keyof ElectorEvents>(event: E, ...args: Parameters<ElectorEvents[E]>): boolean;
}

/**
 * Campaigns for the lease `options.name` on a node-postgres Pool.
 *
 * Events: 'acquired' (lease), 'renewed' (lease), 'lost' (lease, error or
 * null), 'leader' (lease of another instance, once per term).
 */
export class Elector extends EventEmitter {
  /** @internal */ readonly s: Settings;
  /** @internal */ q: Queries;
  /** @internal */ readonly _h = new HealthState();
  /** @internal */ readonly pool: Pool;
  private logger: ElectorOptions['logger'];
  private stopping = false;
  private term: Term | null = null;
  private waiting: PoolClient | null = null;
  private cancelled = new WeakSet<PoolClient>();
  private stopWaiters = new Set<() => void>();
  private minHoldKnown: boolean | null = null;
  private leadingNow = false;
  private top = 0n;
  private reporting: Promise<void> | null = null;
  private reportAgain = false;
  private busy = false;

  constructor(pool: Pool, options: ElectorOptions) {
    super();
    if (!pool || typeof (pool as Pool).connect !== 'function') throw new TypeError('hoplock: a pg Pool is required');
    this.pool = pool;
    this.s = settings(options);
    this.q = new Queries(this.s.schema, false);
    this.logger = options.logger;
  }

  get name(): string {
    return this.s.name;
  }
  get owner(): string {
    return this.s.owner;
  }
  /** true once stop() was called */
  get stopped(): boolean {
    return this.stopping;
  }
  /** @internal the slot of the term this Elector runs, if known */
  get _slot(): number | null {
    return this.term ? this.term.slot : null;
  }

  /** Emits an event; a listener that throws does not break the term's
   *  bookkeeping: its error is rethrown on the next tick, as an uncaught
   *  exception, as an error in any callback would be. */
  override emit(event: string | symbol, ...args: unknown[]): boolean {
    try {
      return super.emit(event, ...args);
    } catch (err) {
      process.nextTick(() => {
        throw err;
      });
      return true;
    }
  }

  /** @internal */ warn(msg: string): void {
    debug('%s', msg);
    this.logger?.warn(`hoplock: ${msg}`);
  }
  /** @internal */ info(msg: string): void {
    debug('%s', msg);
    this.logger?.info?.(`hoplock: ${msg}`);
  }

  /** Ends lead() and run() gracefully: the term (if any) is handed to a
   *  waiting candidate, or released; a wait in flight is cancelled. */
  stop(): void {
    this.stopping = true;
    if (this.term) this.term.lose(null);
    const w = this.waiting;
    if (w) {
      this.cancelled.add(w);
      void sendCancel(w);
    }
    for (const f of [...this.stopWaiters]) f();
  }

  health(): Health {
    return this._h.judge(this.s);
  }

  /** Who leads now (hoplock_holder), with its value, or null; with slots,
   *  the term of the lowest slot running, with its slot. */
  async leader(): Promise<Lease | null> {
    const cur = leaseFrom((await this._query(this.q.holder, [this.s.name]))[0]);
    return cur === null ? null : this.findSlot(cur);
  }

  /** Runs fn in a transaction whose first statement is
   *  hoplock_fence(name, generation); commits when fn resolves, rolls back
   *  when it rejects.  FenceRefused if the fence refuses. */
  async fenced<T>(generation: bigint | string, fn: (client: PoolClient) => Promise<T> | T): Promise<T> {
    const c = await take(this.pool);
    let destroy: Error | undefined;
    try {
      await c.query('BEGIN');
      try {
        await c.query(this.q.fence, [this.s.name, generation.toString()]);
      } catch (err) {
        if (sqlstate(err) === '55P03')
          throw new FenceRefused(`hoplock: generation ${generation} does not hold lease "${this.s.name}": ${(err as Error).message}`, { cause: err });
        throw err;
      }
      const result = await fn(c);
      const r = await c.query('COMMIT');
      if (r.command === 'ROLLBACK') throw new HoplockError('hoplock: the fenced transaction was rolled back (a statement in it failed)');
      return result;
    } catch (err) {
      try {
        await c.query('ROLLBACK');
      } catch (e2) {
        destroy = e2 as Error;
      }
      throw err;
    } finally {
      give(c, destroy);
    }
  }

  /** @internal one statement on a pooled connection; with a timeout (ms),
   *  in a transaction with statement_timeout set. */
  async _query(text: string, values: unknown[], timeout?: number): Promise<Row[]> {
    const c = await take(this.pool);
    let destroy: Error | undefined;
    try {
      if (timeout == null) return (await c.query(text, values)).rows;
      await c.query(`BEGIN; SELECT pg_catalog.set_config('statement_timeout', '${Math.max(Math.round(timeout), 1)}', true)`);
      try {
        const r = await c.query(text, values);
        await c.query('COMMIT');
        return r.rows;
      } catch (err) {
        await c.query('ROLLBACK').catch((e2: Error) => { destroy = e2; });
        throw err;
      }
    } catch (err) {
      if (sqlstate(err) === null) destroy = err as Error;
      throw err;
    } finally {
      give(c, destroy);
    }
  }

  private sleep(ms: number): Promise<void> {
    if (this.stopping) return Promise.resolve();
    return new Promise((resolve) => {
      const done = (): void => {
        clearTimeout(t);
        this.stopWaiters.delete(done);
        resolve();
      };
      const t = setTimeout(done, ms);
      this.stopWaiters.add(done);
    });
  }

  private async minHold(): Promise<boolean> {
    if (this.minHoldKnown === null) {
      const r = await this._query(this.q.hasMinHold, []);
      this.minHoldKnown = !!r[0]?.ok;
      this.q = new Queries(this.s.schema, this.minHoldKnown);
      if (this.s.minHold !== null && !this.minHoldKnown) throw new Permanent('hoplock: minHold needs a hoplock that has it');
      if (this.s.slots > 1 && !this.minHoldKnown) throw new Permanent('hoplock: slots needs hoplock 1.2 or later');
    }
    return this.minHoldKnown;
  }

  private waitParams(hold: boolean): unknown[] {
    const s = this.s;
    const p: unknown[] = [s.name, s.owner, interval(s.ttl), interval(s.poll), s.sessionBound, s.priority, s.value];
    if (hold) p.push(s.minHold === null ? null : interval(s.minHold), s.slots);
    return p;
  }

  /** Waits in hoplock_wait until this Elector leads. */
  private async campaign(): Promise<Won> {
    const s = this.s;
    const h = this._h;
    const retry = new Backoff(s.renew);
    h.campaigning = true;
    h.beat = now();
    try {
      for (;;) {
        if (this.stopping) throw new Stopped('hoplock: stopped');
        let client: PoolClient | null = null;
        let lease: Lease | null = null;
        let sent = now();
        let bad: Error | undefined;
        let failed = null as Error | null;
        h.beat = sent;
        try {
          const hold = await this.minHold();
          client = await take(this.pool);
          await client.query(CHECK_CONNECTION);
          if (this.stopping) throw new Stopped('hoplock: stopped');
          sent = now();
          this.waiting = client;
          lease = leaseFrom((await client.query(this.q.wait, this.waitParams(hold))).rows[0]);
        } catch (err) {
          if (err instanceof Stopped) throw err;
          const code = sqlstate(err);
          if (code === null) bad = err as Error;
          if (code !== '57014') {
            const c = classify(err);
            if (c instanceof Permanent) throw c;
            failed = c;
          }
        } finally {
          this.waiting = null;
          h.beat = now();
          if (client && !(lease && s.sessionBound)) give(client, bad ?? (this.cancelled.has(client) ? true : undefined));
        }
        if (this.stopping) {
          if (lease) await this.release(lease, s.sessionBound ? client : null);
          else await this.cleanup();
          throw new Stopped('hoplock: stopped');
        }
        if (failed) {
          const d = retry.next();
          this.warn(`campaign failed, retrying in ${d.toFixed(0)} ms: ${failed.message}`);
          await this.sleep(d);
          continue;
        }
        if (lease === null) {
          retry.reset();
          const d = now() - sent;
          if (d < s.poll / 2) await this.sleep(s.poll / 2 - d);
          continue;
        }
        const bound = s.sessionBound ? client : null;
        const fresh = await this.freshen(lease, sent);
        if (!fresh || this.stopping) {
          await this.release(lease, bound);
          if (this.stopping) throw new Stopped('hoplock: stopped');
          continue;
        }
        const l = await this.findSlot(await this.proclaim(fresh.lease));
        return { lease: { ...l, deadline: fresh.sent + s.ttl }, sent: fresh.sent, bound };
      }
    } finally {
      h.campaigning = false;
    }
  }

  /**
   * A term granted long after its wait was sent is renewed before use. A
   * wait that lasted past the ttl leaves a term this process cannot vouch
   * for by its own clock, but renewing it is safe (a renewal by generation
   * succeeds only while the term is current): it gets renew ms to succeed,
   * and the term is dropped only if the renewal says it is over or fails.
   */
  private async freshen(lease: Lease, sent: number): Promise<{ lease: Lease; sent: number } | null> {
    const s = this.s;
    const retry = new Backoff(s.renew);
    // the last instant a renewal may end: the term's own deadline, or for
    // a wait that lasted past the ttl, renew from now
    let limit = Math.max(sent + s.ttl - s.guard, now() + s.renew);
    while (now() - sent >= s.renew) {
      const start = now();
      if (start >= limit) return null;
      try {
        const r = await this._query(this.q.renew, [s.name, s.owner, interval(s.ttl), lease.generation.toString()],
          limit - start);
        const nl = leaseFrom(r[0]);
        if (nl === null || nl.generation !== lease.generation) return null;
        lease = nl;
        sent = start;
        limit = start + s.ttl - s.guard;
      } catch (err) {
        if (classify(err) instanceof Permanent) return null;
        await sleep(retry.next());
      }
    }
    return { lease, sent };
  }

  /** With slots, the lease with the slot its term runs in (the
   *  hoplock_lease row has none).  A failure is logged, not fatal: the term
   *  is no less this Elector's (its slot is then null). */
  private async findSlot(lease: Lease): Promise<Lease> {
    const s = this.s;
    if (s.slots <= 1) return lease;
    try {
      const r = await this._query(this.q.slot, [s.name, lease.generation.toString()], s.renew);
      return r[0]?.slot == null ? lease : { ...lease, slot: Number(r[0].slot) };
    } catch (err) {
      this.warn(`could not read the slot of generation ${lease.generation}: ${(err as Error).message}`);
      return lease;
    }
  }

  private async proclaim(lease: Lease): Promise<Lease> {
    const s = this.s;
    if (s.value === null || lease.value === s.value) return lease;
    try {
      await this._query(this.q.proclaim, [s.name, s.owner, lease.generation.toString(), s.value], s.renew);
      return { ...lease, value: s.value };
    } catch (err) {
      this.warn(`could not proclaim the value: ${(err as Error).message}`);
      return lease;
    }
  }

  private async release(lease: Lease, bound: PoolClient | null): Promise<void> {
    const s = this.s;
    try {
      await this._query(this.q.release, [s.name, s.owner, lease.generation.toString()], s.releaseTimeout);
    } catch (err) {
      this.warn(`could not release generation ${lease.generation}: ${(err as Error).message}`);
    } finally {
      if (bound) give(bound, true);
    }
  }

  private async cleanup(): Promise<void> {
    try {
      await this._query(this.q.releaseAny, [this.s.name, this.s.owner], this.s.releaseTimeout);
    } catch {
      /* nothing held */
    }
  }

  /** The end of a term: hand it over (a graceful stop, a step-down) or release it. */
  private async end(term: Term, bound: PoolClient | null): Promise<void> {
    const s = this.s;
    const graceful = this.stopping;
    const lease = term.lease;
    if (term.handedOff) {
      if (bound) give(bound, true);
      return;
    }
    if ((graceful || term.stepping) && !term.lostFlag) {
      try {
        let nl: Lease | null = null;
        const g = lease.generation.toString();
        if (term.stepping && lease.stepDownTo)
          nl = leaseFrom((await this._query(this.q.handoff, [s.name, s.owner, g, lease.stepDownTo], s.releaseTimeout))[0]);
        if (nl === null)
          nl = leaseFrom((await this._query(this.q.handoff, [s.name, s.owner, g, null], s.releaseTimeout))[0]);
        if (nl !== null) {
          this.info(`${s.owner} handed generation ${g} to ${nl.owner}`);
          if (bound) give(bound, true);
          if (graceful && s.handoffLinger > 0) await sleep(s.handoffLinger);
          return;
        }
      } catch (err) {
        this.warn(`could not hand the lease over, releasing it: ${(err as Error).message}`);
      }
    }
    await this.release(lease, bound);
    if (graceful && !term.lostFlag && s.handoffLinger > 0) await sleep(s.handoffLinger);
  }

  private hint(): void {
    if (this.term) this.term.hint();
    else void this.reportLeader();
  }

  /** Emits 'leader' when another instance leads in a newer term. */
  private reportLeader(): Promise<void> {
    if (this.reporting) {
      this.reportAgain = true;
      return this.reporting;
    }
    this.reporting = (async () => {
      do {
        this.reportAgain = false;
        try {
          const cur = await this.leader();
          if (cur && !this.leadingNow && !this.term && cur.owner !== this.s.owner && cur.generation > this.top) {
            this.top = cur.generation;
            this.emit('leader', cur);
          }
        } catch {
          /* the next event or term tells */
        }
      } while (this.reportAgain && !this.stopping);
      this.reporting = null;
    })();
    return this.reporting;
  }

  private began(lease: Lease): void {
    this.leadingNow = true;
    if (lease.generation > this.top) this.top = lease.generation;
    this.emit('acquired', lease);
  }

  /**
   * Waits until this Elector leads, runs fn(term), and resolves with what
   * fn resolves with.  term.signal aborts the moment the term is lost (a
   * renewal returns no lease or a permanent error, an event confirmed
   * says another term holds it, the local deadline passes) or stop() is
   * called.  When fn settles the term is released -- or handed to a
   * waiting candidate after stop() or a step-down request.  Rejects with
   * Stopped if stopped before it leads, LeadershipLost if fn rejected
   * after the term was lost, Stopped if fn rejected after stop(), and
   * otherwise with what fn rejected with.
   */
  async lead<T>(fn: Fn<T>): Promise<T> {
    if (this.stopping) throw new Stopped('hoplock: stopped');
    if (this.busy) throw new HoplockError('hoplock: lead() or run() is already running on this Elector');
    this.busy = true;
    try {
      return await this.leadOnce(fn);
    } finally {
      this.busy = false;
    }
  }

  private async leadOnce<T>(fn: Fn<T>): Promise<T> {
    const follower = new Follower(this, () => this.hint());
    await follower.start();
    void this.reportLeader();
    try {
      const won = await this.campaign();
      const term = new Term(this, won.lease, won.sent);
      this.term = term;
      this.began(term.lease);
      if (this.stopping) term.lose(null);
      const loop = term.loop(won.sent);
      let ok = false;
      let result: T | undefined;
      let fnErr: unknown;
      try {
        result = await fn(term, term.signal);
        ok = true;
      } catch (err) {
        fnErr = err;
      }
      term.finish();
      await loop;
      this.term = null;
      await this.end(term, won.bound);
      this.leadingNow = false;
      this.emit('lost', term.lease, term.cause ?? (this.stopping ? new Stopped('hoplock: stopped') : null));
      if (!this.stopping) void this.reportLeader();
      if (ok) return result as T;
      if (term.cause) throw new LeadershipLost(term.cause, fnErr);
      if (term.signal.aborted && this.stopping) throw new Stopped('hoplock: stopped', { cause: fnErr });
      throw fnErr;
    } finally {
      await follower.close();
    }
  }

  /**
   * Campaigns until stop(), emitting the events; resolves when stopped
   * (after the term, if any, was handed over or released).  A permanent
   * error is emitted as 'lost' with a null lease and tried again a ttl
   * later.
   */
  async run(): Promise<void> {
    if (this.busy) throw new HoplockError('hoplock: lead() or run() is already running on this Elector');
    this.busy = true;
    try {
      await this.runOnce();
    } finally {
      this.busy = false;
    }
  }

  private async runOnce(): Promise<void> {
    const follower = new Follower(this, () => this.hint());
    await follower.start();
    await this.reportLeader();
    try {
      while (!this.stopping) {
        let won: Won;
        try {
          won = await this.campaign();
        } catch (err) {
          if (err instanceof Stopped) break;
          if (err instanceof Permanent) {
            this.emit('lost', null, err);
            await this.sleep(this.s.ttl);
            continue;
          }
          throw err;
        }
        const term = new Term(this, won.lease, won.sent);
        this.term = term;
        this.began(term.lease);
        if (this.stopping) term.lose(null);
        const loop = term.loop(won.sent);
        if (!term.signal.aborted) await new Promise((r) => term.signal.addEventListener('abort', r, { once: true }));
        term.finish();
        await loop;
        this.term = null;
        await this.end(term, won.bound);
        this.leadingNow = false;
        this.emit('lost', term.lease, term.cause ?? new Stopped('hoplock: stopped'));
        if (!this.stopping) await this.reportLeader();
      }
    } finally {
      await follower.close();
    }
  }
}
