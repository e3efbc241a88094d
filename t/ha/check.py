"""The history checker of make test-ha.  Its input: what the clients were
told (client.py's lines), the switches the test made (when each began, and
whether it may lose what an asynchronous standby had not received), and
what the final primary holds (hoplock_history of the names, the fenced
rows of ha_writes).  Each check returns (ok, description, details).

  - generations of a name strictly increase, in the order the server
    began the terms, across every switch (the clients' grants, lost ones
    too, and the final history);
  - no two terms of a name overlap on the servers' clock (all on this
    machine): a term begins no earlier than the previous one ended, as
    recorded, and no earlier than the previous holder's last acknowledged
    expires_at, unless that term was ended early (released, its session
    ended) or its renewal may have been lost (see below);
  - every committed fenced row belongs to the term that held the lease at
    its commit: its term is in the history and began before the row was
    written, the next term began after the row's commit (its commit
    timestamp), and a term released or ended with its session ended no
    earlier than that commit (a term may lapse while its fence is open:
    the fence keeps the next term from beginning, not the clock);
  - acknowledged grants and fenced rows missing from the final primary:
    none, but those acknowledged shortly before a switch that may lose
    data (without synchronous_mode: README's Guarantees say an
    asynchronous standby may miss the last changes, and promoting it
    loses them).
"""

# how long before a lossy switch an acknowledged change may still be lost
# (the asynchronous standby's lag, and a stopped primary's last moments)
LOSS_WINDOW = 5.0

ENDED_EARLY = ("released", "session ended", "force-released", "handed off", "deleted")


def lossy_before(t, switches):
    """Whether t falls within LOSS_WINDOW before a switch that may lose
    data, or while its old primary was being stopped."""
    return any(s["lossy"] and s["start"] - LOSS_WINDOW <= t <= s["stopped"] for s in switches)


def terms_from_clients(events):
    """name -> gen -> {acq, exp, owner, t (ack), exp_t (ack of the last renewal)}"""
    terms = {}
    for e in events:
        if e["ev"] == "grant":
            d = terms.setdefault(e["name"], {}).setdefault(e["gen"], {
                "acq": e["acq"], "exp": e["exp"], "owner": e["owner"], "t": e["t"], "exp_t": e["t"]})
            if e["exp"] > d["exp"]:
                d["exp"], d["exp_t"] = e["exp"], e["t"]
        elif e["ev"] == "renew":
            d = terms.get(e["name"], {}).get(e["gen"])
            if d and e["exp"] > d["exp"]:
                d["exp"], d["exp_t"] = e["exp"], e["t"]
    return terms


def check(events, switches, history, writes):
    """events: the clients' lines, each with "owner" and "name" added;
    history: rows (name, owner, generation, acquired_us, ended_us|None, how);
    writes: rows (id, name, generation, at_us, commit_us)."""
    res = []
    hist = {}
    for name, owner, gen, acq, ended, how in history:
        hist.setdefault(name, {})[gen] = {"acq": acq, "ended": ended, "how": how, "owner": owner}
    clients = terms_from_clients(events)
    names = sorted(set(clients) | set(hist))

    # generations strictly increase in the order the terms began
    bad = []
    for name in names:
        seen = {}
        for src in (clients.get(name, {}), hist.get(name, {})):
            for g, d in src.items():
                if g in seen and seen[g]["owner"] != d["owner"]:
                    bad.append("%s: generation %d granted to %s and to %s" % (name, g, seen[g]["owner"], d["owner"]))
                seen.setdefault(g, d)
        order = sorted(seen.items(), key=lambda kv: (kv[1]["acq"], kv[0]))
        for (g1, d1), (g2, d2) in zip(order, order[1:]):
            if g2 <= g1:
                bad.append("%s: term %d began at %d after term %d began at %d" % (name, g2, d2["acq"], g1, d1["acq"]))
    res.append((not bad, "generations of every name strictly increase across every switch", bad))

    # no overlap
    bad, excused = [], []
    for name in names:
        seen = dict(clients.get(name, {}))
        for g, d in hist.get(name, {}).items():
            seen.setdefault(g, dict(d))
        gens = sorted(seen)
        for g1, g2 in zip(gens, gens[1:]):
            h1, acq2 = hist.get(name, {}).get(g1), seen[g2]["acq"]
            if h1 and h1["ended"] is not None and h1["ended"] > acq2:
                bad.append("%s: term %d ended at %d, after term %d began at %d" % (name, g1, h1["ended"], g2, acq2))
            c1 = clients.get(name, {}).get(g1)
            if c1 and c1["exp"] > acq2:
                if h1 and h1["how"] in ENDED_EARLY and h1["ended"] is not None and h1["ended"] <= acq2:
                    continue
                if lossy_before(c1["exp_t"], switches):
                    excused.append("%s: term %d's last renewal (to %d) lost; term %d began at %d" % (name, g1, c1["exp"], g2, acq2))
                    continue
                bad.append("%s: term %d was acknowledged until %d, term %d began at %d (%s)" % (
                    name, g1, c1["exp"], g2, acq2, h1["how"] if h1 else "not in the history"))
    res.append((not bad, "no two terms of a name overlap on the servers' clock", bad + excused))

    # every committed fenced row belongs to the term holding the lease
    bad = []
    for wid, name, gen, at, commit in writes:
        h = hist.get(name, {})
        d = h.get(gen)
        if d is None:
            bad.append("row %d: %s generation %d is no term of the history" % (wid, name, gen))
            continue
        if at < d["acq"]:
            bad.append("row %d written at %d, before its term %d began at %d" % (wid, at, gen, d["acq"]))
        if d["how"] in ENDED_EARLY and d["ended"] is not None and commit > d["ended"]:
            bad.append("row %d committed at %d, after its term %d ended (%s) at %d" % (wid, commit, gen, d["how"], d["ended"]))
        later = [g for g in h if g > gen]
        if later and h[min(later)]["acq"] <= commit:
            bad.append("row %d of term %d committed at %d, after term %d began at %d" % (
                wid, gen, commit, min(later), h[min(later)]["acq"]))
    res.append((not bad, "every committed fenced row belongs to the term that held the lease", bad))

    # what the final primary lost of what was acknowledged
    lost, excused = [], []
    for name in names:
        for g, d in clients.get(name, {}).items():
            if g not in hist.get(name, {}):
                (excused if lossy_before(d["t"], switches) else lost).append(
                    "%s: grant of term %d to %s, acknowledged at %.3f" % (name, g, d["owner"], d["t"]))
    rows = {w[0] for w in writes}
    for e in events:
        if e["ev"] == "write" and e["id"] not in rows:
            (excused if lossy_before(e["t"], switches) else lost).append(
                "row %d of %s term %d, acknowledged at %.3f" % (e["id"], e["name"], e["gen"], e["t"]))
    res.append((not lost, "no acknowledged grant or fenced row is lost, but what an asynchronous "
                "promotion may lose (%d of them)" % len(excused), lost + ["(allowed) " + x for x in excused]))
    return res


def selftest():
    """The checker passes a good history, and each check fails on a history
    spoiled for it alone."""
    def grant(owner, gen, acq, exp, t):
        return {"ev": "grant", "name": "n", "owner": owner, "gen": gen, "acq": acq, "exp": exp, "t": t}

    ev = [grant("a", 10, 100, 200, 1.0), grant("b", 20, 250, 400, 2.0),
          {"ev": "write", "name": "n", "owner": "a", "gen": 10, "id": 1, "at": 150, "t": 1.5}]
    hist = [("n", "a", 10, 100, 200, "expired"), ("n", "b", 20, 250, None, None)]
    writes = [(1, "n", 10, 150, 151)]
    cases = [
        (ev, hist, writes, [True] * 4),
        (ev + [grant("c", 15, 300, 500, 3.0)], hist + [("n", "c", 15, 300, None, None)], writes,
         [False, False, True, True]),                        # a generation that went back (and overlaps)
        ([grant("a", 10, 100, 260, 1.0)] + ev[1:], hist, writes, [True, False, True, True]),  # overlap
        (ev, hist, writes + [(2, "n", 10, 240, 255)], [True, True, False, True]),  # committed after the next term began
        (ev + [{"ev": "write", "name": "n", "owner": "b", "gen": 20, "id": 3, "at": 260, "t": 2.5}],
         hist, writes, [True, True, True, False]),           # an acknowledged row lost
    ]
    return all([ok for ok, _, _ in check(e, [], h, w)] == want for e, h, w, want in cases)
