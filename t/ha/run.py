#!/usr/bin/env python3
"""make test-ha's driver (scripts/test-ha runs it as the postgres user):
a Patroni cluster (cluster.py), eight electors (client.py) on three names,
switches of the primary while they run, then the history checker
(check.py) over what the clients were told and what the last primary
holds.  Prints "ok"/"not ok" lines, the failover figures ("measure:"), and
last "N passed, M failed".

  run.py BINDIR [--short] [--keep]

--short (the .ci/run stage): synchronous_mode on, a switchover and a
kill -9 of the primary's postmaster.  The whole run adds a primary
stopped in immediate mode and rejoining with pg_rewind, then
synchronous_mode off: a failover to an asynchronous replica, kill -9,
immediate stop and pg_rewind again.
"""

import json
import os
import signal
import subprocess
import sys
import threading
import time

import psycopg2

from cluster import Cluster
import check

HERE = os.path.dirname(os.path.abspath(__file__))
bindir = sys.argv[1]
short = "--short" in sys.argv
keep = "--keep" in sys.argv

# name -> (ttl seconds, session-bound, clients)
NAMES = {
    "ha-ttl-long": (30, False, 3),    # longer than Patroni's takeover: the term may survive it
    "ha-ttl-short": (4, False, 2),    # shorter: it lapses, the next term begins on the new primary
    "ha-session": (30, True, 3),      # session-bound: ends with its connection
}

passed = failed = 0


def ok(cond, desc, details=()):
    global passed, failed
    print("%s - %s" % ("ok" if cond else "not ok", desc), flush=True)
    for d in ([] if cond else list(details)[:25]):
        print("    " + d, flush=True)
    if cond:
        passed += 1
    else:
        failed += 1
    return cond


def q(dsn, sql, args=(), all_rows=False):
    conn = psycopg2.connect(dsn, options="-c statement_timeout=10s")
    conn.autocommit = True
    try:
        cur = conn.cursor()
        cur.execute(sql, args)
        if cur.description is None:
            return None
        return cur.fetchall() if all_rows else cur.fetchone()
    finally:
        conn.close()


def poll(fn, timeout, every=0.25):
    deadline = time.time() + timeout
    while True:
        try:
            r = fn()
            if r:
                return r
        except psycopg2.Error:
            pass
        if time.time() > deadline:
            return None
        time.sleep(every)


# (HA_PATRONI_TTL and HA_PATRONI_LOOP_WAIT: other values than the README's,
# for bench/HISTORY.md's comparison)
c = Cluster(bindir, base_port=int(os.environ.get("HA_PORT", 5631)),
            etcd_port=int(os.environ.get("HA_ETCD_PORT", 23790)),
            ttl=int(os.environ.get("HA_PATRONI_TTL") or 0) or None,
            loop_wait=int(os.environ.get("HA_PATRONI_LOOP_WAIT") or 0) or None)
clients = []
switches = []
sync_mode = True


def start_clients():
    i = 0
    for name, (ttl, sb, n) in NAMES.items():
        for _ in range(n):
            owner = "c%d" % i
            log = open(os.path.join(c.dir, owner + ".jsonl"), "w")
            p = subprocess.Popen([sys.executable, os.path.join(HERE, "client.py"), c.dsn(), name, owner,
                                  str(ttl), "1" if sb else "0"], stdout=log,
                                 stderr=open(os.path.join(c.dir, owner + ".err"), "w"))
            clients.append((owner, name, p))
            i += 1


def client_events():
    out = []
    for owner, name, _ in clients:
        with open(os.path.join(c.dir, owner + ".jsonl")) as f:
            for line in f:
                e = json.loads(line)
                e["owner"], e["name"] = owner, name
                out.append(e)
    return out


def primary():
    """(port, postmaster start) of the node a read-write connection reaches."""
    return q(c.dsn(), "SELECT pg_catalog.inet_server_port(), pg_catalog.pg_postmaster_start_time()")


def switch(kind, action, lossy, after=None):
    """Makes one switch: an orphan term that lapses meanwhile, the action,
    then waits for a new primary (another node, or the same restarted) and
    checks that its expiry worker runs and announces the orphan's expiry."""
    old = c.wait_healthy(3, timeout=120, sync=sync_mode)
    old_port, old_start = primary()
    orphan = "ha-orphan-%d" % len(switches)
    og = q(c.node_dsn(old), "SELECT generation FROM hoplock.hoplock_acquire(%s::text, 'orphan'::text, '1 s'::interval)",
           (orphan,))[0]
    t0 = time.time()
    action(old)
    stopped = time.time()
    new = poll(lambda: (lambda p: p if p[0] != old_port or p[1] > old_start else None)(primary()), 180)
    t_new = time.time()
    if not ok(new is not None, "%s: a new primary accepts writes (%.1f s)" % (kind, t_new - t0)):
        return
    newname = [n for n in c.names if c.pg_port[n] == new[0]][0]
    switches.append({"kind": kind, "start": t0, "stopped": max(stopped, t0), "new_at": t_new,
                     "lossy": lossy, "old": old, "new": newname})
    ndsn = c.node_dsn(newname)
    w = poll(lambda: q(ndsn, "SELECT state, pid FROM hoplock.hoplock_workers WHERE datname = 'app' "
                             "AND state IN ('sleeping', 'scanning', 'announcing')"), 30)
    ok(w is not None, "%s: the expiry worker runs on the new primary %s (%s)" % (kind, newname, w and w[0]))

    def orphan_state():
        r = q(ndsn, "SELECT coalesce(how, 'running') FROM hoplock.hoplock_history WHERE name = %s "
                    "AND generation = %s", (orphan, og))
        if r is None:
            return ("lost",) if lossy else None
        return r if r[0] == "expired" else None
    how = poll(orphan_state, 30)
    ok(how is not None and how[0] in ("expired", "lost"),
       "%s: the term that lapsed meanwhile is announced expired on the new primary (%s)" % (kind, how and how[0]))
    if after:
        after(old, newname)
    c.wait_healthy(3, timeout=180)
    time.sleep(6)


def do_switchover(old):
    # (with synchronous_mode, Patroni switches over to the synchronous
    # standby only)
    m = c.members()
    cand = sorted((n for n, v in m.items() if v[0] in ("sync_standby", "replica") and n != old),
                  key=lambda n: m[n][0] != "sync_standby")[0]
    r = c.patronictl("switchover", "--leader", old, "--candidate", cand, "--force")
    ok(r.returncode == 0, "patronictl switchover %s -> %s" % (old, cand), (r.stdout + r.stderr).splitlines()[-3:])


def do_failover_async(old):
    cand = [n for n, v in c.members().items() if v[0] == "replica" and n != old][0]
    r = c.patronictl("failover", "--candidate", cand, "--force")
    ok(r.returncode == 0, "patronictl failover to the asynchronous replica %s" % cand,
       (r.stdout + r.stderr).splitlines()[-3:])


def do_kill9(old):
    os.kill(c.postmaster_pid(old), signal.SIGKILL)


def do_immediate(old):
    """Patroni of the primary killed, its walsenders held back while the
    clients write on, then the server stopped in immediate mode: the node
    has WAL no standby received, and must be rewound to rejoin."""
    c.kill_patroni(old)
    pids = q(c.node_dsn(old), "SELECT pid FROM pg_catalog.pg_stat_replication", all_rows=True)
    for (pid,) in pids:
        os.kill(pid, signal.SIGSTOP)
    # a grant no standby receives: acknowledged at once without
    # synchronous_mode (and lost with the old primary), never with it
    unseen["name"], unseen["gen"] = "ha-unseen-%d" % len(switches), None

    def grant():
        try:
            unseen["gen"] = q(c.node_dsn(old), "SELECT generation FROM hoplock.hoplock_acquire(%s::text, "
                                               "'old-primary'::text, '1 min'::interval)", (unseen["name"],))[0]
        except psycopg2.Error:
            pass
    threading.Thread(target=grant, daemon=True).start()
    time.sleep(1.5)
    unseen["acked"] = unseen["gen"] is not None
    c.pg_ctl(old, "stop", "-m", "immediate")


unseen = {}


def unseen_grant(old, new):
    """After do_immediate: the grant no standby received.  With
    synchronous_mode it was not acknowledged; without, it was, and the
    name's next term, on the new primary, has a greater generation."""
    g = q(c.node_dsn(new), "SELECT generation FROM hoplock.hoplock_acquire(%s::text, 'new-primary'::text, "
                           "'1 min'::interval)", (unseen["name"],))
    if sync_mode:
        ok(not unseen["acked"], "synchronous_mode: a grant no standby received is not acknowledged")
    else:
        ok(unseen["acked"] and g is not None and g[0] is not None and g[0] > unseen["gen"],
           "a grant lost with the asynchronous primary: the name's next term has a greater generation (%s > %s)"
           % (g and g[0], unseen["gen"]))


def rejoin(old, new):
    unseen_grant(old, new)
    logf = os.path.join(c.dir, old + ".log.d", "patroni.log")
    before = os.path.getsize(logf)
    c.start_node(old)
    m = poll(lambda: c.members().get(old, (None, None, None))[1] in ("running", "streaming"), 180, 1)

    def rewound():
        with open(logf) as f:
            f.seek(before)
            text = f.read()
            return ("running pg_rewind from" in text and "pg_rewind exit code=0" in text) or None
    ok(m and rewound(), "the old primary %s rejoins as a replica, rewound with pg_rewind" % old)


def set_sync(on):
    global sync_mode
    r = c.patronictl("edit-config", "--set", "synchronous_mode=%s" % ("true" if on else "false"), "--force")
    ok(r.returncode == 0, "patronictl edit-config synchronous_mode=%s" % on, (r.stdout + r.stderr).splitlines()[-3:])
    sync_mode = on
    poll(lambda: any(v[0] == "sync_standby" for v in c.members().values()) == on, 60, 1)


def figures(events):
    """From each switch's start to the first fenced write of each name on a
    connection to the new primary made after it, with the term's
    generation: same or next."""
    out = []
    for s in switches:
        row = []
        for name in NAMES:
            conn_at, gen_before, first = {}, None, None
            for e in sorted(events, key=lambda e: e["t"]):
                if e["name"] != name:
                    continue
                if e["ev"] == "write" and e["t"] < s["start"]:
                    gen_before = e["gen"]
                if e["ev"] == "conn" and e["t"] > s["start"]:
                    if e["port"] == c.pg_port[s["new"]]:
                        conn_at.setdefault(e["owner"], e["t"])
                    else:
                        conn_at.pop(e["owner"], None)
                if (e["ev"] == "write" and not e.get("stale") and e["owner"] in conn_at
                        and e["t"] > s["start"]):
                    first = e
                    break
            if first:
                row.append("%s %.2f s (%s term; %.0f ms after its client connected)" % (
                    name, first["t"] - s["start"], "same" if first["gen"] == gen_before else "next",
                    (first["t"] - conn_at[first["owner"]]) * 1000))
            else:
                row.append("%s none" % name)
        out.append("measure: %s (synchronous_mode %s), switch start -> first fenced write: %s" % (
            s["kind"], "off" if s["lossy"] else "on", "; ".join(row)))
    return out


class Timeout(Exception):
    pass


def timeout(*_):
    raise Timeout("the run took longer than %d s" % limit)


# a bound on the whole run (a machine too loaded to run it, a hang), and a
# clean end on SIGTERM: either way the cluster is stopped and counted
limit = int(os.environ.get("HA_TIMEOUT") or (300 if short else 900))
signal.signal(signal.SIGALRM, timeout)
signal.signal(signal.SIGTERM, timeout)
signal.alarm(limit)
try:
    t = time.time()
    c.start()
    leader = c.wait_healthy(3, timeout=180, sync=True)
    ok(True, "Patroni cluster of 3 nodes up, from the README's configuration (%.1f s)" % (time.time() - t))
    ext = q(c.node_dsn(leader), "SELECT extversion FROM pg_catalog.pg_extension WHERE extname = 'hoplock'")
    ok(ext is not None, "hoplock created by post_bootstrap (%s)" % (ext and ext[0]))
    spl = q(c.node_dsn(leader), "SHOW shared_preload_libraries")[0]
    ok("hoplock" in spl, "hoplock preloaded through Patroni's configuration (%s)" % spl)
    for table in ("ha_writes", "ha_unfenced"):
        q(c.node_dsn(leader), """CREATE TABLE public.%s (
            id bigserial PRIMARY KEY, name text NOT NULL, owner text NOT NULL,
            generation bigint NOT NULL, at timestamptz NOT NULL DEFAULT pg_catalog.clock_timestamp())""" % table)
    start_clients()
    time.sleep(6)

    switch("switchover", do_switchover, False)
    switch("kill -9 of the primary's postmaster", do_kill9, False)
    if not short:
        switch("primary stopped in immediate mode", do_immediate, False, rejoin)
        set_sync(False)
        time.sleep(3)
        switch("failover to an asynchronous replica", do_failover_async, True)
        switch("kill -9 of the primary's postmaster, asynchronous", do_kill9, True)
        switch("primary stopped in immediate mode, asynchronous", do_immediate, True, rejoin)

    for _, _, p in clients:
        p.send_signal(signal.SIGTERM)
    for _, _, p in clients:
        try:
            p.wait(15)
        except subprocess.TimeoutExpired:
            p.kill()
    events = client_events()
    last = c.wait_healthy(3, timeout=60)
    dsn = c.node_dsn(last)
    names = list(NAMES)
    hist = q(dsn, """SELECT name, owner, generation, (extract(epoch from acquired_at) * 1000000)::bigint,
                            (extract(epoch from ended_at) * 1000000)::bigint, how
                       FROM hoplock.hoplock_history WHERE name = ANY(%s)""", (names,), all_rows=True)
    rows = """SELECT id, name, generation, (extract(epoch from at) * 1000000)::bigint,
                     (extract(epoch from pg_catalog.pg_xact_commit_timestamp(xmin)) * 1000000)::bigint
                FROM public.%s"""
    writes = q(dsn, rows % "ha_writes", all_rows=True)
    unfenced = q(dsn, rows % "ha_unfenced", all_rows=True)
    n = {k: sum(1 for e in events if e["ev"] == k) for k in ("grant", "renew", "write", "refused", "lost")}
    print("# %d terms granted, %d renewals, %d fenced rows acknowledged (%d on the last primary), "
          "%d fences refused, %d terms lost, %d switches" % (
              n["grant"], n["renew"], n["write"], len(writes), n["refused"], n["lost"], len(switches)))
    ok(n["write"] > 0 and n["grant"] >= len(NAMES), "the clients led and wrote")
    ok(check.selftest(), "the checker finds violations in bad histories")
    # the control: the stale writes made without the fence
    bad = {d.split()[1] for d in check.check([], [], hist, unfenced)[2][2]}
    print("# control: %d of %d writes made without the fence after a term was lost fall outside their term"
          % (len(bad), len(unfenced)))
    if not short:
        ok(bad, "control: the checker finds writes made without the fence outside their term")
    n_allowed = 0
    for good, desc, details in check.check(events, switches, hist, writes):
        ok(good, desc, details)
        allowed = [d for d in details if d.startswith("(allowed)")]
        n_allowed += len(allowed)
        if allowed:
            print("# allowed: %d grants, %d fenced rows, %d renewals" % tuple(
                sum(1 for d in allowed if w in d) for w in ("grant of", "row ", "renewal")))
    # what the asynchronous promotions lost is found as a loss when the
    # same history is judged as if every switch had been synchronous
    if n_allowed:
        strict = check.check(events, [dict(s, lossy=False) for s in switches], hist, writes)
        found = sum(len(d) for good, _, d in strict if not good)
        ok(found > 0, "judged as if synchronous, the asynchronous promotions' losses are violations (%d)" % found)
    for line in figures(events):
        print(line)
    print("# Patroni ttl %s s, loop_wait %s s; client ttls %s" % (
        c.dcs["ttl"], c.dcs["loop_wait"], ", ".join("%s %d s" % (k, v[0]) for k, v in NAMES.items())))
except BaseException as e:
    import traceback
    traceback.print_exc()
    ok(False, "the run ended early: %s" % e)
finally:
    signal.alarm(0)
    for _, _, p in clients:
        if p.poll() is None:
            p.kill()
    if failed:
        print("# the cluster's directory: %s" % c.dir)
    c.shutdown(keep=keep or failed > 0)
print("%d passed, %d failed" % (passed, failed))
sys.exit(1 if failed else 0)
