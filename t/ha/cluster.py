"""The scratch high-availability cluster of make test-ha: one etcd and three
Patroni nodes of PostgreSQL, under one temporary directory, on the ports
HA_PORT (PostgreSQL 5631-5633 and Patroni's REST API 5641-5643 by default)
and HA_ETCD_PORT (23790, its peer port the next one).

Each node's patroni.yml is the README's configuration (the bootstrap
section and the post_bootstrap script of "On a Patroni cluster", read from
README.md) with this machine's names, ports and directories added.
"""

import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.request

import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
TOP = os.path.dirname(os.path.dirname(HERE))


def readme_block(marker):
    """The fenced block of README.md whose first line is marker."""
    text = open(os.path.join(TOP, "README.md")).read()
    for m in re.finditer(r"```[a-z]*\n(.*?)```", text, re.S):
        if m.group(1).startswith(marker):
            return m.group(1)
    raise RuntimeError("README.md has no block beginning with %r" % marker)


class Cluster:
    def __init__(self, bindir, base_port=5631, etcd_port=23790, nodes=3,
                 synchronous_mode=True, ttl=None, loop_wait=None):
        self.bindir = bindir
        self.dir = tempfile.mkdtemp(prefix="hoplock-ha.")
        self.etcd_port = etcd_port
        self.names = ["node%d" % (i + 1) for i in range(nodes)]
        self.pg_port = {n: base_port + i for i, n in enumerate(self.names)}
        self.api_port = {n: base_port + 10 + i for i, n in enumerate(self.names)}
        self.procs = {}
        self.etcd = None
        self.synchronous_mode = synchronous_mode
        self.ttl, self.loop_wait = ttl, loop_wait

    # -- the configuration ------------------------------------------------

    def node_config(self, name):
        boot = yaml.safe_load(readme_block("# patroni.yml: the part every node shares"))
        script = os.path.join(self.dir, "hoplock-bootstrap.sh")
        if not os.path.exists(script):
            with open(script, "w") as f:
                f.write(readme_block("#!/bin/sh\n# hoplock-bootstrap.sh"))
            os.chmod(script, 0o755)
        boot["bootstrap"]["post_bootstrap"] = script
        dcs = self.dcs = boot["bootstrap"]["dcs"]
        # the checker reads each fenced row's commit time (a parameter
        # Patroni takes from the cluster-wide configuration only)
        dcs["postgresql"]["parameters"]["track_commit_timestamp"] = "on"
        dcs["synchronous_mode"] = self.synchronous_mode
        if self.ttl:
            dcs["ttl"] = self.ttl
            dcs["loop_wait"] = self.loop_wait or dcs["loop_wait"]
            dcs["retry_timeout"] = max(3, (dcs["ttl"] - dcs["loop_wait"]) // 2 - 1)
        port, api = self.pg_port[name], self.api_port[name]
        cfg = {
            "scope": "hoplock-ha",
            "name": name,
            "log": {"dir": os.path.join(self.dir, name + ".log.d"), "level": "INFO"},
            "restapi": {"listen": "127.0.0.1:%d" % api,
                        "connect_address": "127.0.0.1:%d" % api},
            "etcd3": {"hosts": "127.0.0.1:%d" % self.etcd_port},
            "postgresql": {
                "listen": "127.0.0.1:%d" % port,
                "connect_address": "127.0.0.1:%d" % port,
                "data_dir": os.path.join(self.dir, name),
                "bin_dir": self.bindir,
                "pgpass": os.path.join(self.dir, name + ".pgpass"),
                "authentication": {
                    "superuser": {"username": "postgres", "password": "ha-super"},
                    "replication": {"username": "replicator", "password": "ha-repl"},
                },
                "parameters": {"unix_socket_directories": "/tmp"},
                # (a replica's copy need not wait for a spread checkpoint)
                "basebackup": [{"checkpoint": "fast"}],
                "pg_hba": ["local all all trust",
                           "host all all 127.0.0.1/32 trust",
                           "host replication replicator 127.0.0.1/32 trust"],
            },
        }
        for k, v in boot.items():
            if k == "postgresql":
                for kk, vv in v.items():
                    if kk == "parameters":
                        cfg["postgresql"]["parameters"].update(vv)
                    else:
                        cfg["postgresql"][kk] = vv
            else:
                cfg[k] = v
        os.makedirs(cfg["log"]["dir"], exist_ok=True)
        path = os.path.join(self.dir, name + ".yml")
        with open(path, "w") as f:
            yaml.safe_dump(cfg, f)
        return path

    # -- processes ----------------------------------------------------------

    def start_etcd(self):
        d = os.path.join(self.dir, "etcd")
        client = "http://127.0.0.1:%d" % self.etcd_port
        peer = "http://127.0.0.1:%d" % (self.etcd_port + 1)
        log = open(os.path.join(self.dir, "etcd.log"), "w")
        self.etcd = subprocess.Popen(
            ["etcd", "--name", "ha", "--data-dir", d,
             "--listen-client-urls", client, "--advertise-client-urls", client,
             "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
             "--initial-cluster", "ha=" + peer],
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.time() + 30
        while time.time() < deadline:
            try:
                urllib.request.urlopen(client + "/health", timeout=1).read()
                return
            except Exception:
                time.sleep(0.2)
        raise RuntimeError("etcd did not start (see %s/etcd.log)" % self.dir)

    def start_node(self, name):
        path = self.node_config(name)
        log = open(os.path.join(self.dir, name + ".out"), "a")
        self.procs[name] = subprocess.Popen(["patroni", path], stdout=log,
                                            stderr=subprocess.STDOUT,
                                            start_new_session=True)

    def kill_patroni(self, name):
        """SIGKILL to the node's Patroni (its PostgreSQL lives on)."""
        p = self.procs.pop(name, None)
        if p:
            p.kill()
            p.wait()

    def stop_node(self, name):
        p = self.procs.pop(name, None)
        if p and p.poll() is None:
            p.send_signal(signal.SIGTERM)
            try:
                p.wait(60)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()

    def pg_ctl(self, name, *args):
        return subprocess.run([os.path.join(self.bindir, "pg_ctl"), "-D",
                               os.path.join(self.dir, name)] + list(args),
                              capture_output=True, text=True, timeout=120)

    def postmaster_pid(self, name):
        with open(os.path.join(self.dir, name, "postmaster.pid")) as f:
            return int(f.readline())

    # -- state ----------------------------------------------------------------

    def api(self, name, path="patroni"):
        try:
            with urllib.request.urlopen("http://127.0.0.1:%d/%s" % (self.api_port[name], path),
                                        timeout=2) as r:
                return json.loads(r.read())
        except urllib.error.HTTPError as e:
            return json.loads(e.read() or b"{}")
        except Exception:
            return None

    def members(self):
        """patronictl list's members: name -> (role, state, timeline)."""
        for name in self.names:
            c = self.api(name, "cluster")
            if c and "members" in c:
                return {m["name"]: (m.get("role"), m.get("state"), m.get("timeline"))
                        for m in c["members"]}
        return {}

    def leader(self):
        for n, (role, state, _) in self.members().items():
            if role == "leader" and state == "running":
                return n
        return None

    def wait_healthy(self, n=None, timeout=120, sync=None):
        """Until a leader runs and every node streams (n of them)."""
        n = n or len(self.names)
        deadline = time.time() + timeout
        while time.time() < deadline:
            m = self.members()
            running = [k for k, v in m.items() if v[1] in ("running", "streaming")]
            leader = [k for k, v in m.items() if v[0] == "leader" and v[1] == "running"]
            syncs = [k for k, v in m.items() if v[0] == "sync_standby"]
            if len(running) >= n and leader and (not sync or syncs):
                return leader[0]
            time.sleep(0.5)
        raise RuntimeError("cluster not healthy after %ds: %r" % (timeout, self.members()))

    def patronictl(self, *args):
        return subprocess.run(["patronictl", "-c", os.path.join(self.dir, self.names[0] + ".yml")]
                              + list(args), capture_output=True, text=True, timeout=120)

    def dsn(self, dbname="app", user="postgres"):
        return ("host=%s port=%s dbname=%s user=%s target_session_attrs=read-write connect_timeout=2"
                % (",".join("127.0.0.1" for _ in self.names),
                   ",".join(str(self.pg_port[n]) for n in self.names), dbname, user))

    def node_dsn(self, name, dbname="app"):
        return "host=127.0.0.1 port=%d dbname=%s user=postgres connect_timeout=2" % (
            self.pg_port[name], dbname)

    def start(self):
        self.start_etcd()
        for name in self.names:
            self.start_node(name)
            if name == self.names[0]:
                self.wait_healthy(1, timeout=120)

    def shutdown(self, keep=False):
        for name in list(self.procs):
            self.stop_node(name)
        for name in self.names:
            if os.path.exists(os.path.join(self.dir, name, "postmaster.pid")):
                self.pg_ctl(name, "stop", "-m", "immediate")
        if self.etcd:
            self.etcd.terminate()
            self.etcd.wait()
        if not keep:
            shutil.rmtree(self.dir, ignore_errors=True)
